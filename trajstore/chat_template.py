"""Chat-template token accounting: cut a chat into the exact token spans a model conditioned on.

:func:`prompt_tokens` renders the opening messages with the generation prompt,
:func:`action_text` turns generated ids back into assistant content, and
:func:`observation_tokens` gives the ids between one action and the next (the rest of the
assistant turn, the environment's reply, the next generation prompt). Torch-free; used by the
rollout worker (:mod:`trajstore.trainer.rollout_worker`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trajstore.errors import TrajstoreError

Message = dict[str, str]
"""One chat message: ``{"role": "system" | "user" | "assistant", "content": str}``."""


def _render(tokenizer: Any, messages: Sequence[Message], *, add_generation_prompt: bool) -> str:
    text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=add_generation_prompt)
    if not isinstance(text, str):
        raise TrajstoreError(f"{type(tokenizer).__name__}.apply_chat_template did not return text")
    return text


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def prompt_tokens(tokenizer: Any, messages: Sequence[Message]) -> list[int]:
    """Token ids of the opening messages rendered with the chat template, ending with the
    assistant header (the generation prompt): the prompt span of a trajectory.

    Raises:
        TrajstoreError: the tokenizer has no chat template.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise TrajstoreError(f"tokenizer {getattr(tokenizer, 'name_or_path', '?')!r} has no chat template")
    return _encode(tokenizer, _render(tokenizer, messages, add_generation_prompt=True))


def action_text(tokenizer: Any, action_ids: Sequence[int]) -> str:
    """The assistant message content of an action: its decoded text without a trailing
    end-of-turn token (special tokens elsewhere are kept, so the text is exactly what was
    generated)."""
    ids = list(action_ids)
    eos = tokenizer.eos_token_id
    if ids and eos is not None and ids[-1] == eos:
        ids = ids[:-1]
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def observation_tokens(tokenizer: Any, messages: Sequence[Message], action_ids: Sequence[int], reply: str) -> list[int]:
    """Token ids between an action's last generated token and the next action's first one.

    That is the chat template's rendering of: the rest of the assistant turn the model did not
    generate (e.g. the newline after ``<|im_end|>``, or the whole end-of-turn marker when
    generation hit the token limit), the environment's reply as a user message, and the next
    assistant header. Concatenating prompt, action and observation ids therefore gives exactly
    the rendering of the whole conversation, which is what the model conditions on next.

    Args:
        messages: the conversation before the action (system, user, assistant, user, ...).
        action_ids: the generated token ids of the action (with the end token when it stopped).
        reply: the environment's answer (becomes a user message).

    Raises:
        TrajstoreError: the chat template is not prefix-stable (rendering a longer
            conversation changes the text of an earlier turn), so no exact split exists.
    """
    before = _render(tokenizer, messages, add_generation_prompt=True)
    generated = tokenizer.decode(list(action_ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)
    content = action_text(tokenizer, action_ids)
    after = _render(tokenizer, [*messages, {"role": "assistant", "content": content},
                                {"role": "user", "content": reply}], add_generation_prompt=True)
    head = before + generated
    if not after.startswith(head):
        raise TrajstoreError(
            f"the chat template of {getattr(tokenizer, 'name_or_path', '?')!r} is not prefix-stable: the rendered "
            f"conversation does not start with the previous turns plus the generated text {generated[-40:]!r}")
    return _encode(tokenizer, after[len(head):])

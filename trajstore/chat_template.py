"""Chat-template token accounting: which rendered text the model was sent and which it generated.

One convention for every trajectory, engine-sampled or re-tokenized: an action
holds only what the model generated, closed by its own end-of-turn token. The template's
generation prompt (``<|im_start|>assistant\\n`` in ChatML) belongs to the span before the
action, the template's separator after the end-of-turn token (ChatML's ``\\n``) to the span
after it. The boundaries are derived from each template itself, never from one template's
strings: the generation prompt is the difference between rendering with and without
``add_generation_prompt``, and the end-of-turn / separator split comes from rendering a probe
assistant turn (:func:`turn_markers`).

Used by the rollout worker (:mod:`trajstore.trainer.apps.rollout_worker`: :func:`prompt_tokens`,
:func:`action_text`, :func:`observation_tokens`) and by ingest (:mod:`trajstore.ingest.builders.render`:
:func:`render_chat`, :func:`turn_markers`, :func:`generated_text`). Torch-free.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trajstore.errors import TrajstoreError

Message = dict[str, str]
"""One chat message: ``{"role": "system" | "user" | "assistant", "content": str}``."""

_PROBE_USER = "\u2063probe-user\u2063"
_PROBE_ASSISTANT = "\u2063probe-assistant\u2063"
"""Probe contents (wrapped in U+2063, which no template writes) used to find a template's turn markers."""


def template_source(tokenizer: Any) -> str:
    """The tokenizer's chat template as one string ("" when it has none; named templates joined)."""
    tpl = getattr(tokenizer, "chat_template", None) or ""
    if isinstance(tpl, dict):
        return " ".join(str(v) for v in tpl.values())
    return str(tpl)


def template_renders_tools(tokenizer: Any) -> bool:
    """True when the chat template reads a ``tools`` variable (so ``tools=`` reaches the prompt)."""
    src = template_source(tokenizer)
    return "tools" in src.replace("tool_calls", "")


def render_chat(tokenizer: Any, messages: Sequence[dict[str, Any]], *, add_generation_prompt: bool,
                tools: list[dict[str, Any]] | None = None) -> str:
    """The chat template's text for `messages` (``""`` for none).

    Args:
        messages: OpenAI-style message dicts.
        add_generation_prompt: append the template's assistant header (what an engine adds
            before sampling a reply).
        tools: OpenAI tool definitions, passed as ``tools=`` (only when not None).

    Raises:
        TrajstoreError: the tokenizer has no chat template, or the template did not return text.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise TrajstoreError(f"tokenizer {getattr(tokenizer, 'name_or_path', '?')!r} has no chat template")
    if not messages and not add_generation_prompt:
        return ""
    kw: dict[str, Any] = {"tools": tools} if tools is not None else {}
    text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=add_generation_prompt,
                                         **kw)
    if not isinstance(text, str):
        raise TrajstoreError(f"{type(tokenizer).__name__}.apply_chat_template did not return text")
    return text


class ChatRenderer:
    """Renders many conversations that share their messages with one tokenizer's chat template:
    the same text as :func:`render_chat`, without preparing every message again on each call.

    ``apply_chat_template`` copies and normalizes every message of the conversation on each call
    (drops ``None`` values, rebuilds plain JSON data for the sandbox, aliases reasoning fields)
    before the jinja render. Ingest renders each call's growing context, so a
    conversation of N calls is normalized O(N^2) times. Here each message is prepared once
    (:meth:`prepare`, the same steps) and the compiled template is rendered with the same
    variables (``messages``, ``tools``, ``documents``, ``add_generation_prompt`` and the
    tokenizer's special tokens). Before use the fast path is checked against
    ``apply_chat_template`` on a probe conversation with a system prompt, tools, reasoning, a
    tool call and a tool result; on any difference, or when transformers' helpers are not
    importable, every render goes through :func:`render_chat`.
    """

    def __init__(self, tokenizer: Any):
        self.tok = tokenizer
        key = (id(tokenizer), template_source(tokenizer), repr(getattr(tokenizer, "special_tokens_map", None)))
        if key not in _FAST:
            _FAST[key] = _fast_path(tokenizer)
        self._fast = _FAST[key]

    @property
    def fast(self) -> bool:
        """True when renders skip ``apply_chat_template`` (checked equal on the probe)."""
        return self._fast is not None

    def prepare(self, message: dict[str, Any]) -> dict[str, Any]:
        """`message` as the template will see it (on the fast path: normalized once; the
        sandbox is immutable, so a prepared message can be shared by many renders)."""
        return _prepare(message) if self._fast is not None else message

    def render(self, prepared: Sequence[dict[str, Any]], *, add_generation_prompt: bool,
               tools: list[dict[str, Any]] | None = None) -> str:
        """:func:`render_chat` of messages returned by :meth:`prepare` (same arguments, errors and text)."""
        fast = self._fast
        if fast is None or not prepared or (tools is not None and not all(isinstance(t, dict) for t in tools)):
            return render_chat(self.tok, prepared, add_generation_prompt=add_generation_prompt, tools=tools)
        compiled, plain, variables = fast[tools is not None]
        text = compiled.render(messages=list(prepared), tools=None if tools is None else plain(tools), documents=None,
                               add_generation_prompt=add_generation_prompt, **variables)
        if not isinstance(text, str):
            raise TrajstoreError("the chat template did not return text")
        return text


_FAST: dict[tuple[int, str, str], Any] = {}


def _prepare(message: dict[str, Any]) -> dict[str, Any]:
    # transformers (the train extra) loads only when a model or tokenizer is needed
    from transformers.utils.chat_template_utils import _alias_reasoning_fields, _plain_template_data

    (out,) = _alias_reasoning_fields([_plain_template_data({k: v for k, v in message.items() if v is not None})])
    return out


_PROBE_TOOLS = [{"type": "function", "function": {"name": "probe_tool", "description": "Probe.", "parameters": {
    "type": "object", "properties": {"x": {"type": "string", "description": "an argument"}}, "required": ["x"]}}}]
_PROBE_CHAT = [
    {"role": "system", "content": "S"}, {"role": "user", "content": "U"},
    {"role": "assistant", "content": "A", "reasoning_content": "R", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "probe_tool", "arguments": '{"x": "1"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "O"}, {"role": "assistant", "content": "B", "tool_calls": None},
    {"role": "user", "content": "V"}]


def _fast_path(tokenizer: Any) -> Any:
    """{has tools: (compiled template, plain-data function, template variables)}, or None when
    the fast path is unavailable or renders the probe differently from ``apply_chat_template``."""
    try:
        # transformers (the train extra) loads only when a model or tokenizer is needed
        from transformers.utils.chat_template_utils import _compile_jinja_template, _plain_template_data

        if not getattr(tokenizer, "chat_template", None):
            return None
        variables = _plain_template_data(dict(tokenizer.special_tokens_map))
        fast = {has: (_compile_jinja_template(tokenizer.get_chat_template(None, _PROBE_TOOLS if has else None)),
                      _plain_template_data, variables) for has in (False, True)}
        probe = ChatRenderer.__new__(ChatRenderer)
        probe.tok, probe._fast = tokenizer, fast
        for n in (2, 3, len(_PROBE_CHAT)):
            msgs = [dict(m) for m in _PROBE_CHAT[:n]]
            for gen in (False, True):
                for tools in (None, _PROBE_TOOLS):
                    if probe.render([_prepare(m) for m in msgs], add_generation_prompt=gen, tools=tools) != \
                            render_chat(tokenizer, msgs, add_generation_prompt=gen, tools=tools):
                        return None
        return fast
    except Exception:  # an older/newer transformers, or a template that rejects the probe
        return None


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of `text` exactly as written (no BOS/EOS added)."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


@dataclass(frozen=True)
class TurnMarkers:
    """What a template writes after an assistant message's content.

    Attributes:
        end_of_turn: the text up to and including the last special token of that closing
            (``<|im_end|>`` in ChatML, ``<|eot_id|>`` in Llama 3): the model generates it, so it
            belongs to the action. ``""`` when the closing holds no special token (then the
            model's stop token is not in the rendered text at all).
        separator: the rest of the closing (ChatML's ``\\n``; ``""`` in Llama 3): written by
            the template, not generated, so it belongs to the span after the action.
    """

    end_of_turn: str
    separator: str


def _special_ids(tokenizer: Any) -> set[int]:
    ids = set(getattr(tokenizer, "all_special_ids", None) or [])
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    ids.update(i for i, t in decoder.items() if getattr(t, "special", False))
    return ids


_MARKERS: dict[tuple[int, str], TurnMarkers] = {}


def turn_markers(tokenizer: Any) -> TurnMarkers:
    """The end-of-turn text and separator the template writes after an assistant message.

    Derived from the template: a probe conversation (user, assistant) is rendered and the text
    after the assistant's content is split after its last special token. Cached per tokenizer
    and template. A template that cannot render the probe gets ``TurnMarkers("", "")`` (then the
    whole closing stays in the action).
    """
    key = (id(tokenizer), template_source(tokenizer))
    got = _MARKERS.get(key)
    if got is not None:
        return got
    try:
        text = render_chat(tokenizer, [{"role": "user", "content": _PROBE_USER},
                                       {"role": "assistant", "content": _PROBE_ASSISTANT}],
                           add_generation_prompt=False)
    except Exception:  # jinja raises TemplateError / TypeError for shapes it rejects
        text = ""
    at = text.rfind(_PROBE_ASSISTANT)
    markers = TurnMarkers("", "")
    if at >= 0:
        closing = text[at + len(_PROBE_ASSISTANT):]
        enc = tokenizer(closing, add_special_tokens=False, return_offsets_mapping=True)
        special = _special_ids(tokenizer)
        ends = [off[1] for tid, off in zip(enc["input_ids"], enc["offset_mapping"]) if tid in special]
        cut = max(ends) if ends else 0
        markers = TurnMarkers(closing[:cut], closing[cut:])
    _MARKERS[key] = markers
    return markers


def generated_text(prompt_text: str, turn_text: str, markers: TurnMarkers, *, stopped: bool = True) -> str | None:
    """What the model generated for an assistant turn, as the template renders it.

    Args:
        prompt_text: the render of the messages before the turn with the generation prompt.
        turn_text: the render of the same messages plus the assistant message (no generation prompt).
        markers: the template's :func:`turn_markers`.
        stopped: the model ended the turn itself; False (``finish_reason = length``) leaves the
            end-of-turn text out (the template writes it, the model never sampled it).

    Returns:
        The turn's text after the generation prompt, without the separator (and without the
        end-of-turn text when not `stopped`); None when `turn_text` does not start with
        `prompt_text` (the template renders the turn with a header other than its generation prompt).
    """
    if not turn_text.startswith(prompt_text):
        return None
    g = turn_text[len(prompt_text):]
    if markers.separator and g.endswith(markers.separator):
        g = g[:-len(markers.separator)]
    if not stopped and markers.end_of_turn and g.endswith(markers.end_of_turn):
        g = g[:-len(markers.end_of_turn)]
    return g


def tools_system_text(tools: list[dict[str, Any]]) -> str:
    """Plain-text rendering of tool definitions for templates that do not render ``tools``.

    The form (documented in docs/ingest.md): a ``# Tools`` heading and one JSON object per tool,
    each the tool's ``function`` object (name, description, parameters) with sorted keys,
    inside ``<tools>`` ... ``</tools>``; it matches the ``<tool_call>`` JSON form tool calls
    are flattened to. It is appended to the system message, after a blank line.
    """
    lines = [json.dumps(t.get("function", t) if isinstance(t, dict) else t, ensure_ascii=False, sort_keys=True)
             for t in tools]
    return "# Tools\n\n<tools>\n" + "\n".join(lines) + "\n</tools>"


def prompt_tokens(tokenizer: Any, messages: Sequence[Message]) -> list[int]:
    """Token ids of the opening messages rendered with the chat template, ending with the
    assistant header (the generation prompt): the prompt span of a trajectory.

    Raises:
        TrajstoreError: the tokenizer has no chat template.
    """
    return encode(tokenizer, render_chat(tokenizer, messages, add_generation_prompt=True))


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
    generate (the separator after the end-of-turn token, e.g. ChatML's newline after
    ``<|im_end|>``, or the whole end-of-turn marker when generation hit the token limit), the
    environment's reply as a user message, and the next generation prompt. Concatenating
    prompt, action and observation ids therefore gives exactly the rendering of the whole
    conversation, which is what the model conditions on next (the same split
    :mod:`trajstore.ingest.builders.render` makes for re-tokenized logs).

    Args:
        messages: the conversation before the action (system, user, assistant, user, ...).
        action_ids: the generated token ids of the action (with the end token when it stopped).
        reply: the environment's answer (becomes a user message).

    Raises:
        TrajstoreError: the chat template is not prefix-stable (rendering a longer
            conversation changes the text of an earlier turn), so no exact split exists.
    """
    before = render_chat(tokenizer, messages, add_generation_prompt=True)
    generated = tokenizer.decode(list(action_ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)
    content = action_text(tokenizer, action_ids)
    after = render_chat(tokenizer, [*messages, {"role": "assistant", "content": content},
                                    {"role": "user", "content": reply}], add_generation_prompt=True)
    head = before + generated
    if not after.startswith(head):
        raise TrajstoreError(
            f"the chat template of {getattr(tokenizer, 'name_or_path', '?')!r} is not prefix-stable: the rendered "
            f"conversation does not start with the previous turns plus the generated text {generated[-40:]!r}")
    return encode(tokenizer, after[len(head):])

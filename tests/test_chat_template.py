"""trajstore/chat_template.py: span accounting on the real SmolLM2 template: the spans
concatenate to the rendered conversation; a template that is not prefix-stable is refused."""

from __future__ import annotations

import pytest

from trajstore.chat_template import action_text, observation_tokens, prompt_tokens
from trajstore.errors import TrajstoreError
from trajstore.trainer.apps.envs.guess_chat import GuessNumberEnv

torch = pytest.importorskip("torch")


pytest.importorskip("transformers")


@pytest.mark.parametrize("stopped", [True, False])
def test_spans_concatenate_to_the_rendered_conversation(smol_tokenizer, stopped):
    tok = smol_tokenizer
    env = GuessNumberEnv(target=5)
    msgs = env.reset()
    p = prompt_tokens(tok, msgs)
    rendered = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert tok.decode(p) == rendered and rendered.endswith("<|im_start|>assistant\n")
    action = tok("12", add_special_tokens=False)["input_ids"] + ([tok.eos_token_id] if stopped else [])
    assert action_text(tok, action) == "12"
    obs = observation_tokens(tok, msgs, action, "Lower.")
    full = tok.apply_chat_template([*msgs, {"role": "assistant", "content": "12"}, {"role": "user", "content": "Lower."}],
                                   tokenize=False, add_generation_prompt=True)
    assert tok.decode(p + action + obs) == full
    # the observation is the end of the assistant turn the model did not generate, the reply
    # and the next assistant header
    expected = ("\n" if stopped else "<|im_end|>\n") + "<|im_start|>user\nLower.<|im_end|>\n<|im_start|>assistant\n"
    assert tok.decode(obs) == expected


def test_prefix_unstable_template_is_refused(smol_tokenizer):
    class Shifty:  # renders earlier turns differently once the conversation grows
        chat_template = "x"
        eos_token_id = smol_tokenizer.eos_token_id
        name_or_path = "shifty"

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            return f"[{len(messages)}]" + "".join(m["content"] for m in messages)

        def decode(self, ids, **kw):
            return smol_tokenizer.decode(ids, **kw)

        def __call__(self, text, add_special_tokens):
            return smol_tokenizer(text, add_special_tokens=add_special_tokens)

    with pytest.raises(TrajstoreError, match="'shifty' is not prefix-stable"):
        observation_tokens(Shifty(), [{"role": "user", "content": "hi"}], [42], "ok")

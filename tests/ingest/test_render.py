"""The token oracle on hand-made conversations: ids equal the template's render of the whole
conversation, and each span holds exactly its message, also for templates that are not
append-only and for several consecutive tool messages."""

from __future__ import annotations

import pytest

from trajstore.ingest import conversation_to_trajectory
from trajstore.ingest.core import Conversation, Message, Origin, ToolCall
from trajstore.ingest.render import render_conversation, template_features, to_template_messages

# Drops the reasoning of every assistant turn but the last one (like Qwen3 does).
DROP_OLD_REASONING = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'assistant' and m.get('reasoning_content') and loop.last %}"
    "<think>{{ m['reasoning_content'] }}</think>\n{% endif %}"
    "{{ m['content'] }}<|im_end|>\n{% endfor %}")
# Puts a different header on the last turn.
LAST_TURN_HEADER = (
    "{% for m in messages %}{% if loop.last %}<|im_start|>{{ m['role'] }} (final)\n"
    "{% else %}<|im_start|>{{ m['role'] }}\n{% endif %}{{ m['content'] }}<|im_end|>\n{% endfor %}")


def conversation() -> Conversation:
    msgs = [
        Message("system", "You are a careful agent."),
        Message("user", "List files, then read README."),
        Message("assistant", "Two calls at once.", reasoning="I should look around first.", call_id="r1",
                tool_calls=[ToolCall("c1", "bash", '{"cmd": "ls"}'), ToolCall("c2", "bash", '{"cmd": "cat README"}')]),
        Message("tool", "README\nsrc\r\n", cause_id="c1"),
        Message("tool", "\x1b[1mhello\x1b[0m world", cause_id="c2"),
        Message("assistant", "Done: the readme says hello world.", reasoning="Summarise.", call_id="r2"),
        Message("user", "thanks"),
    ]
    return Conversation(source="test", key="k", messages=msgs, origin=Origin("mem"))


@pytest.fixture()
def templated(tok):
    old = tok.chat_template

    def use(tpl):
        tok.chat_template = tpl
        return tok

    yield use
    tok.chat_template = old


def oracle(tok, msgs):
    tools, reasoning = template_features(tok)
    r = tok.apply_chat_template(to_template_messages(msgs, native_tool_calls=tools, native_reasoning=reasoning),
                                tokenize=True)
    return list(r if isinstance(r, list) else r["input_ids"])


@pytest.mark.parametrize("tpl", [None, DROP_OLD_REASONING, LAST_TURN_HEADER], ids=["chatml", "drop-reasoning",
                                                                                 "last-header"])
def test_spans_cut_the_template_render_exactly(tok, templated, tpl):
    if tpl is not None:
        templated(tpl)
    conv = conversation()
    t = conversation_to_trajectory(conv, tok, tokenizer_name="t", input_format="test")
    assert t.tokens.tolist() == oracle(tok, conv.messages)
    assert [s.kind for s in t.spans] == ["prompt", "action", "observation", "observation", "action", "observation"]
    assert [s.cause_id for s in t.spans if s.kind == "observation"] == ["c1", "c2", None]
    assert t.spans[1].tool_call_ids == ["c1", "c2"]
    texts = [tok.decode(t.tokens[s.start:s.end].tolist()) for s in t.spans]
    # each span is its whole turn: header ... end-of-turn
    for s, text, m in zip(t.spans[1:], texts[1:], conv.messages[2:]):
        assert text.startswith(f"<|im_start|>{m.role}"), text[:40]
        assert m.content in text and text.endswith("<|im_end|>\n")
    assert '"cmd": "cat README"' in texts[1]  # tool calls rendered into the action
    rendered = render_conversation(tok, conv.messages)
    assert rendered.method == ("prefix" if tpl is None else "anchored")
    if tpl == DROP_OLD_REASONING:
        assert "I should look around" not in texts[1] and "Summarise." not in texts[4]
    if tpl is None:
        assert "<think>\nI should look around first.\n</think>" in texts[1]


def test_preamble_of_template_is_prompt_when_conversation_starts_with_an_action(tok):
    # SmolLM2 inserts a default system prompt when the first message is not a system message
    msgs = [Message("assistant", "hi", call_id="a"), Message("tool", "out", cause_id="a")]
    conv = Conversation(source="test", key=None, messages=msgs, origin=Origin("mem"))
    t = conversation_to_trajectory(conv, tok, tokenizer_name="t", input_format="test")
    assert [s.kind for s in t.spans] == ["prompt", "action", "observation"]
    assert "SmolLM" in tok.decode(t.tokens[:t.spans[0].end].tolist())
    assert tok.decode(t.tokens[t.spans[1].start:t.spans[1].end].tolist()) == "<|im_start|>assistant\nhi<|im_end|>\n"

"""Span boundaries of re-tokenized conversations, checked on two templates by decoding: an action
holds only what the model generated and ends with its own end-of-turn token; the generation
prompt belongs to the span before, the template's separator to the span after. Also: tool
definitions in the prompt, one trajectory per context the model saw (templates that drop earlier
reasoning), and the same split as the rollout worker's engine-token spans.

Expected texts are written out by hand from each template's definition (ChatML: SmolLM2's
template, quoted below; Llama-3 style: LLAMA3_STYLE below)."""

from __future__ import annotations

import json

import pytest

import trajstore.chat_template as ct
from trajstore.chat_template import (
    ChatRenderer,
    TurnMarkers,
    observation_tokens,
    prompt_tokens,
    render_chat,
    turn_markers,
)
from trajstore.ingest import conversation_to_trajectories
from trajstore.ingest.builders.render import render_conversation
from trajstore.ingest.builders.template import template_features, template_message
from trajstore.ingest.formats.swe_gym import parse_swe_gym_row
from trajstore.ingest.records import Context, Conversation, Message, Origin, ToolCall

# SmolLM2-135M-Instruct's template (ChatML): every message is
#   <|im_start|>{role}\n{content}<|im_end|>\n
# a default system prompt when the first message is not a system message, and the generation
# prompt <|im_start|>assistant\n. It renders neither tool_calls, reasoning_content nor tools.

LLAMA3_STYLE = (
    "{{ bos_token }}"
    "{% if tools %}<|start_header_id|>system<|end_header_id|>\n\nAvailable tools:\n"
    "{% for t in tools %}{{ t | tojson }}\n{% endfor %}<|eot_id|>{% endif %}"
    "{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] | trim }}"
    "{% for c in m.get('tool_calls') or [] %}{{ '\\n' }}{\"name\": \"{{ c['function']['name'] }}\", "
    "\"parameters\": {{ c['function']['arguments'] }}}{% endfor %}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
"""A Llama-3-style template written for this test: header tokens, ``<|eot_id|>`` closing each
turn with no separator after it, tool calls as JSON lines, ``tools`` rendered in a system turn."""

# Drops the reasoning of every assistant turn but the last one (like Qwen3 does).
DROP_OLD_REASONING = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'assistant' and m.get('reasoning_content') and loop.last %}"
    "<think>{{ m['reasoning_content'] }}</think>\n{% endif %}"
    "{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="session")
def llama3_tok(tok):
    """A fast tokenizer with Llama-3-style special tokens and template, built offline from
    SmolLM2's vocabulary (nothing is downloaded)."""
    # transformers comes with the train extra, as the tok fixture's tokenizer does
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    t = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(tok.backend_tokenizer.to_str()),
                                bos_token="<|begin_of_text|>", eos_token="<|eot_id|>",
                                additional_special_tokens=["<|start_header_id|>", "<|end_header_id|>"])
    t.chat_template = LLAMA3_STYLE
    return t


@pytest.fixture()
def templated(tok):
    old = tok.chat_template

    def use(tpl):
        tok.chat_template = tpl
        return tok

    yield use
    tok.chat_template = old


def conversation(**kw) -> Conversation:
    msgs = [
        Message("system", "You are careful."),
        Message("user", "List files."),
        Message("assistant", "Run ls.", call_id="r1", tool_calls=[ToolCall("c1", "bash", '{"cmd": "ls"}')]),
        Message("tool", "a.txt", cause_id="c1"),
        Message("assistant", "One file.", call_id="r2"),
        Message("assistant", "Done.", call_id="r3"),
        Message("user", "thanks"),
    ]
    return Conversation(source="test", key="k", messages=msgs, origin=Origin("mem"), **kw)


def texts(tok, t) -> list[tuple[str, str]]:
    return [(s.kind, tok.decode(t.tokens[s.start:s.end].tolist())) for s in t.spans]


def test_turn_markers_come_from_each_template(tok, llama3_tok):
    assert turn_markers(tok) == TurnMarkers("<|im_end|>", "\n")
    assert turn_markers(llama3_tok) == TurnMarkers("<|eot_id|>", "")


def test_chatml_actions_hold_only_generated_text(tok):
    (t,) = conversation_to_trajectories(conversation(), tok, tokenizer_name="t", input_format="test")
    assert texts(tok, t) == [
        ("prompt", "<|im_start|>system\nYou are careful.<|im_end|>\n<|im_start|>user\nList files.<|im_end|>\n"
                   "<|im_start|>assistant\n"),
        ("action", 'Run ls.\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call><|im_end|>'),
        ("observation", "\n<|im_start|>tool\na.txt<|im_end|>\n<|im_start|>assistant\n"),
        ("action", "One file.<|im_end|>"),
        # consecutive model calls: the separator and the next generation prompt, nothing logged
        ("observation", "\n<|im_start|>assistant\n"),
        ("action", "Done.<|im_end|>"),
        ("observation", "\n<|im_start|>user\nthanks<|im_end|>\n"),
    ]
    acts = [s for s in t.spans if s.kind == "action"]
    for s in acts:  # first token: content, never the header; last token: the end of turn
        assert tok.decode(t.tokens[s.start:s.start + 1].tolist()) not in ("<|im_start|>", "assistant", "\n")
        assert tok.decode(t.tokens[s.end - 1:s.end].tolist()) == "<|im_end|>"
    assert [tok.decode(t.tokens[s.start:s.start + 1].tolist()) for s in acts] == ["Run", "One", "Done"]
    assert [s.cause_id for s in t.spans if s.kind == "observation"] == ["c1", None, None]
    assert t.spans[1].tool_call_ids == ["c1"]
    # 'Run ls.\n<tool_call>...' 'One file.' 'Done.' each + 1 <|im_end|>; the 4 header tokens
    # <|im_start|> assistant \n are not counted as action tokens anywhere
    n_act = sum(s.end - s.start for s in acts)
    assert n_act == sum(len(tok(x, add_special_tokens=False)["input_ids"]) for x in (
        'Run ls.\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call><|im_end|>',
        "One file.<|im_end|>", "Done.<|im_end|>"))


def test_llama3_style_actions_hold_only_generated_text(llama3_tok):
    tok = llama3_tok
    (t,) = conversation_to_trajectories(conversation(), tok, tokenizer_name="t", input_format="test")
    h = "<|start_header_id|>{}<|end_header_id|>\n\n"
    assert texts(tok, t) == [
        ("prompt", "<|begin_of_text|>" + h.format("system") + "You are careful.<|eot_id|>" + h.format("user")
         + "List files.<|eot_id|>" + h.format("assistant")),
        ("action", 'Run ls.\n{"name": "bash", "parameters": {"cmd": "ls"}}<|eot_id|>'),
        ("observation", h.format("tool") + "a.txt<|eot_id|>" + h.format("assistant")),
        ("action", "One file.<|eot_id|>"),
        ("observation", h.format("assistant")),
        ("action", "Done.<|eot_id|>"),
        ("observation", h.format("user") + "thanks<|eot_id|>"),
    ]
    for s in t.spans:
        if s.kind == "action":
            assert tok.decode(t.tokens[s.start:s.start + 1].tolist()) in ("Run", "One", "Done")
            assert tok.decode(t.tokens[s.end - 1:s.end].tolist()) == "<|eot_id|>"
    assert t.metadata["ingest"]["tool_calls"] == "template"


def test_a_call_cut_at_the_token_limit_does_not_own_the_end_of_turn(tok):
    conv = conversation()
    conv.messages[4].finish_reason = "length"
    (t,) = conversation_to_trajectories(conv, tok, tokenizer_name="t", input_format="test")
    kt = texts(tok, t)
    assert kt[3] == ("action", "One file.")  # the model never sampled <|im_end|>
    assert kt[4] == ("observation", "<|im_end|>\n<|im_start|>assistant\n")


def test_same_split_as_the_rollout_worker(tok):
    """The rollout worker records engine tokens as prompt_tokens / generated ids /
    observation_tokens; ingest of the same chat must cut the same spans."""
    msgs = [{"role": "system", "content": "Guess."}, {"role": "user", "content": "Go."}]
    a1 = tok("12", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    p = prompt_tokens(tok, msgs)
    o = observation_tokens(tok, msgs, a1, "Lower.")
    a2 = tok("7", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    conv = Conversation(source="test", key=None, origin=Origin("mem"), messages=[
        Message("system", "Guess."), Message("user", "Go."), Message("assistant", "12"),
        Message("user", "Lower."), Message("assistant", "7")])
    (t,) = conversation_to_trajectories(conv, tok, tokenizer_name="t", input_format="test")
    assert t.tokens.tolist() == p + a1 + o + a2
    assert [(s.kind, s.end - s.start) for s in t.spans] == [("prompt", len(p)), ("action", len(a1)),
                                                            ("observation", len(o)), ("action", len(a2))]


def test_tools_in_the_prompt_native_and_as_system_text(tok, llama3_tok):
    tools = [{"type": "function", "function": {"name": "bash", "description": "Run a command.",
                                               "parameters": {"type": "object"}}}]
    (t,) = conversation_to_trajectories(conversation(tools=tools), tok, tokenizer_name="t", input_format="test")
    # SmolLM2 does not render tools: documented plain text appended to the system message
    assert texts(tok, t)[0][1].startswith(
        "<|im_start|>system\nYou are careful.\n\n# Tools\n\n<tools>\n"
        '{"description": "Run a command.", "name": "bash", "parameters": {"type": "object"}}\n</tools><|im_end|>\n')
    assert t.metadata["ingest"]["tools"] == "system-text"
    (t,) = conversation_to_trajectories(conversation(tools=tools), llama3_tok, tokenizer_name="t", input_format="test")
    assert texts(llama3_tok, t)[0][1].startswith(
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nAvailable tools:\n"
        '{"type": "function", "function": {"name": "bash", "description": "Run a command.", '
        '"parameters": {"type": "object"}}}\n<|eot_id|>')
    assert t.metadata["ingest"]["tools"] == "template"


def test_template_that_drops_earlier_reasoning_splits_the_episode(tok, templated):
    templated(DROP_OLD_REASONING)
    msgs = [Message("user", "Q"), Message("assistant", "A1", reasoning="R1", call_id="r1"),
            Message("user", "more"), Message("assistant", "A2", reasoning="R2", call_id="r2")]
    conv = Conversation(source="test", key="k", messages=msgs, origin=Origin("mem"))
    t1, t2 = conversation_to_trajectories(conv, tok, tokenizer_name="t", input_format="test")
    # call 1 saw Q and generated R1 + A1; call 2 saw Q, A1 WITHOUT R1, more
    assert texts(tok, t1) == [("prompt", "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n"),
                              ("action", "<think>R1</think>\nA1<|im_end|>")]
    assert texts(tok, t2) == [("prompt", "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n"
                                         "<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\n"),
                              ("action", "<think>R2</think>\nA2<|im_end|>")]
    assert t1.metadata["episode"]["id"] == t2.metadata["episode"]["id"] == t1.trajectory_id.rsplit(":", 1)[0]
    assert (t1.metadata["episode"]["part"], t2.metadata["episode"]["part"], t2.metadata["episode"]["change"]) == (
        1, 2, "template")
    assert t1.reward == t2.reward and t1.group_id is None


def test_explicit_context_change_starts_a_new_trajectory(tok):
    sys_, task = Message("system", "S"), Message("user", "T")
    a1 = Message("assistant", "a1", call_id="r1")
    o1 = Message("user", "o1")
    summary = Message("user", "SUMMARY")
    a2 = Message("assistant", "a2", call_id="r2", context=Context([sys_, task, summary], None, "condensation"))
    o2 = Message("user", "o2")
    a3 = Message("assistant", "a3", call_id="r3")
    conv = Conversation(source="test", key="k", origin=Origin("mem"), messages=[sys_, task, a1, o1, a2, o2, a3])
    t1, t2 = conversation_to_trajectories(conv, tok, tokenizer_name="t", input_format="test")
    assert texts(tok, t1) == [("prompt", "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nT<|im_end|>\n"
                                         "<|im_start|>assistant\n"), ("action", "a1<|im_end|>")]
    # o1 was logged after a1 but the next call did not see it: it is in no trajectory's context
    assert texts(tok, t2) == [
        ("prompt", "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nT<|im_end|>\n<|im_start|>user\nSUMMARY"
                   "<|im_end|>\n<|im_start|>assistant\n"),
        ("action", "a2<|im_end|>"), ("observation", "\n<|im_start|>user\no2<|im_end|>\n<|im_start|>assistant\n"),
        ("action", "a3<|im_end|>")]
    assert t2.metadata["episode"]["change"] == "condensation"


def test_conversation_starting_with_an_action_is_flagged(tok):
    # SmolLM2 writes a default system prompt when the first message is not a system message
    msgs = [Message("assistant", "hi", call_id="a"), Message("tool", "out", cause_id="a")]
    conv = Conversation(source="test", key=None, messages=msgs, origin=Origin("mem"))
    (t,) = conversation_to_trajectories(conv, tok, tokenizer_name="t", input_format="test")
    assert texts(tok, t) == [
        ("prompt", "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
                   "<|im_start|>assistant\n"),
        ("action", "hi<|im_end|>"), ("observation", "\n<|im_start|>tool\nout<|im_end|>\n")]
    assert "prompt" in t.metadata["fidelity_gaps"]


def test_render_conversation_without_any_call_is_one_prompt(tok):
    (part,) = render_conversation(tok, [Message("system", "S"), Message("user", "U")])
    assert [(s.kind, s.start, s.end) for s in part.spans] == [("prompt", 0, len(part.token_ids))]
    assert part.text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"


@pytest.mark.parametrize("which", ["chatml", "llama3", "drop_old_reasoning"])
def test_chat_renderer_renders_what_apply_chat_template_renders(tok, llama3_tok, templated, fix, which):
    """The ingest fast path (messages prepared once, the compiled template rendered directly)
    gives the very text of ``apply_chat_template`` for every prefix of a real conversation,
    with and without the generation prompt and tools."""
    t = {"chatml": tok, "llama3": llama3_tok, "drop_old_reasoning": None}[which] or templated(DROP_OLD_REASONING)
    row = json.loads((fix / "openhands/swe-gym_openhands_sampled_trajectories_hf_rows/sample_raw.json").read_text())
    row = row[0] if isinstance(row, list) else row
    conv = parse_swe_gym_row(row, Origin("sample_raw.json"))
    assert conv.tools and any(m.tool_calls for m in conv.messages)  # the probe covers tools and tool calls
    msgs = [template_message(m, template_features(t)) for m in conv.messages[:8]]
    msgs[2] = {**msgs[2], "reasoning_content": "why", "tool_calls": None}  # reasoning and a None value too
    r = ChatRenderer(t)
    assert r.fast  # the probe matched, so this test exercises the fast path
    prepared = [r.prepare(m) for m in msgs]
    for n in range(1, len(msgs) + 1):
        for gen in (False, True):
            for tools in (None, conv.tools):
                assert r.render(prepared[:n], add_generation_prompt=gen, tools=tools) == \
                    render_chat(t, msgs[:n], add_generation_prompt=gen, tools=tools), (n, gen, tools is None)


def test_chat_renderer_falls_back_when_the_probe_differs(tok, monkeypatch):
    monkeypatch.setattr(ct, "_FAST", {})
    monkeypatch.setattr(ct, "_prepare", lambda m: {**m, "content": "changed"})
    r = ct.ChatRenderer(tok)
    assert not r.fast
    msgs = [{"role": "user", "content": "hi"}]
    assert r.render([r.prepare(m) for m in msgs], add_generation_prompt=True) == \
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n" \
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"

"""One test per ingest-fidelity case of ``../shared/fixtures/reported/`` (the README's second
group): each folder's README states the expected result; the expected texts below are written
by hand from the input files and SmolLM2's ChatML template (``<|im_start|>{role}\\n{content}
<|im_end|>\\n``, generation prompt ``<|im_start|>assistant\\n``; tool calls and reasoning are
flattened into the content as documented in :func:`trajstore.ingest.template.template_message`)."""

from __future__ import annotations

import json
import shutil

import pytest

from trajstore.ingest import IngestReport, ingest_paths, iter_trajectories
from trajstore.reader import read_trajectories

SYS = "<|im_start|>system\n{}<|im_end|>\n"
USER = "<|im_start|>user\n{}<|im_end|>\n"
GEN = "<|im_start|>assistant\n"
TOOL_OBS = "\n<|im_start|>tool\n{}<|im_end|>\n"
"""An observation after an action: ChatML's separator after <|im_end|>, then the tool turn."""


def call(name: str, args: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


def ingest(path, **kw):
    r = IngestReport()
    ts = list(iter_trajectories([str(path)], report=r, **kw))
    return ts, r


def spans(tok, t) -> list[tuple[str, str]]:
    return [(s.kind, tok.decode(t.tokens[s.start:s.end].tolist())) for s in t.spans]


def test_openhands_v1_tokenevent_keeps_engine_ids(reported):
    (t,), r = ingest(reported / "openhands-v1-tokenevent")
    # call 1 prompt [101..104], response [201,202,203]; call 2 prompt = call 1 prompt + response
    # + [301, 302] (the observation), response [401, 402]
    assert t.tokens.tolist() == [101, 102, 103, 104, 201, 202, 203, 301, 302, 401, 402]
    assert [(s.kind, s.start, s.end) for s in t.spans] == [("prompt", 0, 4), ("action", 4, 7),
                                                           ("observation", 7, 9), ("action", 9, 11)]
    assert (t.token_source, t.logprob_source) == ("engine", "none")
    assert [s.call_id for s in t.spans if s.kind == "action"] == ["resp-1", "resp-2"]
    assert t.spans[1].tool_call_ids == ["call_1"] and t.spans[2].cause_id == "call_1"
    # the log does not name the tokenizer: stored, but not trainable, with the reason
    assert t.tokenizer is None and "unnamed tokenizer" in t.not_trainable_reason
    (t2,), _ = ingest(reported / "openhands-v1-tokenevent", engine_tokenizer="Qwen/Qwen3-4B")
    assert t2.tokenizer == "Qwen/Qwen3-4B" and t2.not_trainable_reason is None


def test_openhands_v1_tokenevent_missing_for_a_call_falls_back_with_a_reason(reported, tmp_path):
    lines = (reported / "openhands-v1-tokenevent/events.jsonl").read_text().splitlines()
    (tmp_path / "events.jsonl").write_text("\n".join(lines[:-1]) + "\n")  # drop call 2's TokenEvent
    (t,), r = ingest(tmp_path / "events.jsonl")
    assert t.token_source == "retokenized"
    assert t.metadata["engine_token_ids_discarded"] == "1 of 2 model calls have no TokenEvent"
    assert r.engine_ids_discarded == 1  # the counted warning of the ingest summary


def test_openhands_v1_condensation_splits_at_the_context_change(tok, reported):
    (t1, t2), r = ingest(reported / "openhands-v1-condensation")
    a1 = "step 1\n" + call("terminal", '{"command": "cat big.log"}') + "<|im_end|>"
    a2 = "step 2\n" + call("terminal", '{"command": "ls"}') + "<|im_end|>"
    a3 = "step 3\n" + call("terminal", '{"command": "pwd"}') + "<|im_end|>"
    forgotten = "FORGOTTEN-OBSERVATION-MARKER " + "x" * 50
    head = SYS.format("You are an agent.") + USER.format("Task.")
    # r1 and r2 saw the full history
    assert spans(tok, t1) == [("prompt", head + GEN), ("action", a1),
                              ("observation", TOOL_OBS.format(forgotten) + GEN), ("action", a2)]
    # r3 saw: system, task, the summary (a user message at summary_offset 2), a2 / o2
    assert spans(tok, t2) == [
        ("prompt", head + USER.format("SUMMARY-MARKER: big.log was read, nothing found.") + GEN + a2
         + TOOL_OBS.format("a b") + GEN),
        ("action", a3), ("observation", TOOL_OBS.format("/w"))]
    ep1, ep2 = t1.metadata["episode"], t2.metadata["episode"]
    assert ep1["id"] == ep2["id"] and (ep1["part"], ep2["part"], ep2["parts"]) == (1, 2, 2)
    assert ep2["change"] == "condensation" and t1.reward == t2.reward


def test_swe_agent_thinking_blocks_are_rendered_into_the_action(tok, reported):
    (t,), _ = ingest(reported / "swe-agent-thinking-blocks")
    assert spans(tok, t)[1] == ("action", "<think>\nPRIVATE-REASONING-MARKER: the bug is in util.py\n</think>\n\n"
                                          "I will list files.\n" + call("bash", '{"command": "ls"}') + "<|im_end|>")
    assert t.metadata["replayed"] is False  # model_stats logs no token counts: not a replay


def test_v1_base_state_status_and_model(reported, tmp_path):
    (t,), r = ingest(reported / "v1-base-state-status-model")
    assert t.model == "made-up/model-7b"
    assert t.status == "failed"  # execution_status "error" and a ConversationErrorEvent
    assert t.metadata["conversation_errors"] == [{"code": "LLMError",
                                                  "detail": "upstream model service returned an error"}]
    assert [(p.kind, p.origin.path.rsplit("/", 1)[-1]) for p in r.problems] == [("no_trajectory", "base_state.json")]
    # a stuck run without an error event is not completed either
    conv = tmp_path / "conv03"
    shutil.copytree(reported / "v1-base-state-status-model/conv03", conv)
    for f in (conv / "events").glob("event-00003-*"):
        f.unlink()
    state = json.loads((conv / "base_state.json").read_text())
    (conv / "base_state.json").write_text(json.dumps({**state, "execution_status": "stuck"}))
    (t,), _ = ingest(conv)
    assert t.status == "aborted" and t.metadata["execution_status"] == "stuck"


def test_v1_dynamic_context_and_extended_content(tok, reported):
    (t,), _ = ingest(reported / "v1-dynamic-context-and-extended-content")
    # blocks of one message joined by a newline (the SDK's string serializer)
    assert spans(tok, t) == [
        ("prompt", SYS.format("You are a test agent.\n<RUNTIME>\nThe current date is 2030-01-01.\n</RUNTIME>")
         + USER.format("hi there\n<EXTRA_INFO>\nSkill greeter: answer with one word.\n</EXTRA_INFO>") + GEN),
        ("action", "Hello<|im_end|>")]


def test_v1_observation_llm_content(tok, reported):
    (t,), _ = ingest(reported / "v1-observation-llm-content")
    obs = [(s.cause_id, tok.decode(t.tokens[s.start:s.end].tolist())) for s in t.spans if s.kind == "observation"]
    assert obs == [
        ("call_1", TOOL_OBS.format("\n[Current working directory: /work/proj]\n[Python interpreter: /usr/bin/python3]"
                                   "\n[Command finished with exit code 0]") + GEN),
        ("call_2", TOOL_OBS.format("[An error occurred during execution.]\nls: cannot access 'nowhere': No such file "
                                   "or directory\n[Current working directory: /work/proj]\n[Python interpreter: "
                                   "/usr/bin/python3]\n[Command finished with exit code 2]") + GEN)]


def test_v1_tool_definitions_reach_the_prompt(tok, reported):
    (t,), _ = ingest(reported / "v1-tool-definitions-dropped")
    tool = ('{"description": "Run a shell command.", "name": "terminal", "parameters": {"properties": {"command": '
            '{"description": "the command", "type": "string"}}, "required": ["command"], "type": "object"}}')
    assert spans(tok, t)[0] == ("prompt", SYS.format(f"You are a test agent.\n\n# Tools\n\n<tools>\n{tool}\n</tools>")
                                + USER.format("say ok") + GEN)
    assert t.metadata["ingest"]["tools"] == "system-text" and "fidelity_gaps" not in t.metadata


def test_tool_definitions_reach_the_prompt_nemo_gym(tok, reported, tmp_path):
    """The same family in NeMo Gym: ``responses_create_params.tools`` (Responses-API shape, flat,
    with ``strict``) reaches the prompt as the documented <tools> block (V0, SWE-Gym rows and
    completion logs: tests/ingest/test_fidelity.py)."""
    row = json.loads((reported / "nemo-gym-placeholder-token-ids/rollouts.jsonl").read_text().splitlines()[0])
    row["responses_create_params"]["tools"] = [{"type": "function", "name": "search", "description": "Look up a fact.",
                                                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
                                                "strict": True}]
    (tmp_path / "r.jsonl").write_text(json.dumps(row) + "\n")
    (t,), _ = ingest(tmp_path / "r.jsonl")
    tool = '{"description": "Look up a fact.", "name": "search", "parameters": {"properties": {"q": {"type": "string"}}, ' \
           '"type": "object"}}'  # the function object, keys sorted, `strict` is no part of it
    assert spans(tok, t)[0] == ("prompt", SYS.format(f"You are a test agent.\n\n# Tools\n\n<tools>\n{tool}\n</tools>")
                                + USER.format("look up two facts") + GEN)
    assert t.metadata["ingest"]["tools"] == "system-text"


def test_nemo_gym_placeholder_token_ids_never_replace_the_conversation(tok, reported):
    ts, _ = ingest(reported / "nemo-gym-placeholder-token-ids")
    assert [t.reward for t in ts] == [1.0, 0.0]
    for t in ts:
        assert t.token_source == "retokenized"
        assert spans(tok, t) == [
            ("prompt", SYS.format("You are a test agent.") + USER.format("look up two facts") + GEN),
            ("action", "I will search.\n" + call("search", '{"q": "fact one"}') + "<|im_end|>"),
            ("observation", TOOL_OBS.format("fact one is blue") + GEN),
            ("action", "Fact one is blue.<|im_end|>")]  # the empty placeholder call adds nothing
        assert t.spans[2].cause_id == "call_a"
        assert "1 placeholder" in t.metadata["engine_token_ids_discarded"]


def test_nemo_gym_consecutive_assistant_messages_are_separate_calls(tok, reported):
    ts, r = ingest(reported / "nemo-gym-consecutive-assistant-messages")
    assert len(ts) == 2
    for t in ts:
        kinds = spans(tok, t)
        assert [k for k, _ in kinds] == ["prompt", "action", "observation", "action", "observation", "action"]
        assert [x for k, x in kinds if k == "action"] == ["I will click the menu.\nclick(10, 20)<|im_end|>",
                                                          "click(30, 40)<|im_end|>", "The page is open. DONE<|im_end|>"]
        # between two calls: the separator and the next generation prompt (nothing was logged)
        assert [x for k, x in kinds if k == "observation"] == ["\n" + GEN, "\n" + GEN]
        assert "observations" in t.metadata["fidelity_gaps"]
    assert r.fidelity_gaps["observations"] == 2


def test_swe_agent_final_step_only_in_trajectory(tok, reported):
    (t,), _ = ingest(reported / "swe-agent-final-step-only-in-trajectory")
    assert spans(tok, t) == [
        ("prompt", SYS.format("You are a test programmer.") + USER.format("Fix the typo in notes.txt") + GEN),
        ("action", "Let me look at the file.\n" + call("bash", '{"command": "cat notes.txt"}') + "<|im_end|>"),
        ("observation", TOOL_OBS.format("helo world") + GEN),
        ("action", "The typo is clear; I will submit now.\n" + call("submit", "{}") + "<|im_end|>")]
    # actions = len(trajectory) = model_stats.api_calls = 2
    assert sum(s.kind == "action" for s in t.spans) == t.metadata["harness_model_calls"] == 2
    assert t.model == "made-up-model" and t.metadata["replayed"] is False
    assert "final_step" in t.metadata["fidelity_gaps"]


def test_engine_ids_of_an_unnamed_tokenizer_are_not_trainable(fix, tmp_path):
    """Issue 12 item 8 on the real NeMo Gym multi-turn rows (Qwen3-4B ids, no tokenizer named)."""
    path = fix / "nemo-gym-multiturn/tictactoe_env_example_rollouts.jsonl"
    st = str(tmp_path / "s")
    ingest_paths([str(path)], st)
    tab = read_trajectories(st, columns=["tokenizer", "trainable", "not_trainable_reason"]).to_pylist()
    assert len(tab) == 5 and all(not r["trainable"] and r["tokenizer"] is None for r in tab)
    assert all("unnamed tokenizer" in r["not_trainable_reason"] for r in tab)
    st2 = str(tmp_path / "s2")
    ingest_paths([str(path)], st2, engine_tokenizer="model")  # the model name is the HF repo id here
    tab = read_trajectories(st2, columns=["tokenizer", "trainable"]).to_pylist()
    assert all(r["trainable"] and r["tokenizer"] == "Qwen/Qwen3-4B-Instruct-2507" for r in tab)


@pytest.mark.parametrize("ids", [[[1, 2, 3], [4, 5]], None])
def test_nemo_gym_mixed_engine_ids_fall_back_to_text(reported, tmp_path, ids):
    row = json.loads((reported / "nemo-gym-consecutive-assistant-messages/rollouts.jsonl").read_text().splitlines()[0])
    first = row["response"]["output"][0]
    if ids:  # only the first of three calls carries real ids
        first.update(prompt_token_ids=ids[0], generation_token_ids=ids[1], generation_log_probs=[-0.1, -0.2])
    (tmp_path / "r.jsonl").write_text(json.dumps(row) + "\n")
    (t,), _ = ingest(tmp_path / "r.jsonl")
    assert t.token_source == "retokenized" and sum(s.kind == "action" for s in t.spans) == 3
    if ids:
        assert t.metadata["engine_token_ids_discarded"].startswith("1 of 3 model calls carry token ids")
    else:
        assert "engine_token_ids_discarded" not in t.metadata


def test_fidelity_flags_are_counted_and_shown_by_stats_coverage(reported, tmp_path):
    from typer.testing import CliRunner

    from trajstore.cli.main import app

    st = str(tmp_path / "s")
    rep = ingest_paths([str(reported / "nemo-gym-consecutive-assistant-messages"),
                        str(reported / "swe-agent-final-step-only-in-trajectory")], st)
    # 2 NeMo rows without logged observations; the SWE-agent file: final step rebuilt, tools not logged
    assert dict(rep.fidelity_gaps) == {"observations": 2, "final_step": 1, "tools": 1}
    r = CliRunner().invoke(app, ["stats", st, "--coverage", "--format", "json"])
    assert r.exit_code == 0, r.output
    got = [(x["source"], x["flag"], x["trajectories"]) for x in json.loads(r.stdout)["coverage.fidelity"]]
    assert got == [("nemo-gym", "observations", 2), ("swe-agent", "final_step", 1), ("swe-agent", "tools", 1)]

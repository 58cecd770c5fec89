"""The reported cases of ``../shared/fixtures/reported/`` that concern ingest formats, per-record
robustness and the engine adapters: one test per folder, the expected values written by hand
from the folder's README and input (never taken from the code under test)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from trajstore import AdapterError, TrajectoryBuilder, action_from_openai_completion, action_from_sglang_generate
from trajstore.ingest import ingest_paths
from trajstore.reader import read_trajectories

REPORTED = Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures" / "reported"


@pytest.fixture(scope="module")
def reported() -> Path:
    if not REPORTED.is_dir():
        pytest.skip(f"reported fixtures not found at {REPORTED}")
    return REPORTED.resolve()


# -- adapters ------------------------------------------------------------------------------------

def test_vllm_9999_sentinel_is_missing_never_a_logprob():
    # vllm-9999-sentinel/repro.py: the 2nd of 3 sampled tokens carries -9999.0, vLLM's clamp of -inf.
    resp = {"id": "chatcmpl-1", "prompt_token_ids": [1, 2, 3],
            "choices": [{"index": 0, "finish_reason": "stop", "token_ids": [10, 11, 12],
                         "message": {"role": "assistant", "content": "yes"},
                         "logprobs": {"content": [
                             {"token": "y", "logprob": -0.1, "top_logprobs": []},
                             {"token": "es", "logprob": -9999.0, "top_logprobs": []},
                             {"token": "<eos>", "logprob": -0.01, "top_logprobs": []}]}}]}
    call = action_from_openai_completion(resp)
    assert call.token_ids.tolist() == [10, 11, 12]
    assert call.logprobs[0] == np.float32(-0.1) and math.isnan(call.logprobs[1]) and call.logprobs[2] == np.float32(-0.01)
    assert call.missing_logprobs.tolist() == [1]
    # The same family: a null, a NaN/-inf (Python's json reads -Infinity) and anything below the clamp.
    for stand_in in (None, float("nan"), float("-inf"), -1e30):
        resp["choices"][0]["logprobs"]["content"][1]["logprob"] = stand_in
        assert action_from_openai_completion(resp).missing_logprobs.tolist() == [1]
    sg = action_from_sglang_generate({"meta_info": {"output_token_logprobs": [[-0.5, 4, "a"], [None, 5, "b"],
                                                                              [-9999.0, 6, "c"]]}})
    assert sg.token_ids.tolist() == [4, 5, 6] and sg.missing_logprobs.tolist() == [1, 2]
    # Text completions: the first token_logprobs entry is null in echo mode.
    tc = action_from_openai_completion({"choices": [{"text": "ab", "token_ids": [7, 8],
                                                     "logprobs": {"token_logprobs": [None, -0.25]}}]})
    assert tc.missing_logprobs.tolist() == [0] and tc.logprobs[1] == np.float32(-0.25)


def test_vllm_9999_sentinel_a_logprob_that_is_not_a_number_names_the_token():
    resp = {"choices": [{"token_ids": [1, 2], "logprobs": {"content": [{"logprob": -0.1}, {"logprob": "-0.2"}]}}]}
    with pytest.raises(AdapterError, match=r"logprobs.content\[1\].logprob is '-0.2', not a number"):
        action_from_openai_completion(resp)
    resp["choices"][0]["logprobs"]["content"][1]["logprob"] = 0.5
    with pytest.raises(AdapterError, match=r"logprobs.content\[1\].logprob is 0.5, not a log-prob"):
        action_from_openai_completion(resp)


def test_ids_in_logprob_entries():
    # ids-in-logprob-entries/repro.py: no choice token_ids; every entry spells its id.
    def resp(entries):
        return {"id": "c1", "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant", "content": "hi"},
                                         "logprobs": {"content": entries}}]}

    by_string = [{"token": f"token_id:{i}", "logprob": -0.5, "top_logprobs": []} for i in (42, 7, 2)]
    by_field = [{"token": "x", "token_id": i, "logprob": -0.5, "top_logprobs": []} for i in (42, 7, 2)]
    for entries in (by_string, by_field):
        c = action_from_openai_completion(resp(entries))
        assert c.token_ids.tolist() == [42, 7, 2] and c.logprobs.tolist() == [-0.5, -0.5, -0.5]
    # text completions spell them in logprobs.tokens
    c = action_from_openai_completion({"choices": [{"text": "hi", "logprobs": {
        "tokens": ["token_id:42", "token_id:7"], "token_logprobs": [-0.5, -0.25]}}]})
    assert c.token_ids.tolist() == [42, 7] and c.logprobs.tolist() == [-0.5, -0.25]
    # one entry without an id: refused, naming it (the ids would be incomplete)
    with pytest.raises(AdapterError, match=r"logprobs.content\[1\] names no token id"):
        action_from_openai_completion(resp([by_string[0], {"token": "x", "logprob": -0.5}, by_string[2]]))
    # a missing log-prob is reported as missing, not as an id mismatch
    entry = [{"token": "token_id:42", "logprob": None, "top_logprobs": []}]
    assert math.isnan(action_from_openai_completion(resp(entry)).logprobs[0])


def test_zero_token_length_turn_is_refused_when_added_and_the_builder_stays_usable():
    # zero-token-length-turn/repro.py: call c2 was cut at zero tokens (finish_reason=length).
    ok = {"id": "c1", "choices": [{"index": 0, "finish_reason": "tool_calls", "token_ids": [5, 6, 7],
          "message": {"role": "assistant", "content": None, "tool_calls": [{"id": "t1", "type": "function",
                      "function": {"name": "ls", "arguments": "{}"}}]},
          "logprobs": {"content": [{"token": "x", "logprob": -0.1}] * 3}}]}
    empty = {"id": "c2", "choices": [{"index": 0, "finish_reason": "length", "token_ids": [],
             "message": {"role": "assistant", "content": ""}, "logprobs": {"content": []}}]}
    b = TrajectoryBuilder(prompt_id="p")
    b.add_prompt([1, 2])
    b.add_action_call(action_from_openai_completion(ok), policy_version=4)
    b.add_observation([8, 9], cause_id="t1")
    with pytest.raises(ValueError, match=r"action call 'c2' has no tokens \(finish_reason 'length'\)"):
        b.add_action_call(action_from_openai_completion(empty), policy_version=4)
    assert b.num_tokens == 7  # nothing of c2 was added
    t = b.finish(status="truncated")
    # prompt [0, 2), action [2, 5), observation [5, 7)
    assert [(s.kind, s.start, s.end) for s in t.spans] == [("prompt", 0, 2), ("action", 2, 5), ("observation", 5, 7)]
    assert t.status == "truncated" and t.tokens.tolist() == [1, 2, 5, 6, 7, 8, 9]
    # the same family: an empty observation or prompt is refused at add time too
    b2 = TrajectoryBuilder()
    with pytest.raises(ValueError, match="observation span has no tokens"):
        b2.add_observation([])
    with pytest.raises(ValueError, match="prompt span has no tokens"):
        b2.add_prompt(np.zeros(0, np.int32))


# -- one bad record ------------------------------------------------------------------------------

def test_one_bad_record_costs_only_itself(reported, tmp_path):
    d = reported / "one-bad-record"
    rep = ingest_paths([str(d)], str(tmp_path / "s"))
    # Good records: line 2 of logprob-not-a-number, line 1 of token-id-overflow, lines 2-3 of
    # first-line-empty-object = 4; the tool-call file has no good record.
    assert rep.trajectories_written == 4
    where = {(Path(p.origin.path).name, p.origin.line): p for p in rep.problems}
    assert sorted(where) == [("first-line-empty-object.jsonl", 1), ("nemo-gym-logprob-not-a-number.jsonl", 1),
                             ("nemo-gym-token-id-overflow.jsonl", 2), ("tool-call-function-is-a-string.json", None)]
    assert "no 'response' object" in where[("first-line-empty-object.jsonl", 1)].reason
    assert "log-prob [0] is 'x', not a number" in where[("nemo-gym-logprob-not-a-number.jsonl", 1)].reason
    assert "token ids[2] = 1180591620717411303424 is not a token id" in \
        where[("nemo-gym-token-id-overflow.jsonl", 2)].reason
    assert "tool_calls[0].function is a string ('ls'), expected an object with a name" in where[("tool-call-function-is-a-string.json", None)].reason
    assert rep.refused == 4
    rows = read_trajectories(str(tmp_path / "s")).to_pylist()
    origin = {(Path(m["path"]).name, m["line"]): r for r in rows for m in [json.loads(r["metadata"])["ingest"]]}
    lines = sorted(origin)
    assert lines == [("first-line-empty-object.jsonl", 2), ("first-line-empty-object.jsonl", 3),
                     ("nemo-gym-logprob-not-a-number.jsonl", 2), ("nemo-gym-token-id-overflow.jsonl", 1)]
    # The good overflow row keeps its engine tokens exactly: prompt [1, 2, 3] + generation [5, 6].
    assert origin[("nemo-gym-token-id-overflow.jsonl", 1)]["tokens"] == [1, 2, 3, 5, 6]


# -- formats -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tok():
    from trajstore.hub import load_tokenizer

    return load_tokenizer("smollm2-135m")


GEN = "<|im_start|>assistant\n"
"""ChatML's generation prompt: since action spans hold only generated tokens, it ends the span
before each action; the newline after <|im_end|> starts the span after it."""


def span_texts(t, tok) -> list[tuple[str, str]]:
    """(kind, decoded text) of every span of a stored row (a dict) or Trajectory."""
    tokens = t["tokens"] if isinstance(t, dict) else t.tokens.tolist()
    spans = t["spans"] if isinstance(t, dict) else [s.model_dump() for s in t.spans]
    return [(s["kind"], tok.decode(tokens[s["start"]:s["end"]])) for s in spans]


def test_hf_parquet_rows(reported, tmp_path, tok):
    # hf-parquet-rows/train-00000-of-00001.parquet: one SWE-Gym row (resolved = true) with
    # system "sys", user "Fix it.", assistant "Done.".
    rep = ingest_paths([str(reported / "hf-parquet-rows")], str(tmp_path / "s"))
    assert (rep.files_seen, rep.trajectories_written, rep.refused) == (1, 1, 0)
    assert rep.ignored_files == {"(no suffix)": 1}  # the folder's README: counted, not read
    (row,) = read_trajectories(str(tmp_path / "s")).to_pylist()
    assert row["source"] == "openhands/swe-gym" and row["reward"] == 1.0 and row["prompt_id"] == "demo__lib-1"
    assert json.loads(row["metadata"])["ingest"]["line"] == 1  # Parquet row 1
    assert span_texts(row, tok) == [
        ("prompt", "<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\nFix it.<|im_end|>\n" + GEN),
        ("action", "Done.<|im_end|>"),
    ]


MINI_PROMPT = ("<|im_start|>system\nYou run shell commands.<|im_end|>\n<|im_start|>user\nFix the bug in x.<|im_end|>\n"
               + GEN)
MINI_ACTION_1 = 'Look first.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call><|im_end|>'
MINI_OBS = "\n<|im_start|>tool\n<returncode>0</returncode>\n<output>\nx\n</output><|im_end|>\n" + GEN
MINI_ACTION_2 = ('Submit.\n<tool_call>\n{"name": "bash", "arguments": {"command": '
                 '"echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}}\n</tool_call><|im_end|>')


def test_mini_swe_agent_v2(reported, tmp_path, tok):
    # task-1.traj.json (exit_status Submitted) and noexit.json (LimitsExceeded): the same turns,
    # the 'exit' message of task-1 is not a model turn.
    rep = ingest_paths([str(reported / "mini-swe-agent-v2")], str(tmp_path / "s"))
    assert (rep.trajectories_written, rep.refused, dict(rep.by_format)) == (2, 0, {"mini-swe-agent": 2})
    rows = {Path(json.loads(r["metadata"])["ingest"]["path"]).name: r
            for r in read_trajectories(str(tmp_path / "s")).to_pylist()}
    task, noexit = rows["task-1.traj.json"], rows["noexit.json"]
    for row in (task, noexit):
        assert row["source"] == "mini-swe-agent" and row["model"] == "demo/model" and row["reward"] is None
        assert row["prompt_id"] == "demo__repo-1"
        assert span_texts(row, tok) == [("prompt", MINI_PROMPT), ("action", MINI_ACTION_1),
                                        ("observation", MINI_OBS), ("action", MINI_ACTION_2)]
        # 2 actions, 1 tool observation linked to call_a
        acts = [s for s in row["spans"] if s["kind"] == "action"]
        (obs,) = [s for s in row["spans"] if s["kind"] == "observation"]
        assert [a["tool_call_ids"] for a in acts] == [["call_a"], ["call_b"]] and obs["cause_id"] == "call_a"
        assert acts[0]["call_id"] == "r1" and acts[0]["finish_reason"] == "tool_calls"
        # one action per model call: the agent's own count, info.model_stats.api_calls = 2
        assert len(acts) == json.loads(row["metadata"])["harness_model_calls"] == 2
    assert task["status"] == "completed" and noexit["status"] == "truncated"
    assert list(json.loads(task["metadata"])["fidelity_gaps"]) == ["tools"]  # the bash tool's schema is not logged
    assert json.loads(task["metadata"])["exit_messages"] == 1
    assert json.loads(noexit["metadata"])["exit_status"] == "LimitsExceeded"


def test_mini_swe_agent_v1_text_format(tmp_path, tok):
    # The README's task-v1: a v1 text-format run that submits in its only action. v1 appends the
    # submission as a user message after a terminating exit: no model call saw it.
    d = {"info": {"exit_status": "Submitted", "submission": "diff --git a/x b/x", "mini_version": "1.17.3",
                  "config": {"model": {"model_name": "demo/model"}}},
         "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "T"},
                      {"role": "assistant", "content": "THOUGHT: done\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"},
                      {"role": "user", "content": "diff --git a/x b/x"}],
         "trajectory_format": "mini-swe-agent-1"}
    p = tmp_path / "task-v1.traj.json"
    p.write_text(json.dumps(d))
    rep = ingest_paths([str(p)], str(tmp_path / "s"))
    assert rep.trajectories_written == 1 and rep.problems == []
    (row,) = read_trajectories(str(tmp_path / "s")).to_pylist()
    assert (row["source"], row["status"], row["prompt_id"]) == ("mini-swe-agent", "completed", "task-v1")
    assert span_texts(row, tok) == [
        ("prompt", "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nT<|im_end|>\n" + GEN),
        ("action", "THOUGHT: done\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```<|im_end|>"),
    ]


SMITH_PROMPT = ("<|im_start|>system\nYou are a coding agent.<|im_end|>\n<|im_start|>user\n<uploaded_files>/testbed"
                "</uploaded_files> Fix the off-by-one.<|im_end|>\n" + GEN)


def test_swe_smith_hf_row(reported, tmp_path, tok):
    # rows.jsonl: 'messages' is a JSON-encoded string; resolved true / false.
    rep = ingest_paths([str(reported / "swe-smith-hf-row")], str(tmp_path / "s"))
    assert (rep.trajectories_written, rep.refused, dict(rep.by_format)) == (2, 0, {"swe-smith": 2})
    rows = sorted(read_trajectories(str(tmp_path / "s")).to_pylist(), key=lambda r: -r["reward"])
    assert [r["reward"] for r in rows] == [1.0, 0.0]
    for r in rows:
        assert r["source"] == "swe-smith" and r["model"] == "demo-model"
        assert r["prompt_id"] == "demo__lib.abc123.func_pm__x1"
        assert span_texts(r, tok) == [
            ("prompt", SMITH_PROMPT),
            ("action", "Let me look.\n\n<function=bash>\n<parameter=command>ls /testbed</parameter>\n</function>"
                       "<|im_end|>"),
            ("observation", "\n<|im_start|>user\nOBSERVATION:\nsrc tests<|im_end|>\n" + GEN),
            ("action", "Done.\n\n<function=submit>\n</function><|im_end|>"),
        ]
        assert r["spans"][2]["cause_id"] == r["spans"][1]["call_id"] == "step-0"
    meta = json.loads(rows[0]["metadata"])
    assert meta["traj_id"] == "demo__lib.abc123.func_pm__x1.t1" and meta["instance_id"] == "demo__lib.abc123.func_pm__x1"


def test_tau_bench_results(reported, tmp_path, tok):
    # results.json: task 0 (reward 1.0) and task 1, an evaluator crash (info.error, empty traj).
    rep = ingest_paths([str(reported / "tau-bench-results")], str(tmp_path / "s"))
    assert (rep.trajectories_written, rep.refused) == (1, 0)  # the crash is reported, not refused
    (crash,) = rep.problems
    assert (crash.origin.line, crash.kind) == (2, "no_trajectory")
    assert "evaluator crash" in crash.reason and "EOF when reading a line" in crash.reason
    (row,) = read_trajectories(str(tmp_path / "s")).to_pylist()
    assert (row["source"], row["reward"], row["status"], row["prompt_id"]) == ("tau-bench", 1.0, "completed", "task-0")
    assert span_texts(row, tok) == [
        ("prompt", "<|im_start|>system\nStore policy.<|im_end|>\n<|im_start|>user\nHi, return item A.<|im_end|>\n"
                   + GEN),
        # the arguments as the model wrote them ('{"order_id":"#1"}'), not re-serialised
        ("action", 'Looking it up.\n<tool_call>\n{"name": "get_order", "arguments": {"order_id":"#1"}}\n'
                   '</tool_call><|im_end|>'),
        ("observation", '\n<|im_start|>tool\n{"status":"delivered"}<|im_end|>\n' + GEN),
        ("action", "Done.<|im_end|>"),
    ]
    assert row["spans"][2]["cause_id"] == "call_1"  # 1 tool observation, linked to its call
    meta = json.loads(row["metadata"])
    assert meta["task"] == {"user_id": "u1", "instruction": "Return item A."}
    assert list(meta["fidelity_gaps"]) == ["tools"]  # the results file has no tool definitions


def test_other_formats(reported, tmp_path, tok):
    rep = ingest_paths([str(reported / "other-formats")], str(tmp_path / "s"))
    assert (rep.refused, rep.trajectories_written) == (0, 5)
    assert dict(rep.by_format) == {"atif": 1, "nebius/swe-rebench-openhands": 2, "verl": 2}
    rows = read_trajectories(str(tmp_path / "s")).to_pylist()
    by = {}
    for r in rows:
        by.setdefault(r["source"], []).append(r)
    # ATIF: prompt_token_ids [1, 2, 3, 4], completion_token_ids [5, 6, 7], logprobs [-0.1, -0.2, -0.3]
    (a,) = by["atif"]
    assert (a["token_source"], a["logprob_source"], a["model"], a["prompt_id"]) == ("engine", "engine", "demo", "s1")
    assert a["tokens"] == [1, 2, 3, 4, 5, 6, 7]
    assert [(s["kind"], s["start"], s["end"]) for s in a["spans"]] == [("prompt", 0, 4), ("action", 4, 7)]
    lps = a["logprobs"]
    action_lps = lps[4:7] if len(lps) == 7 else lps  # schema v1 (full length) or v2 (action tokens only)
    assert np.allclose(action_lps, [-0.1, -0.2, -0.3])
    assert "no token ids" in json.loads(a["metadata"])["last_observation"]
    # nebius SWE-rebench-openhands: resolved 1 / 0
    neb = sorted(by["nebius/swe-rebench-openhands"], key=lambda r: -r["reward"])
    assert [r["reward"] for r in neb] == [1.0, 0.0] and [r["prompt_id"] for r in neb] == ["org__repo-1"] * 2
    for r in neb:
        assert span_texts(r, tok) == [
            ("prompt", "<|im_start|>system\nYou are an agent.<|im_end|>\n<|im_start|>user\nFix.<|im_end|>\n" + GEN),
            ("action", '<tool_call>\n{"name": "execute_bash", "arguments": {"command":"ls"}}\n</tool_call><|im_end|>'),
            ("observation", "\n<|im_start|>tool\na<|im_end|>\n" + GEN),
            ("action", "done<|im_end|>"),
        ]
        assert r["spans"][2]["cause_id"] == "c1" and r["status"] == "completed"
    # verl: two identical samples of one prompt (GRPO n = 2), both kept, one prompt_id
    v = by["verl"]
    assert len(v) == 2 and len({r["trajectory_id"] for r in v}) == 2 and len({r["prompt_id"] for r in v}) == 1
    for r in v:
        assert r["reward"] == 1.0 and r["token_source"] == "retokenized"
        assert span_texts(r, tok) == [("prompt", "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n"),
                                      ("action", "a<|im_end|>")]
        assert json.loads(r["metadata"])["special_tokens_in_text"] is True


def test_vllm_9999_sentinel_is_stored_missing_masked_by_the_trainer_and_counted(tmp_path):
    # vllm-9999-sentinel/repro.py end to end: the SDK stores the stand-in as missing (NaN,
    # counted in num_missing_logprobs), the coverage audit counts it, and the trainer's stream
    # leaves that token out of the action mask, so DIS statistics stay finite.
    torch = pytest.importorskip("torch")
    from trajstore import StoreWriter, audit
    from trajstore.store import open_store
    from trajstore.trainer.loop.config import DataConfig
    from trajstore.trainer.data import TrajectoryStream
    from trajstore.trainer.sao.losses import dis_policy_loss

    resp = {"id": "chatcmpl-1", "prompt_token_ids": [1, 2, 3],
            "choices": [{"index": 0, "finish_reason": "stop", "token_ids": [10, 11, 12],
                         "message": {"role": "assistant", "content": "yes"},
                         "logprobs": {"content": [{"token": "y", "logprob": -0.1, "top_logprobs": []},
                                                  {"token": "es", "logprob": -9999.0, "top_logprobs": []},
                                                  {"token": "<eos>", "logprob": -0.01, "top_logprobs": []}]}}]}
    b = TrajectoryBuilder(trajectory_id="sentinel-1", prompt_id="p", tokenizer="tiny")
    b.add_prompt([1, 2, 3])
    b.add_action_call(action_from_openai_completion(resp), policy_version=0)
    b.set_reward(1.0)
    t = b.finish()
    assert t.logprob_source == "engine" and math.isnan(t.logprobs[4])  # token 11: missing, not -9999
    store = str(tmp_path / "s")
    with StoreWriter(store) as w:
        w.write(t)
    (row,) = read_trajectories(store).to_pylist()
    assert row["num_missing_logprobs"] == 1  # of 3 action tokens
    rel = audit.coverage_report(audit.connect(open_store(store))).tables()["tokens"]
    share = dict(zip(rel.columns, rel.fetchall()[0]))["share_with_logprob"]
    assert share == pytest.approx(2 / 3)  # 2 of the 3 action tokens have an engine log-prob
    stream = TrajectoryStream(open_store(store), DataConfig(), tokenizer="tiny", vocab_size=100)
    (s,) = stream.next_batch().samples
    # tokens [1, 2, 3, 10, 11, 12]: actions 10 and 12 are trained, 11 (no log-prob) is not
    assert s.action_mask.tolist() == [False, False, False, True, False, True]
    old = torch.tensor(s.rollout_logprobs[s.action_mask]).unsqueeze(0)  # [-0.1, -0.01]
    new = torch.tensor([[-0.1, -0.01]])
    _, st = dis_policy_loss(new, old, torch.ones(1, 2), torch.ones(1, 2, dtype=torch.bool), 0.2, 0.2)
    assert float(st.ratio_mean) == pytest.approx(1.0) and float(st.kl_k3) == pytest.approx(0.0, abs=1e-6)

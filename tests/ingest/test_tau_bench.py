"""trajstore/ingest/formats/tau_bench.py: tau-bench results files: status, reward and every span."""

from __future__ import annotations

import json

from tests.helpers.ingest import GEN, only_row, span_texts, stored
from trajstore.ingest import ingest_paths
from trajstore.reader import read_trajectories


# fidelity of a format added beyond the reported cases
def test_tau_bench_crash_after_some_turns_is_failed_without_a_reward(tmp_path):
    res = [{"task_id": 7, "reward": 0.0, "trial": 1, "info": {"error": "litellm.RateLimitError"},
            "traj": [{"role": "system", "content": "p"}, {"role": "user", "content": "hi"},
                     {"role": "assistant", "content": "hello"}]}]
    p = tmp_path / "results.json"
    p.write_text(json.dumps(res))
    rep = ingest_paths([str(p)], tmp_path / "s")
    assert rep.problems == []
    row = only_row(tmp_path / "s")
    assert (row["status"], row["reward"], row["prompt_id"]) == ("failed", None, "task-7")
    assert "RateLimitError" in json.loads(row["metadata"])["reward_error"]


# reported: ../shared/fixtures/reported/tau-bench-results
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


# hostile tester: a fault found in `traj ingest` (failed before its fix)
def test_a_nan_in_a_raw_score_is_stored_as_standard_json_not_refused_as_reward_raw(tmp_path):
    # tau-bench writes the reward of an evaluator crash as logged (here NaN) with a partial traj
    row = {"task_id": 7, "reward": float("nan"), "info": {"error": "RateLimitError"},
           "traj": [{"role": "user", "content": "book a flight"}, {"role": "assistant", "content": "ok"}]}
    f = tmp_path / "results.json"
    f.write_text(json.dumps([row]))  # json writes NaN, as Python-made results files hold it
    rep = ingest_paths([str(f)], str(tmp_path / "s"))
    assert rep.problems == []
    (r,) = stored(tmp_path / "s")
    assert (r["reward"], r["reward_raw"], r["status"]) == (None, '"NaN"', "failed")

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
    assert "tool_calls[0].function is a str ('ls')" in where[("tool-call-function-is-a-string.json", None)].reason
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
        ("prompt", "<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\nFix it.<|im_end|>\n"),
        ("action", "<|im_start|>assistant\nDone.<|im_end|>\n"),
    ]

"""trajstore/ingest/pipeline.py: ingest_paths end to end: malformed input, --strict, idempotent
re-ingest, S3 (moto), observation capping and hostile text; one bad record costs only itself, also
when every supported format's records are fuzzed (types swapped, fields dropped, values made huge,
null or hostile) with a fixed seed. The CLI's part: tests/cli/test_ingest.py."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.ingest import nemo_row
from trajstore.ingest import (
    FORMATS,
    TRUNCATION_MARKER,
    IngestError,
    IngestReport,
    ingest_paths,
    iter_trajectories,
)
from trajstore.ingest.formats import nemo_gym, registry
from trajstore.reader import read_trajectories


def test_malformed_lines_are_reported_and_the_rest_ingested(tmp_path, mixed):
    rep = ingest_paths([str(mixed)], str(tmp_path / "store"))
    assert rep.trajectories_written == 2
    where = sorted((p.origin.line, p.kind) for p in rep.problems)
    assert where == [(2, "malformed"), (3, "malformed")]
    assert all(p.origin.path == str(mixed) for p in rep.problems)
    assert "not valid JSON" in rep.problems[0].reason and "history" in rep.problems[1].reason


def test_strict_writes_nothing(tmp_path, mixed):
    with pytest.raises(IngestError) as e:
        ingest_paths([str(mixed)], str(tmp_path / "store"), strict=True)
    assert f"{mixed}:2" in str(e.value)
    assert read_trajectories(str(tmp_path / "store")).num_rows == 0


def test_reingest_is_idempotent(tmp_path, fix):
    src = [str(fix / "swe-agent"), str(fix / "openhands/v0_saved_trajectory")]
    first = ingest_paths(src, str(tmp_path / "s"))
    again = ingest_paths(src, str(tmp_path / "s"))
    # 4 saved trajectories + SWE-agent 0.x (1) + 1.x (6: its last_n_observations history processor
    # gives calls 7..11 contexts of their own, see test_swe_agent.py) = 11
    assert first.trajectories_written == 11 and again.trajectories_written == 0
    assert again.skipped["already_in_store"] == 11
    ids = read_trajectories(str(tmp_path / "s"), columns=["trajectory_id"], dedupe=False)
    assert ids.num_rows == 11


def test_duplicate_files_in_one_run(tmp_path, fix):
    a = tmp_path / "a.traj"
    a.write_bytes((fix / "swe-agent/v0.x_gpt4_pydicom__pydicom-1458.traj").read_bytes())
    b = tmp_path / "copy" / "a.traj"
    b.parent.mkdir()
    b.write_bytes(a.read_bytes())
    rep = ingest_paths([str(tmp_path)], str(tmp_path / "store"))
    assert rep.trajectories_written == 1 and rep.skipped["duplicate_in_input"] == 1


def test_ingest_into_s3(s3_store_uri, fix):
    uri, opts = s3_store_uri
    rep = ingest_paths([str(fix / "nemo-gym")], uri, storage_options=opts)
    assert rep.trajectories_written == 10
    t = read_trajectories(uri, storage_options=opts, columns=["token_source", "reward"])
    assert t.num_rows == 10
    again = ingest_paths([str(fix / "nemo-gym")], uri, storage_options=opts)
    assert again.trajectories_written == 0 and again.skipped["already_in_store"] == 10


def test_huge_observation_capped_and_hostile_text(tmp_path, tok):
    huge = "<div>" + "x" * 50_000 + "</div>"
    events = [
        {"id": 0, "source": "user", "action": "message", "args": {"content": "browse"}},
        {"id": 1, "source": "agent", "action": "browse", "args": {"url": "http://x", "thought": "look"}},
        {"id": 2, "source": "agent", "observation": "browse", "cause": 1, "content": huge},
        {"id": 3, "source": "agent", "action": "warp_drive", "args": {"speed": 9}},
        {"id": 4, "source": "agent", "observation": "run", "cause": 3, "content": "\x1b[31mred\x1b[0m\r\nline"},
    ]
    raw = json.dumps(events).encode().replace(b"line", b"l\xffine")  # invalid UTF-8 inside a string
    p = tmp_path / "t.json"
    p.write_bytes(raw)
    rep = ingest_paths([str(p)], str(tmp_path / "s"), max_observation_chars=1000)
    assert rep.trajectories_written == 1 and rep.truncated_observations == 1 and rep.degraded_events == 1
    t = read_trajectories(str(tmp_path / "s")).to_pylist()[0]
    obs = [s for s in t["spans"] if s["kind"] == "observation"]
    assert obs[0]["truncated"] is True and obs[0]["cause_id"] == "1" and obs[1]["cause_id"] == "3"
    text = tok.decode(t["tokens"][obs[0]["start"]:obs[0]["end"]])
    assert TRUNCATION_MARKER.format(dropped=len(huge) - 1000, total=len(huge)).strip() in text
    assert len(text) < 1200
    meta = json.loads(t["metadata"])
    assert meta["truncated_observations"] == [{"message": 2, "original_chars": len(huge)}]
    assert meta["unknown_event_kinds"] == ["warp_drive"]
    assert "\ufffd" in tok.decode(t["tokens"])


def test_unknown_shape_and_missing_path(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"hello": 1}')
    q = tmp_path / "bad.json"
    q.write_text('{"history": [1, 2')
    rep = ingest_paths([str(p), str(q), str(tmp_path / "nope")], str(tmp_path / "s"))
    by = {pr.origin.path: pr for pr in rep.problems}
    assert by[str(p)].kind == "unsupported" and "hello" in by[str(p)].reason
    assert by[str(q)].kind == "malformed" and "line 1" in by[str(q)].reason
    assert by[str(tmp_path / "nope")].reason == "no such file or directory"


def test_json_nested_too_deeply_is_a_problem_not_a_crash(tmp_path):
    # json.loads raised RecursionError, which escaped every handler as a traceback.
    deep = "[" * 100_000 + "]" * 100_000
    p = tmp_path / "deep.json"
    p.write_text(deep)
    q = tmp_path / "deep.jsonl"
    q.write_text('{"hello": 1}\n' + deep + "\n")
    rep = ingest_paths([str(p), str(q)], str(tmp_path / "s"))
    reasons = {(pr.origin.path, pr.origin.line): pr.reason for pr in rep.problems}
    assert "nested too deeply" in reasons[(str(p), None)]
    assert "nested too deeply" in reasons[(str(q), 2)]
    assert rep.trajectories_written == 0


def test_a_too_deep_first_jsonl_line_costs_only_itself(tmp_path):
    # With the deep line first, parsing the file as one document hit the recursion limit before
    # any JSON error, and the whole file was refused: the good chat on line 2 was never stored.
    deep = "[" * 100_000 + "]" * 100_000
    q = tmp_path / "deep-first.jsonl"
    q.write_text(deep + "\n" + json.dumps([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}])
                 + "\n")
    rep = ingest_paths([str(q)], str(tmp_path / "s"))
    reasons = {(pr.origin.path, pr.origin.line): pr.reason for pr in rep.problems}
    assert list(reasons) == [(str(q), 1)] and "nested too deeply" in reasons[(str(q), 1)]
    assert rep.trajectories_written == 1


# -- one bad record costs only itself -----------------------------------------

def test_jsonl_format_is_detected_per_line(tmp_path):
    # The first line is of no known shape and the third of another format: neither decides the
    # file. Line 1 is parsed as the file's format (nemo-gym, from line 2), so its reason names
    # what it lacks; line 3 (a SWE-Gym chat row) is read as what it is.
    swe_gym = {"instance_id": "x-1", "resolved": True,
               "messages": [{"role": "user", "content": "fix"}, {"role": "assistant", "content": "done"}]}
    p = tmp_path / "mixed.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in [{"note": "header"}, nemo_row("a", [5, 6]), swe_gym,
                                                    nemo_row("b", [7])]) + "\n")
    rep = ingest_paths([str(p)], str(tmp_path / "s"))
    assert rep.trajectories_written == 3
    assert dict(rep.by_format) == {"nemo-gym": 2, "openhands/swe-gym": 1}
    assert [(pr.origin.line, pr.kind) for pr in rep.problems] == [(1, "malformed")]
    assert "no 'response' object" in rep.problems[0].reason


def test_a_parser_crash_is_a_problem_of_that_record_only(tmp_path, monkeypatch):
    # Any exception (not only the parsers' RecordError) stays with its record.
    real = nemo_gym.harness_call_count

    def flaky(row):
        if row["reward"] == 0.5:
            raise KeyError("surprise")
        return real(row)

    monkeypatch.setattr(nemo_gym, "harness_call_count", flaky)
    rows = [nemo_row("a", [5]), {**nemo_row("b", [6]), "reward": 0.5}, nemo_row("c", [7])]
    p = tmp_path / "r.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows))
    rep = ingest_paths([str(p)], str(tmp_path / "s"))
    assert rep.trajectories_written == 2
    assert [(pr.origin.line, pr.reason) for pr in rep.problems] == [(2, "KeyError: 'surprise'")]


def test_out_of_order_events_are_read_in_id_order(tmp_path, fix):
    # basic.json holds V0 events with ids 0, 3, 4, 5; the same events shuffled give the same
    # conversation, hence the same trajectory id (already in the store), with the count noted.
    events = json.loads((fix / "openhands/v0_saved_trajectory/basic.json").read_text())
    shuffled = [events[2], events[0], events[3], events[1]]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "t.json").write_text(json.dumps(events))
    (tmp_path / "b" / "t.json").write_text(json.dumps(shuffled))
    store = str(tmp_path / "s")
    first = ingest_paths([str(tmp_path / "a")], store)
    again = ingest_paths([str(tmp_path / "b")], store)
    assert first.trajectories_written == 1 and again.trajectories_written == 0
    assert again.skipped == {"already_in_store": 1}
    # two different events with one id: the order is unknowable, the trajectory is refused
    clash = [events[0], {**events[1], "id": 0}]
    (tmp_path / "c.json").write_text(json.dumps(clash))
    rep = ingest_paths([str(tmp_path / "c.json")], store)
    assert rep.trajectories_written == 0
    assert "share id 0 with different content" in rep.problems[0].reason


def test_a_cap_that_truncates_nothing_keeps_the_ids(tmp_path, fix):
    src = [str(fix / "swe-agent")]
    store = str(tmp_path / "s")
    first = ingest_paths(src, store)
    # 7 = the 0.x run (one context) + the 1.x run, whose history processor gives 6 contexts
    assert first.trajectories_written == 7 and first.truncated_observations == 0
    again = ingest_paths(src, store, max_observation_chars=None)  # no cap: nothing changes
    assert again.trajectories_written == 0 and again.skipped == {"already_in_store": 7}
    cut = ingest_paths(src, store, max_observation_chars=50)  # this cap cuts observations: new content
    assert cut.truncated_observations > 0 and cut.trajectories_written > 0


def test_a_directory_is_never_skipped_silently(tmp_path):
    d = tmp_path / "dataset"
    d.mkdir()
    (d / "README.md").write_text("# a dataset card")
    (d / "data.arrow").write_bytes(b"\x00")
    rep = ingest_paths([str(d)], str(tmp_path / "s"))
    assert rep.files_seen == 0 and rep.ignored_files == {".md": 1, ".arrow": 1}
    assert [(pr.origin.path, pr.kind) for pr in rep.problems] == [(str(d), "unsupported")]
    assert "(1 .md, 1 .arrow)" in rep.problems[0].reason or "(1 .arrow, 1 .md)" in rep.problems[0].reason


@pytest.mark.slow
def test_every_real_fixture_is_stored_or_turned_away_with_a_reason(tmp_path, fix):
    """The whole ``../shared/fixtures/trajectories`` tree (~12 CPU-seconds, hence slow): every
    log file ends up in a stored trajectory (its own or its events/ folder's), or is turned
    away with a reason, or is a completion log superseded by a later one of the same run."""
    st = str(tmp_path / "s")
    rep = ingest_paths([str(fix)], st)
    assert rep.refused == 0 and rep.ignored_files == {".md": 1}  # SOURCES.md
    # base_state.json x3, the V0 session's metadata.json, eval_*.json x4 (scores of traj_*.json or a crash)
    assert [p.kind for p in rep.problems] == ["no_trajectory"] * 8 and all(len(p.reason) > 20 for p in rep.problems)
    # V1 completion logs: each log repeats the run's earlier requests, so only the last of each
    # folder is a trajectory: llm-logs 6 - 1 = 5, nonfncall-llm-logs 4 - 1 = 3
    assert rep.skipped == {"superseded_completion_log": 8}
    logs = fix / "openhands/sdk_v1_llm_completion_logs_2025-09"
    superseded = {p for d in ("llm-logs", "nonfncall-llm-logs") for p in sorted((logs / d).glob("*.json"))[:-1]}
    origins = {Path(json.loads(m)["ingest"]["path"]).resolve()
               for m in read_trajectories(st, columns=["metadata"]).column("metadata").to_pylist()}
    away = {Path(p.origin.path).resolve() for p in rep.problems}
    files = [p for p in fix.rglob("*") if p.is_file() and p.suffix in (".json", ".jsonl", ".traj", ".parquet")]
    unaccounted = [p for p in files if p not in superseded and p.resolve() not in away
                   and not ({p.resolve(), *p.resolve().parents} & origins)]
    assert unaccounted == []


# reported: ../shared/fixtures/reported/one-bad-record
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


SEED = 20261201

MUTANTS_PER_FORMAT = 12

GOOD_PER_FORMAT = 3


# -- fuzz: valid records of every supported input format, mutated (types swapped, fields dropped,
# numbers huge, strings where objects are expected, nesting, nulls), never cost more than themselves.
# For each format a small valid seed is written by hand; copies of it (made unique) are
# interleaved with mutated copies in one input. Asserted: no exception escapes, every good record
# yields its trajectory and no problem, every mutated record either still yields a trajectory
# (the mutation was harmless) or is a problem that names its file and, in a JSONL file, its
# line. The random source is fixed, so a failure reproduces.

# -- one valid record per format (i makes copies unique) ------------------------------------------
def _chat(i: int) -> list[dict[str, Any]]:
    return [{"role": "system", "content": "sys"}, {"role": "user", "content": f"task {i}"},
            {"role": "assistant", "content": "look", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{\"path\": \".\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
            {"role": "assistant", "content": "done"}]


def _v0_events(i: int) -> list[dict[str, Any]]:
    return [{"id": 0, "source": "user", "action": "message", "args": {"content": f"task {i}"}},
            {"id": 1, "source": "agent", "action": "run", "args": {"command": "ls", "thought": "look"}},
            {"id": 2, "source": "agent", "observation": "run", "content": "a.txt", "cause": 1},
            {"id": 3, "source": "agent", "action": "finish", "args": {"final_thought": "done"}}]


def _v1_events(i: int) -> list[dict[str, Any]]:
    return [{"kind": "SystemPromptEvent", "id": "s", "source": "agent", "system_prompt": {"text": "sys"}},
            {"kind": "MessageEvent", "id": "u", "source": "user",
             "llm_message": {"role": "user", "content": [{"type": "text", "text": f"task {i}"}]}},
            {"kind": "ActionEvent", "id": "a", "source": "agent", "thought": [{"type": "text", "text": "look"}],
             "tool_call": {"id": "c1", "name": "terminal", "arguments": "{\"command\": \"ls\"}"},
             "tool_call_id": "c1", "tool_name": "terminal", "llm_response_id": "r1"},
            {"kind": "ObservationEvent", "id": "o", "source": "environment", "tool_call_id": "c1",
             "observation": {"content": [{"type": "text", "text": "a.txt"}]}}]


def _atif(i: int) -> dict[str, Any]:
    return {"schema_version": "ATIF-v1.4", "session_id": f"s{i}", "agent": {"name": "a", "version": "1"},
            "steps": [{"step_id": 1, "source": "user", "message": f"task {i}"},
                      {"step_id": 2, "source": "agent", "message": "",
                       "tool_calls": [{"tool_call_id": "c1", "function_name": "bash", "arguments": {"cmd": "ls"}}],
                       "observation": {"results": [{"source_call_id": "c1", "content": "a"}]},
                       "metrics": {"prompt_token_ids": [1, 2, i + 3], "completion_token_ids": [5, 6],
                                   "logprobs": [-0.1, -0.2]}},
                      {"step_id": 3, "source": "agent", "message": "done",
                       "metrics": {"prompt_token_ids": [1, 2, i + 3, 5, 6, 9], "completion_token_ids": [7],
                                   "logprobs": [-0.3]}}]}


ROW_SEEDS: dict[str, Callable[[int], Any]] = {
    "openhands-v0-eval": lambda i: {"instance_id": f"inst-{i}", "history": _v0_events(i), "error": None,
                                    "test_result": {"report": {"resolved": True}},
                                    "metadata": {"llm_config": {"model": "m"}, "agent_class": "CodeActAgent"}},
    "openhands-v0-resolver": lambda i: {"issue": {"owner": "o", "repo": "r", "number": i}, "success": True,
                                        "history": [{"action": "message", "args": {"content": f"issue {i}"}},
                                                    {"action": "run", "args": {"command": "ls"}},
                                                    {"observation": "run", "content": "x"}]},
    "openhands-v0-feedback": lambda i: {"feedback": "positive", "version": "1", "trajectory": _v0_events(i)},
    "openhands-swe-gym": lambda i: {"instance_id": f"inst-{i}", "resolved": True, "run_id": "r", "messages": _chat(i)},
    "openhands-v1-eval": lambda i: {"instance_id": f"inst-{i}", "history": _v1_events(i),
                                    "test_result": {"report": {"resolved": True}}},
    "openhands-v1-completions": lambda i: {"messages": _chat(i)[:2], "timestamp": 1.7e9,
                                           "response": {"id": f"r{i}", "model": "m", "choices": [
                                               {"finish_reason": "stop",
                                                "message": {"role": "assistant", "content": "done"}}]}},
    "swe-agent": lambda i: {"trajectory": [], "history": _chat(i), "info": {"exit_status": "submitted"}},
    "nebius-swe-agent": lambda i: {"instance_id": f"inst-{i}", "model_name": "m", "target": True,
                                   "trajectory": [{"role": "system", "system_prompt": "sys"},
                                                  {"role": "user", "text": f"task {i}"},
                                                  {"role": "ai", "text": "done", "mask": False}]},
    "nemo-gym": lambda i: {"responses_create_params": {"input": [{"role": "user", "content": f"task {i}"}]},
                           "response": {"output": [{"id": "o1", "type": "message", "prompt_token_ids": [1, i + 2],
                                                    "generation_token_ids": [5, 6],
                                                    "generation_log_probs": [-0.1, -0.2]}]},
                           "reward": 1.0},
    "mini-swe-agent": lambda i: {"trajectory_format": "mini-swe-agent-1.1", "instance_id": f"inst-{i}",
                                 "info": {"exit_status": "Submitted", "submission": "",
                                          "config": {"model": {"model_name": "m"}}},
                                 "messages": _chat(i) + [{"role": "exit", "content": "",
                                                          "extra": {"exit_status": "Submitted"}}]},
    "swe-smith": lambda i: {"traj_id": f"t{i}", "instance_id": "inst", "model": "m", "resolved": True, "patch": "",
                            "messages": json.dumps(_chat(i))},
    "nebius-swe-rebench-openhands": lambda i: {"trajectory_id": f"t{i}", "instance_id": "inst", "resolved": 1,
                                               "exit_status": "submit", "tools": [], "trajectory": _chat(i)},
    "tau-bench": lambda i: {"task_id": i, "trial": 0, "reward": 1.0, "info": {"reward_info": {"reward": 1.0}},
                            "traj": _chat(i)},
    "atif": _atif,
    "verl-rollouts": lambda i: {"input": f"<|im_start|>user\nq{i}<|im_end|>\n<|im_start|>assistant\n",
                                "output": "a<|im_end|>", "score": 1.0, "step": 1},
    "chat-messages": lambda i: {"messages": _chat(i), "reward": 1.0, "id": f"c{i}"},
}

DOC_SEEDS: dict[str, Callable[[int], Any]] = {
    "openhands-v0-events": _v0_events,
    "openhands-v1-events": _v1_events,
    "chat-messages": _chat,
}


# -- mutations -----------------------------------------------------------------------------------
def _paths(v: Any, at: tuple = ()) -> list[tuple]:
    out = [at]
    if isinstance(v, dict):
        for k, x in v.items():
            out += _paths(x, at + (k,))
    elif isinstance(v, list):
        for k, x in enumerate(v):
            out += _paths(x, at + (k,))
    return out


def _swap(x: Any, rng: random.Random) -> Any:
    """Another type in place of `x`: the shapes parsers meet in broken logs."""
    if isinstance(x, dict):
        return rng.choice(["a string where an object belongs", [x], None, 7, []])
    if isinstance(x, list):
        return rng.choice(["a string where a list belongs", {"0": x}, None, 3.5, [x]])
    if isinstance(x, bool):
        return rng.choice(["true", 2, None, [x]])
    if isinstance(x, (int, float)):
        return rng.choice([str(x), 10**30, -(10**30), 1e308, -1e308, 2**63, -1, None, [x], True])
    if isinstance(x, str):
        return rng.choice([None, 12345, ["x"], {"text": x}, x * 3 + "\udcff", "", "\x00"])
    return rng.choice(["x", {}, []])


def mutate(rec: Any, rng: random.Random) -> Any:
    rec = copy.deepcopy(rec)
    at = rng.choice(_paths(rec))
    if not at:
        return _swap(rec, rng)
    parent = rec
    for k in at[:-1]:
        parent = parent[k]
    key = at[-1]
    op = rng.random()
    if op < 0.3:  # drop the field / item
        del parent[key]
    elif op < 0.9:
        parent[key] = _swap(parent[key], rng)
    else:  # nest it deeper
        parent[key] = {"wrapped": [parent[key]]}
    return rec


def _dump(v: Any) -> str:
    return json.dumps(v)  # ASCII escapes: a lone surrogate reaches the parsers as it would from a real file


# -- the test ------------------------------------------------------------------------------------
def _lines_of(trajs) -> dict[str, set[int | None]]:
    out: dict[str, set[int | None]] = {}
    for t in trajs:
        ing = t.metadata["ingest"]
        out.setdefault(ing["path"], set()).add(ing["line"])
    return out


def test_every_format_has_a_seed():
    # trajstore-parquet is Parquet only (no JSON record to mutate): tests/ingest/test_trajstore_parquet.py
    assert set(ROW_SEEDS) | set(DOC_SEEDS) | {"openhands-v0-session", "trajstore-parquet"} == set(FORMATS)


def test_fuzz_every_format(tmp_path):
    rng = random.Random(SEED)
    expect_good: dict[tuple[str, int | None], str] = {}
    mutants: dict[tuple[str, int | None], str] = {}
    for fmt, seed in ROW_SEEDS.items():
        lines = []
        for i in range(GOOD_PER_FORMAT + MUTANTS_PER_FORMAT):
            good = i < GOOD_PER_FORMAT
            rec = seed(i) if good else mutate(seed(100 + i), rng)
            lines.append(_dump(rec))
        order = list(range(len(lines)))
        rng.shuffle(order)  # good rows anywhere, also after broken ones
        p = tmp_path / "rows" / f"{fmt}.jsonl"
        p.parent.mkdir(exist_ok=True)
        p.write_text("\n".join(lines[k] for k in order) + "\n")
        for n, k in enumerate(order, start=1):
            (expect_good if k < GOOD_PER_FORMAT else mutants)[(str(p), n)] = fmt
    for fmt, seed in DOC_SEEDS.items():
        for i in range(GOOD_PER_FORMAT + MUTANTS_PER_FORMAT):
            good = i < GOOD_PER_FORMAT
            rec = seed(i) if good else mutate(seed(100 + i), rng)
            if fmt == "openhands-v1-events":  # a JSONL of events
                p = tmp_path / "docs" / f"{fmt}-{i}.jsonl"
                text = "\n".join(_dump(e) for e in rec) + "\n" if isinstance(rec, list) else _dump(rec)
            else:
                p = tmp_path / "docs" / f"{fmt}-{i}.json"
                text = _dump(rec)
            p.parent.mkdir(exist_ok=True)
            p.write_text(text)
            (expect_good if good else mutants)[(str(p), None)] = fmt
    for i in range(GOOD_PER_FORMAT + MUTANTS_PER_FORMAT):  # openhands-v0-session: one file per event
        good = i < GOOD_PER_FORMAT
        events = _v0_events(i)
        if not good:
            k = rng.randrange(len(events))
            events[k] = mutate(events[k], rng)
        d = tmp_path / "sessions" / f"s{i}" / "events"
        d.mkdir(parents=True)
        for n, ev in enumerate(events):
            (d / f"{n}.json").write_text(_dump(ev))
        (expect_good if good else mutants)[(str(d), None)] = "openhands-v0-session"

    report = IngestReport()
    trajs = list(iter_trajectories([str(tmp_path)], report=report))  # must not raise
    built = _lines_of(trajs)
    problems: dict[tuple[str, int | None], list[str]] = {}
    for pr in report.problems:
        problems.setdefault((pr.origin.path, pr.origin.line), []).append(pr.reason)

    def yielded(path: str, line: int | None) -> bool:
        return line in built.get(path, set()) if line is not None else path in built

    def reported(path: str, line: int | None) -> bool:
        if line is not None:
            return (path, line) in problems
        return any(p == path or p.startswith(path + "/") for p, _ in problems)  # event dir: its files

    missed = [(k, f) for k, f in expect_good.items() if not yielded(*k) or (k in problems)]
    assert not missed, f"good records not stored or reported: {missed[:5]} {[problems.get(k) for k, _ in missed[:5]]}"
    silent = [(k, f) for k, f in mutants.items() if not yielded(*k) and not reported(*k)]
    assert not silent, f"mutated records neither stored nor reported: {silent[:5]}"
    assert all(pr.origin.path for pr in report.problems) and all(pr.reason for pr in report.problems)
    assert all(pr.origin.line is not None for pr in report.problems if pr.origin.path.endswith(".jsonl")
               and "/rows/" in pr.origin.path)
    every = {f for f in ROW_SEEDS} | set(DOC_SEEDS) | {"openhands-v0-session"}
    assert {f for k, f in expect_good.items()} == every

    # and through the store: everything built is written or a counted duplicate, nothing raises
    rep = ingest_paths([str(tmp_path / "rows"), str(tmp_path / "docs"), str(tmp_path / "sessions")],
                       str(tmp_path / "store"))
    assert rep.trajectories_written + rep.skipped.get("duplicate_in_input", 0) == rep.trajectories_parsed == len(trajs)
    assert len(rep.problems) == len(report.problems)


@pytest.mark.parametrize("fmt", sorted(ROW_SEEDS))
def test_seeds_are_valid(fmt, tmp_path):
    """Each hand-written seed alone ingests as its own format with no problem (else the fuzz
    test above would prove nothing for it)."""
    p = tmp_path / "one.jsonl"
    p.write_text(_dump(ROW_SEEDS[fmt](0)) + "\n" + _dump(ROW_SEEDS[fmt](1)) + "\n")
    report = IngestReport()
    trajs = list(iter_trajectories([str(p)], report=report))
    assert report.problems == [] and len(trajs) >= 2 and len(report.by_format) == 1
    assert [f.name for f in registry.formats_of(ROW_SEEDS[fmt](0))] == [fmt]  # its structure is that of exactly one format

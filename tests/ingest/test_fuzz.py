"""Fuzz: valid records of every supported input format, mutated (types swapped, fields dropped,
numbers huge, strings where objects are expected, nesting, nulls), never cost more than themselves.

For each format a small valid seed is written by hand; copies of it (made unique) are
interleaved with mutated copies in one input. Asserted: no exception escapes, every good record
yields its trajectory and no problem, every mutated record either still yields a trajectory
(the mutation was harmless) or is a problem that names its file and, in a JSONL file, its
line. The random source is fixed, so a failure reproduces.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from typing import Any

import pytest

from trajstore.ingest import FORMATS, IngestReport, detect, ingest_paths, iter_trajectories

SEED = 20261201
MUTANTS_PER_FORMAT = 12
GOOD_PER_FORMAT = 3


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
"""Formats whose records are rows (a JSONL line each); chat-messages is also a whole file."""

DOC_SEEDS: dict[str, Callable[[int], Any]] = {
    "openhands-v0-events": _v0_events,
    "openhands-v1-events": _v1_events,
    "chat-messages": _chat,
}
"""Formats whose record is a whole file."""


def test_every_format_has_a_seed():
    # trajstore-parquet is Parquet only (no JSON record to mutate): tests/ingest/test_trajstore_parquet.py
    assert set(ROW_SEEDS) | set(DOC_SEEDS) | {"openhands-v0-session", "trajstore-parquet"} == set(FORMATS)


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
    assert detect.detect_record(ROW_SEEDS[fmt](0)) == fmt

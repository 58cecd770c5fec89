"""Faults a hostile tester found in ``traj ingest``, one kind per test (each failed before its fix):
special files that block a read, concurrent ingests of the same input, outcome strings,
multi-line / internal-name refusals, binary files, integers too long to convert, odd
``tool_calls``. Expected values are written by hand."""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from trajstore.errors import TrajectoryValidationError, Violation
from trajstore.ingest import ingest_paths
from trajstore.ingest.commit import store_lock
from trajstore.ingest.read import NotARegularFile, read_text
from trajstore.ingest.reasons import problem_reason
from trajstore.ingest.records import Origin, Problem, RecordError, Reward
from trajstore.ingest.rewards import bool_reward, float_reward
from trajstore.reader import read_trajectories
from trajstore.store import open_store

CHAT = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Fix it."},
        {"role": "assistant", "content": "ls"}, {"role": "user", "content": "src tests"},
        {"role": "assistant", "content": "Done."}]


def smith_row(n: int, **kw) -> dict:
    """A SWE-smith row (messages as a JSON string), trajectory ``t<n>``."""
    return {"messages": json.dumps(CHAT), "instance_id": f"demo__lib.{n}", "resolved": True, "model": "m",
            "traj_id": f"t{n}", "patch": "diff", **kw}


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def by_line(rep) -> dict:
    return {(Path(p.origin.path).name, p.origin.line): p for p in rep.problems}


def stored(store) -> list[dict]:
    return read_trajectories(str(store), dedupe=False).to_pylist()


def run_with_deadline(fn, seconds: float = 60.0):
    """Run `fn` in a thread; fail (instead of hanging the suite) when it blocks past `seconds`."""
    out: dict = {}

    def target() -> None:
        try:
            out["v"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            out["e"] = e
    th = threading.Thread(target=target, daemon=True)
    th.start()
    th.join(seconds)
    assert not th.is_alive(), f"blocked for more than {seconds} s"
    if "e" in out:
        raise out["e"]
    return out["v"]


# -- 1. named pipes and other special files ------------------------------------------------------

@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")
def test_a_named_pipe_in_a_folder_is_skipped_never_opened(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    write_jsonl(d / "a.jsonl", [smith_row(1)])
    os.mkfifo(d / "b.jsonl")  # no writer: opening it for reading would block forever
    rep = run_with_deadline(lambda: ingest_paths([str(d)], str(tmp_path / "s")))
    assert rep.trajectories_written == 1  # a.jsonl's one row
    p = by_line(rep)[("b.jsonl", None)]
    assert (p.kind, p.reason) == ("no_trajectory", "a named pipe (FIFO), not a regular file: skipped, never opened")
    assert rep.refused == 0  # deliberately skipped: exit status 0


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")
def test_cli_names_the_skipped_pipe_and_exits_0(tmp_path):
    from typer.testing import CliRunner

    from trajstore.cli.main import app

    d = tmp_path / "logs"
    d.mkdir()
    write_jsonl(d / "a.jsonl", [smith_row(1)])
    os.mkfifo(d / "pipe.json")
    r = run_with_deadline(lambda: CliRunner().invoke(app, ["ingest", str(d), "--store", str(tmp_path / "s")]))
    assert r.exit_code == 0, r.output
    assert f"skipped {d / 'pipe.json'}: no_trajectory: a named pipe (FIFO), not a regular file: skipped, never " \
           "opened" in " ".join(r.output.split())


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")
def test_a_named_pipe_named_on_the_command_line_is_refused_and_read_text_never_blocks(tmp_path):
    fifo = tmp_path / "p.json"
    os.mkfifo(fifo)
    rep = run_with_deadline(lambda: ingest_paths([str(fifo)], str(tmp_path / "s")))
    (p,) = rep.problems
    assert (p.kind, p.reason) == ("unsupported", "a named pipe (FIFO), not a regular file: not read "
                                                 "(traj ingest reads files and directories)")
    assert rep.refused == 1
    # a file that became a pipe after the walk (or an eval_/metadata file next to a log) is refused, not waited on
    with pytest.raises(NotARegularFile, match=r"^a named pipe \(FIFO\), not a regular file: not read$"):
        run_with_deadline(lambda: read_text(str(fifo)), 10)


# -- 2. concurrent ingests of the same input --------------------------------------------------------

def two_ingests_at_once(f: Path, store: str, storage_options: dict | None = None) -> list:
    """Ingest `f` into `store` from two threads that both read the store's ids (empty) before
    either commits; their reports."""
    # Both runs read the store's ids (empty) before either commits: each waits for the other at
    # its first progress call, which comes after its first trajectory is built.
    barrier = threading.Barrier(2, timeout=60)
    reports: list = [None, None]

    def run(k: int) -> None:
        waited = []

        def progress(_):
            if not waited:
                waited.append(barrier.wait())
        reports[k] = ingest_paths([str(f)], store, progress=progress, storage_options=storage_options)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert [r.problems for r in reports] == [[], []]
    return reports


def test_two_ingests_at_once_store_each_trajectory_once(tmp_path):
    # also the tokenizer's first load from two threads (transformers' lazy import raced: ImportError)
    f = write_jsonl(tmp_path / "rows.jsonl", [smith_row(n) for n in range(3)])
    store = tmp_path / "s"
    reports = two_ingests_at_once(f, str(store))
    rows = stored(store)
    assert sorted(r["trajectory_id"].split(":")[1] for r in rows) == ["t0", "t1", "t2"]  # 3 rows, no copy
    assert sorted(r.trajectories_written for r in reports) == [0, 3]
    assert sorted(r.skipped["already_in_store"] for r in reports) == [0, 3]


def test_two_ingests_at_once_on_one_host_into_s3_store_each_trajectory_once(tmp_path, s3_store_uri):
    # S3 has no lock: one host's ingests share a lock file in its temp folder (hosts apart are not serialised)
    uri, opts = s3_store_uri
    f = write_jsonl(tmp_path / "rows.jsonl", [smith_row(n) for n in range(3)])
    reports = two_ingests_at_once(f, uri, opts)
    assert sorted(r.trajectories_written for r in reports) == [0, 3]
    assert len(read_trajectories(uri, dedupe=False, storage_options=opts)) == 3


def _waiters_on(path: Path) -> int:
    """Processes blocked on a flock of `path` (Linux /proc/locks lines marked ``->``)."""
    ino = os.stat(path).st_ino
    return sum(1 for ln in Path("/proc/locks").read_text().splitlines()
               if "->" in ln and ln.split()[-3].rsplit(":", 1)[-1] == str(ino))


@pytest.mark.slow  # two CLI processes (~10 s on 2 cores); the two-thread test above covers the same logic fast
@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux /proc/locks to see the waiting runs")
def test_two_traj_ingest_processes_at_once_store_each_trajectory_once(tmp_path):
    f = write_jsonl(tmp_path / "rows.jsonl", [smith_row(n) for n in range(4)])
    store = open_store(str(tmp_path / "s"))
    cmd = [str(Path(sys.executable).with_name("traj")), "ingest", str(f), "--store", store.uri, "--format", "json"]
    with store_lock(store):  # both runs parse, then wait to commit: neither has stored anything yet
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        lock_file = Path(store.path("_locks", "ingest.lock"))
        deadline = time.monotonic() + 90
        while _waiters_on(lock_file) < 2 and time.monotonic() < deadline and all(p.poll() is None for p in procs):
            time.sleep(0.1)
        assert _waiters_on(lock_file) == 2, [p.communicate() for p in procs if p.poll() is not None]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    written = sorted(json.loads(o)["trajectories_written"] for o, _ in outs)
    assert written == [0, 4]  # the second run to commit found all 4 stored by the first
    assert len(stored(store.uri)) == 4


# -- 3. outcome strings --------------------------------------------------------------------------------

@pytest.mark.parametrize("value, reward", [("true", 1.0), ("True", 1.0), (" false ", 0.0), ("1", 1.0), ("0", 0.0),
                                           ("yes", 1.0), ("no", 0.0), (True, 1.0), (0, 0.0), (1.0, 1.0)])
def test_outcome_spellings_are_rewards(value, reward):
    r = bool_reward(value, "resolved")
    assert (r.value, r.raw, r.field) == (reward, value, "resolved")


@pytest.mark.parametrize("value, reason", [
    ("maybe", "resolved is 'maybe': expected true/false or 1/0"),
    (2, "resolved is 2: expected true/false or 1/0"),
    ([True], "resolved is [True]: expected true/false or 1/0"),
])
def test_other_outcomes_are_refused_naming_the_field(value, reason):
    with pytest.raises(RecordError) as e:
        bool_reward(value, "resolved")
    assert str(e.value) == reason


@pytest.mark.parametrize("value, expected", [("0.5", 0.5), (" -1 ", -1.0), ("true", 1.0), (3, 3.0), (False, 0.0)])
def test_numeric_reward_strings_are_numbers(value, expected):
    assert float_reward(value, "score").value == expected


@pytest.mark.parametrize("value, reason", [
    ("n/a", "score is 'n/a': expected a finite number"),
    ("NaN", "score is 'NaN': expected a finite number"),
    (float("inf"), "score is inf: expected a finite number"),
    (10 ** 400, "score is an integer of 401 digits: too large for a reward (a finite number)"),
    ({"a": 1}, "score is a dict ({'a': 1}): expected a finite number"),
], ids=["text", "nan-text", "inf", "10**400", "object"])
def test_non_numeric_rewards_are_refused_naming_the_field(value, reason):
    with pytest.raises(RecordError) as e:
        float_reward(value, "score")
    assert str(e.value) == reason


def test_resolved_as_a_string_in_a_swe_smith_file(tmp_path):
    f = write_jsonl(tmp_path / "rows.jsonl", [smith_row(1, resolved="true"), smith_row(2, resolved="False"),
                                              smith_row(3, resolved="maybe")])
    rep = ingest_paths([str(f)], str(tmp_path / "s"))
    got = {r["trajectory_id"].split(":")[1]: (r["reward"], r["reward_raw"]) for r in stored(tmp_path / "s")}
    assert got == {"t1": (1.0, '"true"'), "t2": (0.0, '"False"')}
    assert str(by_line(rep)[("rows.jsonl", 3)]) == (f"{f}:3: malformed: resolved is 'maybe': expected true/false "
                                                    "or 1/0")


def test_verl_score_strings(tmp_path):
    f = write_jsonl(tmp_path / "dump.jsonl", [{"input": "2+2?", "output": "4", "score": "1.0", "step": 1},
                                              {"input": "2+3?", "output": "6", "score": "NaN", "step": 1}])
    rep = ingest_paths([str(f)], str(tmp_path / "s"))
    assert [r["reward"] for r in stored(tmp_path / "s")] == [1.0]
    assert by_line(rep)[("dump.jsonl", 2)].reason == "score is 'NaN': expected a finite number"


# -- 4. one line, in the input's terms ----------------------------------------------------------------

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


def test_invalid_trajectory_reasons_are_one_line_naming_the_input_field():
    e = TrajectoryValidationError("x", [Violation("reward_raw", "is not valid JSON (NaN)\n  at 1"),
                                        Violation("spans[2].end", "end 5 is past the last token (4 tokens)")])
    item = type("Item", (), {"reward": Reward(None, float("nan"), field="resolved")})()
    assert problem_reason(e, item) == ("the trajectory built from it would be invalid: the reward (field 'resolved'): is not "
                             "valid JSON (NaN) at 1; turn span 3 (end): end 5 is past the last token (4 tokens)")


def test_pydantic_errors_are_one_line_naming_the_input_field():
    from trajstore.models import Trajectory

    with pytest.raises(Exception) as e:
        Trajectory(trajectory_id="x", model={"name": "m"}, tokens=[1], logprobs=[None], spans=[])
    why = problem_reason(e.value)
    assert "\n" not in why and "validation error" not in why and "pydantic.dev" not in why
    assert why.startswith("the model name: Input should be a valid string (got {'name': 'm'})")


def test_a_problem_reason_is_always_one_line():
    p = Problem(Origin("f.jsonl", 3), "invalid", "bad:\n  - a\n\n  - b")
    assert str(p) == "f.jsonl:3: invalid: bad: - a - b"


# -- 5. binary files ------------------------------------------------------------------------------------

def test_random_bytes_named_parquet_is_not_valid_parquet_and_nothing_binary_is_echoed(tmp_path):
    f = tmp_path / "train-00000-of-00001.parquet"
    f.write_bytes(b"\x00\x01" + random.Random(0).randbytes(4094))
    (p,) = ingest_paths([str(f)], str(tmp_path / "s")).problems
    assert p.reason == "not valid Parquet (the file does not start with the Parquet magic bytes PAR1): binary data"


@pytest.mark.parametrize("name, data, what", [
    ("x.jsonl.gz", gzip.compress(b'{"a": 1}\n'), "gzip-compressed data (decompress it first)"),
    ("x.json", b"PK\x03\x04rest-of-a-zip", "a zip archive (extract it first)"),
    ("x.jsonl", bytes(range(256)) * 8, "binary data"),
    ("x.json", "\ufeff[1]".encode("utf-16"), "UTF-16 text (save it as UTF-8)"),
])
def test_binary_files_are_not_a_recognised_format(tmp_path, name, data, what):
    f = tmp_path / name
    f.write_bytes(data)
    (p,) = ingest_paths([str(f)], str(tmp_path / "s")).problems
    assert (p.kind, p.reason) == ("malformed", f"not a recognised format: {what}; traj ingest reads JSON, JSONL "
                                               "and Parquet")


def test_a_broken_parquet_file_is_one_line(tmp_path):
    f = tmp_path / "x.parquet"
    f.write_bytes(b"PAR1" + b"\x00" * 64)  # magic, then nothing Parquet can read
    (p,) = ingest_paths([str(f)], str(tmp_path / "s")).problems
    assert p.reason.startswith("not valid Parquet: ") and "\n" not in p.reason


# -- 6. integers too long to convert ------------------------------------------------------------------

HUGE = "9" * 5000  # 5000 digits > Python's default limit of 4300


def test_a_huge_integer_costs_only_its_line_and_names_the_field(tmp_path):
    rows = [json.dumps(smith_row(1)), json.dumps(smith_row(2))[:-1] + f', "extra": {{"n": [1, {HUGE}]}}}}',
            json.dumps(smith_row(3))]
    f = write_jsonl(tmp_path / "rows.jsonl", rows)
    rep = ingest_paths([str(f)], str(tmp_path / "s"))
    assert rep.trajectories_written == 2  # lines 1 and 3
    assert by_line(rep)[("rows.jsonl", 2)].reason == ("field extra.n[1] is an integer of 5000 digits: too large for "
                                                      "any field (numbers are read up to 4300 digits)")


def test_a_huge_integer_in_a_json_array_costs_only_its_row(tmp_path):
    f = tmp_path / "rows.json"
    f.write_text("[" + json.dumps(smith_row(1)) + ", " + json.dumps(smith_row(2))[:-1] + f', "resolved": -{HUGE}}}]')
    rep = ingest_paths([str(f)], str(tmp_path / "s"))
    assert rep.trajectories_written == 1
    assert by_line(rep)[("rows.json", 2)].reason == ("field resolved is an integer of 5000 digits: too large for "
                                                     "any field (numbers are read up to 4300 digits)")


def test_a_huge_integer_in_a_single_document(tmp_path):
    f = tmp_path / "one.json"
    f.write_text(json.dumps(smith_row(1))[:-1] + f', "reward": {HUGE}}}')
    (p,) = ingest_paths([str(f)], str(tmp_path / "s")).problems
    assert str(p) == (f"{f}: malformed: field reward is an integer of 5000 digits: too large for any field "
                      "(numbers are read up to 4300 digits)")


# -- 7. odd tool_calls ------------------------------------------------------------------------------------

@pytest.mark.parametrize("calls, reason", [
    ("ls -la", "messages[2].tool_calls is a string ('ls -la'), expected a list of tool calls "
               '({"id", "function": {"name", "arguments"}} objects)'),
    ({"name": "bash", "arguments": "{}"}, "messages[2].tool_calls is an object (keys: name, arguments), expected a "
                                          'list of tool calls ({"id", "function": {"name", "arguments"}} objects)'),
    ([7], 'messages[2].tool_calls[0] is a number (7), expected a tool call object ({"id", "function": '
          '{"name", "arguments"}})'),
])
def test_odd_tool_calls_name_the_field_and_what_was_expected(tmp_path, calls, reason):
    chat = [dict(m) for m in CHAT]
    chat[2]["tool_calls"] = calls
    f = write_jsonl(tmp_path / "rows.jsonl", [smith_row(1, messages=json.dumps(chat)), smith_row(2)])
    rep = ingest_paths([str(f)], str(tmp_path / "s"))
    assert rep.trajectories_written == 1
    assert by_line(rep)[("rows.jsonl", 1)].reason == reason


def test_odd_tool_calls_in_an_atif_step(reported, tmp_path):
    doc = json.loads((reported / "other-formats" / "atif-trajectory.json").read_text())
    agent = next(i for i, s in enumerate(doc["steps"]) if s["source"] == "agent")
    doc["steps"][agent]["tool_calls"] = "bash ls"
    f = tmp_path / "trajectory.json"
    f.write_text(json.dumps(doc))
    (p,) = ingest_paths([str(f)], str(tmp_path / "s")).problems
    assert p.reason == (f"steps[{agent}].tool_calls is a string ('bash ls'), expected a list of tool calls "
                        "(objects with tool_call_id, function_name, arguments)")


@pytest.mark.parametrize("fmt, row, reason", [
    ("swe-agent", {"trajectory": 2.5, "history": [], "info": {}},
     "trajectory is a number (2.5), expected a list of steps"),
    ("openhands-v0-eval", {"instance_id": "i", "history": [{"id": 0, "observation": {"kind": "run"}}]},
     "event 0: observation is an object (keys: kind), expected the observation's kind (a string)"),
])
def test_odd_types_in_other_formats_name_the_field(tmp_path, fmt, row, reason):
    f = write_jsonl(tmp_path / "rows.jsonl", [row])
    (p,) = ingest_paths([str(f)], str(tmp_path / "s"), input_format=fmt).problems
    assert p.reason == reason


# -- unpaired surrogates (an emoji cut in half, written as a lone \udXXX escape) ------------------

def test_an_unpaired_surrogate_is_replaced_and_flagged_not_a_unicode_traceback(tmp_path):
    chat = [dict(m) for m in CHAT]
    chat[3]["content"] = "src tests \ud83d"  # the high half of an emoji, its low half cut off
    f = tmp_path / "rows.jsonl"
    f.write_text(json.dumps(smith_row(1, messages=json.dumps(chat))) + "\n"  # ASCII escapes, as harnesses write
                 + json.dumps({"input": "2+2? \udcff", "output": "4", "score": 1, "step": 0}) + "\n")
    rep = ingest_paths([str(f)], str(tmp_path / "s"))
    assert rep.problems == []
    rows = stored(tmp_path / "s")
    assert len(rows) == 2
    for r in rows:
        gaps = json.loads(r["metadata"])["fidelity_gaps"]
        assert gaps["unpaired_surrogates"].startswith("1 unpaired UTF-16 surrogate(s)")
    assert rep.fidelity_gaps["unpaired_surrogates"] == 2


def test_a_huge_integer_inside_a_json_encoded_string_field(tmp_path):
    # SWE-smith keeps the chat as a JSON string: the number is only met when that string is decoded
    chat = json.dumps(CHAT)[:-1] + f', {{"role": "user", "content": "x", "n": {HUGE}}}]'
    f = write_jsonl(tmp_path / "rows.jsonl", [smith_row(1, messages=chat), smith_row(2)])
    rep = ingest_paths([str(f)], str(tmp_path / "s"))
    assert rep.trajectories_written == 1
    assert by_line(rep)[("rows.jsonl", 1)].reason == ("field messages[5].n is an integer of 5000 digits: too large "
                                                      "for any field (numbers are read up to 4300 digits)")


# -- a cut-off JSON document -------------------------------------------------------------------------


def test_a_truncated_single_document_file_says_where_the_document_breaks_off(tmp_path, fix):
    # A .traj cut after 3000 bytes was refused as "no line is valid JSON ... at column 2: '{'": it was
    # read as JSON Lines, whose first line is a lone brace. It is one document: the whole-document
    # parser's position (checked with json.loads by hand: line 14 column 19) and "truncated".
    head = (fix / "swe-agent/v0.x_gpt4_pydicom__pydicom-1458.traj").read_bytes()[:3000]
    for name in ("cut.traj", "cut.json"):
        (tmp_path / "in").mkdir(exist_ok=True)
        (tmp_path / "in" / name).write_bytes(head)
    rep = ingest_paths([str(tmp_path / "in")], str(tmp_path / "s"))
    assert rep.trajectories_written == 0
    assert sorted((Path(p.origin.path).name, p.kind, p.reason) for p in rep.problems) == [
        (n, "malformed", "not valid JSON: Unterminated string starting at line 14 column 19 "
                         "(the document ends early: the file looks truncated)") for n in ("cut.json", "cut.traj")]


def test_a_jsonl_line_error_reads_without_a_doubled_word(tmp_path):
    f = tmp_path / "rows.jsonl"
    f.write_text('{"a": 1}\n{"b": "xx\n')  # json says "Unterminated string starting at"; we add "at column"
    rep = ingest_paths([str(f)], str(tmp_path / "s"))
    reasons = {p.origin.line: p.reason for p in rep.problems}
    assert reasons[2] == "not valid JSON (Unterminated string starting at column 7): '{\"b\": \"xx'"

"""trajstore/cli/ingest.py: `traj ingest` through typer's CliRunner and as a subprocess: the
summary (refused apart from skipped), exit statuses, one line per problem, Ctrl-C."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.helpers.cli import WIDTH_120, nonblank_lines
from tests.helpers.ingest import nemo_row, run_with_deadline, smith_row, write_jsonl
from tests.helpers.paths import SHARED_FIXTURES
from trajstore.cli.errors import EXIT_INTERRUPTED, EXIT_REFUSED
from trajstore.cli.main import app
from trajstore.ingest import ingest_paths

runner = CliRunner()


FIXTURES = SHARED_FIXTURES


@pytest.fixture
def mixed_logs(tmp_path: Path) -> Path:
    """One malformed file (refused) and one OpenHands metadata-only file (skipped, no trajectory)."""
    src = FIXTURES / "trajectories" / "openhands" / "v0_session_event_store_2025-07"
    meta = next(src.rglob("metadata.json"), None) if src.is_dir() else None
    if meta is None:
        pytest.skip(f"fixtures not found under {FIXTURES} (a plain clone has no ../shared)")
    d = tmp_path / "logs"
    d.mkdir()
    shutil.copy(meta, d / "metadata.json")
    (d / "broken.jsonl").write_text('{"instance_id": \n')
    return d


# new-user walkthrough: a finding (a slip in what a command prints)
def test_ingest_summary_keeps_refused_apart_from_skipped(tmp_path: Path, mixed_logs: Path) -> None:
    res = runner.invoke(app, ["ingest", str(tmp_path / "s"), str(mixed_logs)], env=WIDTH_120)
    assert res.exit_code == EXIT_REFUSED, res.output
    assert "problems" not in res.stdout  # the word that lumped skips in with refusals
    rows = [ln.strip("│ ").split("│") for ln in res.stdout.splitlines() if "│" in ln]
    labels = {r[0].strip(): int(r[-1].strip()) for r in rows if r[-1].strip().isdigit()}
    assert labels["records refused"] == 1 and labels["refused: malformed"] == 1
    assert labels["skipped: no_trajectory (input holding none)"] == 1
    tags = sorted(ln.split()[0] for ln in nonblank_lines(res.stderr) if not ln.startswith("note: "))
    assert tags == ["refused", "skipped"]  # stderr lists each under the same word as the summary
    # walkthrough: the summary's kinds of lines came with no word on what they mean or whether they matter
    notes = [ln for ln in nonblank_lines(res.stderr) if ln.startswith("note: ")]
    assert notes[0].startswith("note: skipped: no_trajectory: a file holding no trajectory")
    assert notes[-1] == "note: every line of this summary is explained in docs/ingest.md#the-ingest-summary"


# new-user walkthrough: a finding (a slip in what a command prints)
def test_ingest_json_summary_counts_refused_and_skipped_inputs(tmp_path: Path, mixed_logs: Path) -> None:
    res = runner.invoke(app, ["ingest", str(tmp_path / "s"), str(mixed_logs), "--format", "json"],
                        env=WIDTH_120)
    doc = json.loads(res.stdout)
    assert doc["refused"] == 1 and doc["refused_by_kind"] == {"malformed": 1} and doc["skipped_inputs"] == 1


# new-user walkthrough: a finding (a slip in what a command prints)
def test_strict_ingest_lists_one_problem_per_line(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("a", "b", "c"):
        (logs / f"{name}.jsonl").write_text('{"x": \n')
    res = runner.invoke(app, ["ingest", str(tmp_path / "s"), str(logs), "--strict"], env=WIDTH_120)
    assert res.exit_code == 1, res.output
    lines = nonblank_lines(res.stderr)
    assert lines[0] == "error: strict ingest: 3 problem(s) in the input, nothing written:"
    assert [ln.split()[:2] for ln in lines[1:]] == [["refused", str(logs / f"{n}.jsonl:")] for n in "abc"]
    assert not (tmp_path / "s").exists()  # nothing written


# new-user walkthrough: a finding (a slip in what a command prints)
@pytest.mark.parametrize("strict", [False, True])
def test_ctrl_c_during_ingest_says_what_was_stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   strict: bool) -> None:
    import trajstore as ts
    from trajstore.cli import ingest as ingest_cli

    logs = tmp_path / "logs"
    logs.mkdir()
    for i in range(5):
        (logs / f"c{i}.json").write_text(f'[{{"role": "user", "content": "hi {i}"}}, '
                                         f'{{"role": "assistant", "content": "yo {i}"}}]')

    def interrupt_after_two(self, p) -> None:  # the user presses Ctrl-C once two are built
        if p.records >= 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(ingest_cli._LazyProgress, "__call__", interrupt_after_two)
    store = tmp_path / "s"
    res = runner.invoke(app, ["ingest", str(store), str(logs), *(["--strict"] if strict else [])],
                        env=WIDTH_120)
    assert res.exit_code == EXIT_INTERRUPTED == 130, res.output
    [line] = nonblank_lines(res.stderr)
    stored = 0 if strict else 2  # non-strict flushes what it built; strict writes nothing until the end
    assert line.startswith("interrupted: " + ("nothing was stored" if strict else
                                               "this ingest stored 2 trajectories before it, each whole")), line
    assert "run the same ingest again" in line
    n = ts.read_trajectories(str(store), columns=["trajectory_id"]).num_rows if store.exists() else 0
    assert n == stored


# new-user walkthrough: a finding (a slip in what a command prints)
@pytest.mark.parametrize("where, says", [
    ("{file}/store", "cannot list {file}/store/trajectories: Not a directory"),
    ("/proc/nope", "cannot write the store /proc/nope: No such file or directory: /proc does not let a folder"),
    ("/sys/nope", "cannot write the store /sys/nope: "),  # EPERM / EROFS: was a traceback
])
def test_an_unwritable_store_is_one_line_naming_the_path_and_reason(tmp_path: Path, where: str, says: str) -> None:
    if where.startswith(("/proc", "/sys")) and not Path(where).parent.is_dir():
        pytest.skip(f"no {Path(where).parent} here")
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "c.json").write_text('[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]')
    store = where.replace("{file}", str(blocker))
    res = runner.invoke(app, ["ingest", store, str(logs)], env=WIDTH_120)
    assert res.exit_code == 1, res.output
    [line] = nonblank_lines(res.stderr)
    assert line.startswith("error: " + says.replace("{file}", str(blocker))), line
    assert "Errno" not in line and "Traceback" not in res.output


# hostile tester: bad input answered by one clear line naming the file, row, field or flag
def test_ingest_format_is_case_insensitive_like_every_other_commands(tmp_path):
    # `traj stats --format JSON` worked, `traj ingest --format JSON` was refused as no output format.
    p = tmp_path / "c.jsonl"
    p.write_text(json.dumps([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]) + "\n")
    res = CliRunner().invoke(app, ["ingest", str(tmp_path / "s"), str(p), "--format", "JSON"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["trajectories_written"] == 1


def test_cli_json_summary_and_strict_exit(tmp_path, fix, mixed):
    r = CliRunner().invoke(app, ["ingest", str(tmp_path / "s"), str(fix / "swe-agent"),
                                 "--format", "json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["trajectories_written"] == 7 and out["by_format"] == {"swe-agent": 7}  # 0.x: 1, 1.x: 6 parts
    assert out["fidelity_gaps"]["tools"] == 6  # 1.x function calling: tool definitions not in the .traj
    r = CliRunner().invoke(app, ["ingest", str(tmp_path / "s2"), str(mixed), "--strict"])
    assert r.exit_code == 1 and "nothing written" in r.stderr


def test_cli_missing_input_path_is_an_error_and_writes_nothing(tmp_path, fix):
    r = CliRunner().invoke(app, ["ingest", str(tmp_path / "s"), str(fix / "swe-agent"),
                                 str(tmp_path / "typo")])
    assert r.exit_code == 2 and "no such input path" in r.stderr and str(tmp_path / "typo") in r.stderr
    assert not (tmp_path / "s").exists()


def test_cli_subprocess(tmp_path, fix):
    r = subprocess.run([str(Path(sys.executable).with_name("traj")), "ingest", str(tmp_path / "s"),
                        str(fix / "openhands/v0_saved_trajectory/basic.json"), "--format", "json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["trajectories_written"] == 1


def test_negative_observation_cap_is_refused(tmp_path):
    # A negative cap used to keep the text and add a marker with a negative "dropped" count.
    p = tmp_path / "x.json"
    p.write_text('[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]')
    with pytest.raises(ValueError, match="max_observation_chars must be >= 0"):
        ingest_paths([str(p)], str(tmp_path / "s"), max_observation_chars=-5)
    r = CliRunner().invoke(app, ["ingest", str(tmp_path / "s"), str(p), "--max-observation-chars", "-5"])
    assert r.exit_code == 2 and "error: invalid option --max-observation-chars: must be >= 0" in r.output
    assert not (tmp_path / "s").exists()


def test_cli_exit_status(tmp_path, fix):
    # 0: everything stored or deliberately skipped; 3: a record refused (the others still stored);
    # 1: an error, nothing stored (a store that cannot be written); 2: usage errors. A refusal and an
    # error used to share 1, so a script could not tell "the others are stored" from "nothing is".
    good = str(fix / "swe-agent")
    r = CliRunner().invoke(app, ["ingest", str(tmp_path / "s"), good, "--format", "json"])
    assert r.exit_code == 0, r.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(nemo_row("a", [5])) + "\n" + json.dumps({"response": 3}) + "\n")
    r = CliRunner().invoke(app, ["ingest", str(tmp_path / "s"), str(bad), "--format", "json"])
    out = json.loads(r.stdout)
    assert r.exit_code == 1 and out["trajectories_written"] == 1 and out["refused"] == 1
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    r = CliRunner().invoke(app, ["ingest", str(a_file), good])
    assert r.exit_code == 1 and "is a file, not a directory" in r.output, r.output
    r = CliRunner().invoke(app, ["ingest", str(tmp_path / "s"), good, "--format", "csv"])
    assert r.exit_code == 0 and r.stdout.splitlines()[:2] == ["metric,value", "files seen,2"]
    for args, fragment in [(["--input-format", "nope"], "nope"),
                           (["--format", "swe-agent"], "is an input format: use --input-format swe-agent"),
                           (["--format", "yaml"], "not an output format")]:
        r = CliRunner().invoke(app, ["ingest", str(tmp_path / "s"), good, *args])
        assert r.exit_code == 2 and fragment in r.output, (args, r.output)


def test_cli_progress_bar_on_a_terminal(tmp_path, fix, monkeypatch):
    # On a terminal (forced here) the bar shows files, records and tokens; not when piped.
    import trajstore.cli.ingest as cli_ingest

    monkeypatch.setattr(cli_ingest, "PROGRESS_DELAY_S", 0.0)
    tty = {"TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1", "FORCE_COLOR": "1", "COLUMNS": "160"}
    r = CliRunner().invoke(app, ["ingest", str(tmp_path / "s"), str(fix / "swe-agent")], env=tty)
    assert r.exit_code == 0 and "ingesting" in r.stderr
    assert "files" in r.stderr and "records" in r.stderr and "tokens" in r.stderr
    r = CliRunner().invoke(app, ["ingest", str(tmp_path / "s2"), str(fix / "swe-agent")])
    assert r.exit_code == 0 and "ingesting" not in r.stderr


def test_cli_problem_lines_print_brackets_as_they_are(tmp_path):
    # A path or message holding rich markup ("[red]", "[bold]") is printed verbatim, never parsed
    # (the tags used to vanish from the line; a closing tag such as "[/x]" raised MarkupError).
    bad = tmp_path / "run[red]" / "bad[bold].jsonl"
    bad.parent.mkdir()
    bad.write_text(json.dumps({"response": 3}) + "\n")
    r = CliRunner().invoke(app, ["ingest", str(tmp_path / "s"), str(bad)])
    assert r.exit_code == 1, r.output  # refused
    assert "run[red]/bad[bold].jsonl" in r.stderr and "Traceback" not in r.output


# hostile tester: a fault found in `traj ingest` (failed before its fix)
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")
def test_cli_names_the_skipped_pipe_and_exits_0(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    write_jsonl(d / "a.jsonl", [smith_row(1)])
    os.mkfifo(d / "pipe.json")
    r = run_with_deadline(lambda: CliRunner().invoke(app, ["ingest", str(tmp_path / "s"), str(d)]))
    assert r.exit_code == 0, r.output
    assert f"skipped {d / 'pipe.json'}: no_trajectory: a named pipe (FIFO), not a regular file: skipped, never " \
           "opened" in " ".join(r.output.split())


# reconstructed actions are trained only when the user opts in
def test_train_reconstructed_actions_option(reported, tmp_path):
    from trajstore.reader import read_trajectories

    src = str(reported / "atif-timeout-status")
    for flag, trainable in (([], False), (["--train-reconstructed-actions"], True)):
        store = str(tmp_path / f"s{len(flag)}")
        res = runner.invoke(app, ["ingest", store, src, *flag])
        assert res.exit_code == 0, res.output
        (row,) = read_trajectories(store, columns=["trainable", "not_trainable_reason"]).to_pylist()
        assert row["trainable"] is trainable
        assert (row["not_trainable_reason"] or "").startswith("" if trainable else "actions reconstructed")

"""trajstore/cli/audit.py: `traj stats` and `traj sql` through typer's CliRunner and as a real
subprocess: results streamed in batches, --plot checked before any report, --where errors in the
user's terms, values printed as they are."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pytest
from typer.testing import CliRunner

import trajstore as ts
from tests.helpers.cli import WIDTH_80, WIDTH_120, nonblank_lines
from trajstore.cli.errors import EXIT_USAGE
from trajstore.cli.main import app

runner = CliRunner()


def test_stats_json_staleness_numbers(known_store):
    res = runner.invoke(app, ["stats", known_store.uri, "--staleness", "--format", "json", "--run", "r1"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert set(doc) == {"staleness.by_run", "staleness.by_source", "staleness.histogram", "staleness.unconsumed"}
    (r1,) = doc["staleness.by_run"]
    # Hand-computed in tests/audit/test_staleness.py: r1 token p50/p90 = 3/5 over 12 action tokens.
    assert (r1["run_id"], r1["versioned_action_tokens"], r1["token_p50"], r1["token_p90"]) == ("r1", 12, 3, 5)


def test_stats_all_has_every_report_and_table_output(known_store):
    res = runner.invoke(app, ["stats", known_store.uri, "--all", "--format", "json"])
    assert res.exit_code == 0, res.output
    names = {k.split(".")[0] for k in json.loads(res.stdout)}
    assert names == {"overview", "staleness", "clip", "coverage", "rewards", "lengths", "statuses", "duplicates"}
    res = runner.invoke(app, ["stats", known_store.uri, "--statuses", "--where", "source = 'sdk'"])
    assert res.exit_code == 0 and "truncated" in res.stdout and "openhands" not in res.stdout


def test_stats_lineage_report(tmp_path):
    # episode trees: episodes, lineages per episode and prefix sharing (hand counts: tests/audit/test_lineage.py)
    from tests.helpers.stores import build_lineage_store

    store = str(tmp_path / "store")
    build_lineage_store(store)
    res = runner.invoke(app, ["stats", store, "--lineage", "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert set(doc) == {"lineage.totals", "lineage.by_link_kind", "lineage.lineages_per_episode"}
    (tot,) = doc["lineage.totals"]
    assert (tot["episodes"], tot["trajectories"], tot["lineages"], tot["shared_prefix_tokens"]) == (3, 7, 5, 15)
    res = runner.invoke(app, ["stats", store, "--lineage"], terminal_width=120)
    assert res.exit_code == 0 and "lineages_per_episode" in res.stdout and "context_rewrite" in res.stdout
    res = runner.invoke(app, ["sql", store, "SELECT episode_id, lineages FROM episodes ORDER BY episode_id",
                              "--format", "json"])
    assert res.exit_code == 0, res.output
    assert [(r["episode_id"], r["lineages"]) for r in json.loads(res.stdout)["result"]] == [("E1", 2), ("E3", 2), ("p", 1)]


def test_stats_csv_and_plot(known_store, tmp_path):
    png = tmp_path / "audit.png"
    res = runner.invoke(app, ["stats", known_store.uri, "--clip", "--rewards", "--format", "csv", "--plot", str(png)])
    assert res.exit_code == 0, res.output
    sections = res.stdout.split("\n\n")
    assert sections[0].startswith("# clip.by_step\n")
    table = list(csv.DictReader(io.StringIO(sections[0].split("\n", 1)[1])))
    assert [(r["run_id"], r["step"], r["trajectories"]) for r in table] == [("r1", "0", "2"), ("r1", "1", "1"),
                                                                         ("r2", "0", "1")]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_errors_are_one_line(known_store):
    res = runner.invoke(app, ["stats", known_store.uri, "--run", "nope"])
    assert res.exit_code == 1 and "run 'nope' not found" in res.output and "r1, r2" in res.output
    res = runner.invoke(app, ["stats", known_store.uri, "--where", "bogus_col = 1"])
    assert res.exit_code == 1 and "invalid --where predicate" in res.output
    res = runner.invoke(app, ["stats", known_store.uri, "--coverage", "--plot", "x.png"])
    # bad usage, refused before any report is printed
    assert res.exit_code == 2 and "invalid option --plot: nothing to plot" in res.output and not res.stdout
    res = runner.invoke(app, ["sql", known_store.uri, "DROP VIEW spans"])
    assert res.exit_code == 1 and "read-only" in res.output
    res = runner.invoke(app, ["stats", known_store.uri, "--storage-option", "novalue"])
    assert res.exit_code == 2 and "invalid option --storage-option: expected key=value" in res.output  # bad usage


@pytest.mark.slow
def test_sql_as_subprocess(known_store):
    out = subprocess.run(
        [sys.executable, "-c", "from trajstore.cli.main import app; app()", "sql", known_store.uri,
         "SELECT trajectory_id, reward FROM trajectories WHERE reward IS NOT NULL ORDER BY trajectory_id",
         "--format", "json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["result"] == [
        {"trajectory_id": "A", "reward": 1.0}, {"trajectory_id": "B", "reward": 0.0},
        {"trajectory_id": "C", "reward": -1.0}, {"trajectory_id": "F", "reward": 0.5}]


def test_runtime_query_errors_are_one_line(known_store):
    # Errors DuckDB raises while fetching (not while binding) used to escape as tracebacks.
    res = runner.invoke(app, ["sql", known_store.uri, "SELECT 'a'::INT"])
    assert res.exit_code == 1 and "query failed" in res.output and "Traceback" not in res.output
    res = runner.invoke(app, ["sql", known_store.uri, "SELECT * FROM duckdb_extensions()"])
    assert res.exit_code == 1 and "query failed" in res.output


@pytest.mark.parametrize("where", ["1=1) UNION SELECT 1 FROM (SELECT 1", "1=1) UNION SELECT 1 --",
                                   "1=1) GROUP BY ALL HAVING (1=1", "1=1) ORDER BY (1", "1=1) LIMIT (1"])
def test_where_cannot_change_the_query_shape(known_store, where):
    res = runner.invoke(app, ["stats", known_store.uri, "--statuses", "--where", where])
    assert res.exit_code == 1 and "invalid --where predicate" in res.output, res.output


def test_where_with_trailing_comment_still_filters(known_store):
    res = runner.invoke(app, ["stats", known_store.uri, "--statuses", "--format", "json",
                              "--where", "reward IS NOT NULL -- only rewarded"])
    assert res.exit_code == 0, res.output
    assert sum(r["trajectories"] for r in json.loads(res.output)["statuses.by_source"]) == 4


@pytest.mark.parametrize("cmd", [["stats"], ["info"], ["sql", "{store}", "SELECT 1"]])
def test_missing_or_file_store_is_one_line(tmp_path, cmd):
    missing = str(tmp_path / "no-such-store")
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for store, msg in ((missing, "no store at"), (str(a_file), "is a file, not a directory")):
        args = [cmd[0], store, *cmd[2:]] if len(cmd) > 1 else [cmd[0], store]
        res = runner.invoke(app, args)
        assert res.exit_code == 1 and msg in res.output and store in res.output, res.output


# -- table layout at a fixed terminal width ---------------------------------------------------

def _headers(out: str) -> list[list[str]]:
    """Column names of every table drawn in `out` (the lines between ┏ and ┡)."""
    return [[c.strip() for c in line.strip("┃").split("┃")] for line in out.splitlines() if line.startswith("┃")]


def _add_run(store, run: str, steps: int) -> None:
    import pyarrow as pa

    from tests.helpers.stores import consumed_row
    from trajstore.schema import CONSUMED_SCHEMA

    rows = [consumed_row(run, s, 10 + s, tid, 4, 4, 6 + s, 0.1 * (s % 3), 0.05 * (s % 2), 1.0 + 0.01 * s)
            for s in range(steps) for tid in ("A", "C")]
    store.write_table(pa.Table.from_pylist(rows, schema=CONSUMED_SCHEMA), subdir=f"runs/{run}/consumed")


def test_clip_keeps_step_in_every_part_and_the_run_in_the_title(known_store):
    _add_run(known_store, "r3", steps=12)
    res = runner.invoke(app, ["stats", known_store.uri, "--clip", "--run", "r3"], env={"COLUMNS": "60"})
    assert res.exit_code == 0, res.output
    by_step = res.stdout.split("clip.by_staleness")[0]
    titles = [line for line in by_step.splitlines() if line.startswith("clip.by_step")]
    assert len(titles) >= 2, by_step  # 8 columns do not fit 60 characters
    # run_id is constant under --run: in the title, never a column; 2 trajectories every step too
    assert "run_id=r3" in titles[0] and "trajectories=2" in titles[0], titles  # said once, with the first part
    assert not any("run_id" in t for t in titles[1:]), titles
    heads = _headers(by_step)
    assert len(heads) == len(titles) and all(h[0] == "step" for h in heads), heads
    assert not any("run_id" in h for h in heads)
    assert max(len(line) for line in res.stdout.splitlines()) <= 60


def test_stats_without_training_runs_hides_the_empty_reports(tmp_store):
    from tests.helpers.stores import KNOWN, layout_trajectory

    ts.write_trajectories(tmp_store, [layout_trajectory(t, *KNOWN[t]) for t in "ACE"])
    res = runner.invoke(app, ["stats", tmp_store, "--all"], env={"COLUMNS": "100"})
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "(no rows)" not in out
    assert "clip: no rows (no training run consumed the selected trajectories)" in out
    assert "staleness.by_run, staleness.by_source, staleness.histogram: no rows" in out
    assert "duplicates.ids: no rows (no trajectory id is stored twice)" in out
    assert "clip.by_step" not in out
    # 3 trajectories: overview, unconsumed, coverage, rewards, lengths, statuses, duplicates (~150 lines
    # with the notes), not one empty box per table
    assert len(out.splitlines()) < 200, len(out.splitlines())


def test_sql_step_metrics_is_readable(known_store):
    res = runner.invoke(app, ["sql", known_store.uri, "SELECT * FROM step_metrics WHERE run_id = 'r1' ORDER BY step"],
                        env={"COLUMNS": "60"})
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    # 2 steps x (trainer_version, wall_time, policy/loss, ratio/masked_below): too wide for 60
    # columns, so transposed; run_id (constant) and wall_time (one value, T0) go to the title
    assert lines[0].startswith("result (run_id=r1, wall_time=2026-07-01 00:00:00+00:00)"), lines[0]
    assert _headers(res.stdout) == [["step", "0", "1"]] or _headers(res.stdout)[0][0] == "step"
    assert any(line.startswith("│ policy/loss") and "0.500" in line and "0.400" in line for line in lines), lines


def test_coverage_reasons_wrap_instead_of_being_cut_alike(tmp_store, make_trajectory):
    # Two reasons that share their first 63 characters used to be cut to the same text at 80 columns.

    common = "engine token ids discarded: the log names no tokenizer for them"
    reasons = [common + " (pass --engine-tokenizer NAME to keep them)", common + " and its model is unknown"]
    rng = np.random.default_rng(0)
    ts.write_trajectories(tmp_store, [make_trajectory(rng, trajectory_id=f"u{i}").model_copy(
        update={"trainable": False, "not_trainable_reason": r}) for i, r in enumerate(reasons)])
    res = runner.invoke(app, ["stats", tmp_store, "--coverage"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    table = res.stdout.split("coverage.not_trained")[1].split("└")[0]
    text = " ".join(" ".join(c.strip() for c in line.strip("│").split("│")[:1]) for line in table.splitlines()
                    if line.startswith("│"))
    assert reasons[0] in text and reasons[1] in text and "…" not in table, table
    assert max(len(line) for line in res.stdout.splitlines()) <= 80


def test_histogram_and_clip_by_staleness_say_what_their_token_counts_are(known_store):
    # new-user walkthrough: staleness 1 had 542 action tokens in staleness.histogram and 288 in
    # clip.by_staleness, with nothing on screen saying that one buckets tokens and the other
    # trajectories (by their oldest token)
    from trajstore.audit.clip import CLIP_BY_STALENESS_NOTE
    from trajstore.audit.staleness import STALENESS_HISTOGRAM_NOTE

    res = runner.invoke(app, ["stats", known_store.uri, "--staleness", "--clip", "--run", "r1"],
                        env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    for table, note in (("staleness.histogram", f"{STALENESS_HISTOGRAM_NOTE}, the bucket clip.by_staleness uses"),
                        ("clip.by_staleness", CLIP_BY_STALENESS_NOTE)):
        start = next(i for i, line in enumerate(lines) if line.startswith(table))
        end = next(i for i, line in enumerate(lines) if i > start and line.startswith("└"))
        assert lines[end + 1] == f"({note})", lines[start:end + 2]
    doc = runner.invoke(app, ["stats", known_store.uri, "--staleness", "--run", "r1", "--format", "json"]).stdout
    assert "oldest token" not in doc  # notes are for people; json / csv stay data


@pytest.mark.parametrize("column, where", [("tokens", "read_trajectories"), ("action_logprobs", "span_logprobs"),
                                           ("spans", "the view spans")])
def test_a_list_column_asked_of_the_trajectories_view_says_where_it_is(known_store, column, where):
    # `traj schema` lists tokens / logprobs / spans, but `SELECT tokens FROM trajectories` only said
    # "Binder Error: Referenced column "tokens" not found" (new-user walkthrough)
    res = runner.invoke(app, ["sql", known_store.uri, f"SELECT {column} FROM trajectories"])
    assert res.exit_code == 1
    assert res.output.startswith("error: query failed: ") and where in res.output and res.output.count("\n") == 1


def _no_fetchall(monkeypatch):
    """Make any whole-result fetch fail: streaming must go batch by batch."""
    def refuse(*a, **k):
        raise AssertionError("the whole result was fetched at once")
    for name in ("fetchall", "fetchdf", "fetchnumpy", "fetch_arrow_table", "arrow", "to_arrow_table"):
        monkeypatch.setattr(duckdb.DuckDBPyRelation, name, refuse, raising=False)


def _streamed_sql(monkeypatch, store, setting: str, value: int):
    """`traj sql` on `store` with ``trajstore.cli.audit.<setting>`` = `value` and whole-result fetches
    refused: a function of (query, *flags) -> the CLI result."""
    monkeypatch.setattr(f"trajstore.cli.audit.{setting}", value)
    _no_fetchall(monkeypatch)
    return lambda query, *flags: runner.invoke(app, ["sql", store.uri, query, *flags])


# adversarial input: a hole found attacking `traj sql`, `traj info` and `traj stats` (failed before its fix)
def test_sql_csv_streams_batches_and_limit(known_store, monkeypatch):
    sql = _streamed_sql(monkeypatch, known_store, "SQL_BATCH_ROWS", 1000)
    res = sql("SELECT range AS i, range * 2 AS j FROM range(25000)", "--format", "csv")
    assert res.exit_code == 0, res.output
    rows = list(csv.reader(io.StringIO(res.stdout)))
    assert rows[0] == ["i", "j"] and len(rows) == 25001
    assert rows[1] == ["0", "0"] and rows[-1] == ["24999", "49998"]
    res = sql("SELECT range AS i FROM range(25000)", "--format", "csv", "--limit", "7")
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines() == ["i", "0", "1", "2", "3", "4", "5", "6"]


# adversarial input: a hole found attacking `traj sql`, `traj info` and `traj stats` (failed before its fix)
def test_sql_json_streams_and_stays_valid(known_store, monkeypatch):
    sql = _streamed_sql(monkeypatch, known_store, "SQL_BATCH_ROWS", 100)
    res = sql("SELECT range AS i, 'x' || range AS s FROM range(2500)", "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert list(doc) == ["result"] and len(doc["result"]) == 2500
    assert doc["result"][2499] == {"i": 2499, "s": "x2499"}
    res = sql("SELECT trajectory_id FROM trajectories ORDER BY 1", "--format", "json", "--limit", "2")
    assert json.loads(res.stdout) == {"result": [{"trajectory_id": "A"}, {"trajectory_id": "B"}]}
    res = sql("SELECT 1 AS a WHERE false", "--format", "json")
    assert json.loads(res.stdout) == {"result": []}


# adversarial input: a hole found attacking `traj sql`, `traj info` and `traj stats` (failed before its fix)
def test_sql_table_shows_at_most_the_table_cap(known_store, monkeypatch):
    sql = _streamed_sql(monkeypatch, known_store, "SQL_TABLE_MAX_ROWS", 50)
    res = sql("SELECT range AS i FROM range(100000)")
    assert res.exit_code == 0, res.output
    assert "showing the first 50 rows" in res.output
    res = sql("SELECT range AS i FROM range(10)")
    assert "showing" not in res.output


# adversarial input: a hole found attacking `traj sql`, `traj info` and `traj stats` (failed before its fix)
def test_sql_limit_must_be_positive(known_store):
    res = runner.invoke(app, ["sql", known_store.uri, "SELECT 1", "--limit", "0"])
    assert res.exit_code != 0


# adversarial input: a hole found attacking `traj sql`, `traj info` and `traj stats` (failed before its fix)
@pytest.mark.slow
def test_sql_csv_memory_is_bounded_by_the_batch(known_store, tmp_path):
    # 3M rows held as Python tuples took 1.5 GB; streamed, the process stays near its baseline.
    # The peak is the child's VmHWM: ru_maxrss survives exec, so it would report the pytest
    # parent's own peak (748 MiB in a full-suite run) instead of the child's.
    if not os.path.exists("/proc/self/status"):
        pytest.skip("needs /proc/self/status (Linux) for the child's own peak RSS")
    code = (
        "import sys\n"
        "from trajstore.cli.main import app\n"
        "sys.argv = ['traj', 'sql', sys.argv[1], 'SELECT range AS i, range * 0.5 AS x FROM range(3000000)', "
        "'--format', 'csv']\n"
        "try:\n    app()\nexcept SystemExit:\n    pass\n"
        "hwm = [ln for ln in open('/proc/self/status') if ln.startswith('VmHWM:')][0]\n"
        "sys.stderr.write(hwm.split()[1])\n"
    )
    with open(os.devnull, "w") as devnull:
        out = subprocess.run([sys.executable, "-c", code, known_store.uri], stdout=devnull, stderr=subprocess.PIPE,
                             text=True, timeout=300)
    peak_mib = int(out.stderr.strip().splitlines()[-1]) / 1024
    assert peak_mib < 500, f"peak RSS {peak_mib:.0f} MiB"


# adversarial input: a hole found attacking `traj sql`, `traj info` and `traj stats` (failed before its fix)
def test_plot_reports_the_file_it_wrote(known_store, tmp_path):
    target = tmp_path / "plots"  # no suffix: matplotlib writes plots.png
    res = runner.invoke(app, ["stats", known_store.uri, "--clip", "--plot", str(target)])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "plots.png").read_bytes()[:4] == b"\x89PNG"
    assert f"wrote {target}.png" in res.output
    assert f"wrote {target} " not in res.output
    d = tmp_path / "outdir"
    d.mkdir()
    res = runner.invoke(app, ["stats", known_store.uri, "--clip", "--plot", str(d)])
    assert res.exit_code == 0, res.output
    (png,) = list(d.iterdir())
    assert png.suffix == ".png" and f"wrote {png}" in res.output


# adversarial input: a hole found attacking `traj sql`, `traj info` and `traj stats` (failed before its fix)
def test_plot_into_a_place_that_cannot_hold_it_is_one_line_before_any_report(known_store, tmp_path):
    # A file as folder, a missing folder: NotADirectoryError / FileNotFoundError tracebacks came
    # after every report had been computed and printed.
    afile = tmp_path / "afile"
    afile.write_text("x")
    for target, why in [(afile / "p.png", "is not a folder"), (tmp_path / "nodir" / "sub" / "p.png", "does not exist")]:
        res = runner.invoke(app, ["stats", known_store.uri, "--clip", "--plot", str(target)])
        assert res.exit_code == 1, res.output
        assert res.output.strip().splitlines() == [f"error: cannot write the plot {target}: {target.parent} {why}"]


# adversarial input: a hole found attacking `traj sql`, `traj info` and `traj stats` (failed before its fix)
def test_sql_table_prints_values_that_look_like_markup_as_they_are(known_store):
    # Cells and column names are data: "[/x]" raised rich's MarkupError and "[bold]" vanished.
    res = runner.invoke(app, ["sql", known_store.uri, "SELECT '[/x]' AS \"[b]c\", '[bold]y[/bold]' AS v"])
    assert res.exit_code == 0, res.output
    assert "[/x]" in res.stdout and "[b]c" in res.stdout and "[bold]y[/bold]" in res.stdout


# new-user walkthrough: a finding (a slip in what a command prints)
@pytest.mark.parametrize("where, near", [("reward >", '">"'), ("(reward > 1", '"1"'), ("rewardx > 1", '"rewardx"')])
def test_where_syntax_error_quotes_the_users_text_not_our_wrapping(three_trajectories: str, where: str,
                                                                  near: str) -> None:
    res = runner.invoke(app, ["stats", three_trajectories, "--statuses", "--where", where], env=WIDTH_120)
    assert res.exit_code == 1, res.output
    [line] = nonblank_lines(res.stderr)
    assert line.startswith(f"error: invalid --where predicate {where!r}") and near in line, line
    assert '")"' not in line and "LINE" not in line and "WHERE (" not in line, line


# new-user walkthrough: a finding (a slip in what a command prints)
@pytest.mark.parametrize("args, says", [
    (["--plot", "{tmp}/p.txt"], "invalid option --plot: cannot draw a plot as '.txt'"),
    (["--statuses", "--plot", "{tmp}/p.png"], "invalid option --plot: nothing to plot"),
])
def test_plot_option_is_checked_before_any_report(three_trajectories: str, tmp_path: Path, args: list[str],
                                                  says: str) -> None:
    pytest.importorskip("matplotlib")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    res = runner.invoke(app, ["stats", three_trajectories, *args], env=WIDTH_120)
    assert res.exit_code == EXIT_USAGE, res.output
    assert res.stdout == ""  # no report printed before the refusal
    [line] = nonblank_lines(res.stderr)
    assert line.startswith(f"error: {says}"), line
    if ".txt" in says:
        assert ".png" in line and ".svg" in line and ".pdf" in line  # names what is supported
    assert not (tmp_path / "p.txt").exists() and not (tmp_path / "p.png").exists()


# new-user walkthrough: a finding (a slip in what a command prints)
@pytest.mark.parametrize("target, says", [
    ("", "error: cannot write the plot: the file name is empty"),  # read as "." it drew ./traj-stats.png
    ("/proc/p.png", "error: cannot write the plot /proc/p.png: "),  # os.access said yes (root); failed after the report
])
def test_plot_destination_that_cannot_be_written_is_refused_before_any_report(three_trajectories: str, target: str,
                                                                              says: str) -> None:
    pytest.importorskip("matplotlib")
    res = runner.invoke(app, ["stats", three_trajectories, "--rewards", "--plot", target], env=WIDTH_120)
    assert res.exit_code == 1, res.output
    assert res.stdout == ""  # no report printed before the refusal
    [line] = nonblank_lines(res.stderr)
    assert line.startswith(says), line


# hostile tester: bad input answered by one clear line naming the file, row, field or flag
def test_where_of_the_wrong_type_names_where(small_store: str) -> None:
    # reward is DOUBLE: 'x' cannot be cast; LIMIT 0 never casts, so this used to fail later as
    # "report query failed: Conversion Error ..." without naming --where
    res = runner.invoke(app, ["stats", small_store, "--statuses", "--where", "reward = 'x'"])
    assert res.exit_code == 1 and res.stderr.count("\n") == 1, res.output
    assert "invalid --where predicate \"reward = 'x'\"" in res.stderr and "DOUBLE" in res.stderr
    # a cast that fails only on some row's value is found while reading: it names --where too
    res = runner.invoke(app, ["stats", small_store, "--statuses", "--where", "CAST(source AS INT) = 1"])
    assert res.exit_code == 1 and res.stderr.count("\n") == 1, res.output
    assert "with --where 'CAST(source AS INT) = 1'" in res.stderr and "Conversion Error" in res.stderr
    res = runner.invoke(app, ["stats", small_store, "--statuses", "--where", "reward IS NULL OR reward > -1e9",
                              "--format", "json"])
    assert res.exit_code == 0 and sum(r["trajectories"] for r in json.loads(res.stdout)["statuses.by_source"]) == 3


# hostile tester: bad input answered by one clear line naming the file, row, field or flag
def test_sql_write_refusal_reads_well(small_store: str) -> None:
    res = runner.invoke(app, ["sql", small_store, "INSERT INTO t VALUES (1)"])
    assert res.exit_code == 1 and "read-only: refusing this INSERT statement" in res.stderr, res.output


# short overview: `traj stats` without a report flag printed 329 lines at 120 columns for the 64 fixture
# trajectories (every report); it is now a short overview that names the flags for the rest
def test_stats_without_a_flag_fits_one_screen_on_the_ingested_fixtures(ingested_fixtures: str):
    res = runner.invoke(app, ["stats", ingested_fixtures], env=WIDTH_120)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert len(lines) <= 40, res.output
    assert max(len(line) for line in lines) <= 120
    for flag in ("--coverage", "--rewards", "--lengths", "--statuses", "--staleness", "--clip", "--duplicates",
                 "--all"):
        assert flag in res.stdout, flag
    for table in ("overview.totals", "overview.by_source"):
        assert table in res.stdout
    assert "coverage.not_trained" not in res.stdout  # the reports come with their flags
    everything = runner.invoke(app, ["stats", ingested_fixtures, "--all"], env=WIDTH_120)
    assert everything.exit_code == 0 and "coverage.not_trained" in everything.stdout
    assert len(everything.output.splitlines()) > 100


def test_stats_without_a_flag_fits_an_80x24_terminal(known_store):
    # walkthrough: on a store with a few runs and lineages the overview printed 54 lines at 80
    # columns (totals one per line, the per-source table turned on its side, every run)
    import datetime as dt

    import pyarrow as pa

    from tests.helpers.stores import T0, consumed_row, split_episode
    from trajstore.schema import CONSUMED_SCHEMA
    from trajstore.store.layout import run_consumed_dir

    rng = np.random.default_rng(0)
    # the known store (4 statuses, 2 sources, runs r1 r2) + 5 more sources of split episodes (lineages:
    # a context rewrite and a sub-agent each) + 6 runs with long names, each training later
    sources = ["openhands/v1-completions", "swe-agent", "mini-swe-agent", "atif", "nemo-gym"]
    ts.write_trajectories(known_store, [t.model_copy(update={"source": src})
                                        for k, src in enumerate(sources) for t in split_episode(rng, k)])
    for k in range(6):
        run = f"sao-qwen3-8b-lr3e-6-clip0.2-seed{k}"
        row = dict(consumed_row(run, 0, 3, "ep0.0", 0, 0, 4, 0.1, 0.0, 1.0), consumed_at=T0 + dt.timedelta(hours=k))
        known_store.write_table(pa.Table.from_pylist([row], schema=CONSUMED_SCHEMA), subdir=run_consumed_dir(run))
    res = runner.invoke(app, ["stats", known_store.uri], env=WIDTH_80)
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert len(lines) <= 22 and max(len(line) for line in lines) <= 80, res.stdout
    for figure in ("trajectories 21", "episodes 11", "(4 other sources)", "(5 other runs)", "completed",
                   "reward_mean", "staleness_mean", "masked"):
        assert figure in res.stdout, figure
    assert "…" in res.stdout and "seed5 │" in res.stdout and "seed4 │" in res.stdout  # cut in the middle
    assert "traj stats --all" in res.stdout


def test_stats_without_a_flag_as_json_is_the_overview(known_store):
    res = runner.invoke(app, ["stats", known_store.uri, "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert set(doc) == {"overview.totals", "overview.by_source", "overview.runs"}
    assert {r["source"]: r["trajectories"] for r in doc["overview.by_source"]} == {"sdk": 4, "openhands": 2}
    assert "--all" not in res.output  # the hint is for people, in table output only


def test_view_url_adds_links_to_the_trajectory_pages(known_store):
    res = runner.invoke(app, ["sql", known_store.uri, "SELECT trajectory_id, reward FROM trajectories "
                              "WHERE trajectory_id IN ('A', 'C') ORDER BY 1", "--format", "json",
                              "--view-url", "http://127.0.0.1:8200/"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)["result"]
    assert [(r["trajectory_id"], r["trajectory_id_url"]) for r in rows] == [
        ("A", "http://127.0.0.1:8200/t/A"), ("C", "http://127.0.0.1:8200/t/C")]
    res = runner.invoke(app, ["stats", known_store.uri, "--coverage", "--format", "json",
                              "--view-url", "http://h:1"])
    assert res.exit_code == 0, res.output
    examples = [r for rows in json.loads(res.stdout).values() for r in rows if "example_id" in r]
    assert examples and all(r["example_id_url"] == f"http://h:1/t/{r['example_id']}" for r in examples)


# walkthrough: a query failing while its rows are produced, written with --output, read as a bad
# --output option (exit 2, "invalid option --output: cannot write keep.csv: Invalid Input Error: boom")
@pytest.mark.parametrize("fmt", ["csv", "parquet", "json", "jsonl"])
@pytest.mark.parametrize("query", ["SELECT error('boom')",  # fails in the first batch
                                   # fails after the first batch of rows was produced
                                   "SELECT CASE WHEN i > 25000 THEN error('boom') ELSE i END AS x FROM range(30000) t(i)"])
def test_sql_query_failing_at_run_time_with_output_is_a_query_error(three_trajectories, tmp_path, fmt, query):
    keep = tmp_path / "keep.csv"
    keep.write_text("precious\n")
    res = runner.invoke(app, ["sql", three_trajectories, query,
                              "--format", fmt, "--output", str(keep)])
    assert res.exit_code == 1, res.output
    assert "query failed" in res.output and "boom" in res.output
    assert "--output" not in res.output
    assert keep.read_text() == "precious\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".keep")] == []


def test_sql_unwritable_output_is_still_a_bad_option(three_trajectories, tmp_path):
    res = runner.invoke(app, ["sql", three_trajectories, "SELECT trajectory_id FROM trajectories",
                              "--format", "csv", "--output", str(tmp_path / "no" / "such" / "dir.csv")])
    assert res.exit_code == EXIT_USAGE, res.output
    assert "--output" in res.output


def test_sql_table_query_failing_after_the_first_batch_is_a_query_error(three_trajectories):
    res = runner.invoke(app, ["sql", three_trajectories,
                              "SELECT CASE WHEN i > 25000 THEN error('boom') ELSE i END AS x FROM range(30000) t(i)"])
    assert res.exit_code == 1, res.output
    assert "query failed" in res.output and "boom" in res.output

"""Findings of a new-user walkthrough (issue 16's closing pass): each a cosmetic slip in what a
command prints, checked through ``CliRunner`` at a fixed width."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trajstore.cli.main import EXIT_REFUSED, EXIT_USAGE, app

from tests.helpers.paths import SHARED_FIXTURES

runner = CliRunner()
WIDTH = {"COLUMNS": "120"}
FIXTURES = SHARED_FIXTURES


def _lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


# -- traj ingest: refused vs skipped -------------------------------------------------------------


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


def test_ingest_summary_keeps_refused_apart_from_skipped(tmp_path: Path, mixed_logs: Path) -> None:
    res = runner.invoke(app, ["ingest", str(mixed_logs), "--store", str(tmp_path / "s")], env=WIDTH)
    assert res.exit_code == EXIT_REFUSED, res.output
    assert "problems" not in res.stdout  # the word that lumped skips in with refusals
    rows = [ln.strip("│ ").split("│") for ln in res.stdout.splitlines() if "│" in ln]
    labels = {r[0].strip(): int(r[-1].strip()) for r in rows if r[-1].strip().isdigit()}
    assert labels["records refused"] == 1 and labels["refused: malformed"] == 1
    assert labels["skipped: no_trajectory (input holding none)"] == 1
    tags = sorted(ln.split()[0] for ln in _lines(res.stderr))
    assert tags == ["refused", "skipped"]  # stderr lists each under the same word as the summary


def test_ingest_json_summary_counts_refused_and_skipped_inputs(tmp_path: Path, mixed_logs: Path) -> None:
    import json

    res = runner.invoke(app, ["ingest", str(mixed_logs), "--store", str(tmp_path / "s"), "--format", "json"],
                        env=WIDTH)
    doc = json.loads(res.stdout)
    assert doc["refused"] == 1 and doc["refused_by_kind"] == {"malformed": 1} and doc["skipped_inputs"] == 1


def test_strict_ingest_lists_one_problem_per_line(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("a", "b", "c"):
        (logs / f"{name}.jsonl").write_text('{"x": \n')
    res = runner.invoke(app, ["ingest", str(logs), "--store", str(tmp_path / "s"), "--strict"], env=WIDTH)
    assert res.exit_code == 1, res.output
    lines = _lines(res.stderr)
    assert lines[0] == "error: strict ingest: 3 problem(s) in the input, nothing written:"
    assert [ln.split()[:2] for ln in lines[1:]] == [["refused", str(logs / f"{n}.jsonl:")] for n in "abc"]
    assert not (tmp_path / "s").exists()  # nothing written


# -- traj stats --where: the user's text, DuckDB's reason ----------------------------------------


@pytest.fixture
def small_store(tmp_path: Path, make_trajectory) -> str:
    import numpy as np

    import trajstore as ts

    uri = str(tmp_path / "store")
    rng = np.random.default_rng(0)
    ts.write_trajectories(uri, [make_trajectory(rng, trajectory_id=f"t{i}") for i in range(3)])
    return uri


@pytest.mark.parametrize("where, near", [("reward >", '">"'), ("(reward > 1", '"1"'), ("rewardx > 1", '"rewardx"')])
def test_where_syntax_error_quotes_the_users_text_not_our_wrapping(small_store: str, where: str, near: str) -> None:
    res = runner.invoke(app, ["stats", small_store, "--statuses", "--where", where], env=WIDTH)
    assert res.exit_code == 1, res.output
    [line] = _lines(res.stderr)
    assert line.startswith(f"error: invalid --where predicate {where!r}") and near in line, line
    assert '")"' not in line and "LINE" not in line and "WHERE (" not in line, line


# -- click's own usage errors: one line, exit 2 ---------------------------------------------------


@pytest.mark.parametrize("args, line", [
    (["sql", "{store}", "SELECT 1", "--limit", "-1"], "error: invalid option --limit: "),
    (["sql", "{store}", "  "], "error: invalid argument QUERY: the query is empty"),  # was exit 1
    (["ingest", "{store}/nonexistent", "--store", "{store}/s"], "error: no such input path: {store}/nonexistent"),
    (["ingest", "{store}/nonexistent"], "error: missing option --store"),
    (["stats", "{store}", "--no-such-flag"], "error: no such option: --no-such-flag"),
    (["stats"], "error: missing argument STORE"),
    (["stats", "{store}", "--format", "xml"], "error: invalid option --format: 'xml' is not one of"),
    (["no-such-command"], "error: no such command 'no-such-command'"),
    (["bench", "learning", "--no-such-flag"], "error: no such option: --no-such-flag"),
], ids=lambda a: " ".join(a) if isinstance(a, list) else None)
def test_click_usage_errors_are_one_line_exit_2(tmp_path: Path, args: list[str], line: str) -> None:
    args = [a.replace("{store}", str(tmp_path)) for a in args]
    res = runner.invoke(app, args, env=WIDTH)
    assert res.exit_code == EXIT_USAGE, res.output
    assert _lines(res.stderr) == [ln for ln in _lines(res.stderr) if ln.startswith("error: ")]
    [got] = _lines(res.stderr)
    assert got.startswith(line.replace("{store}", str(tmp_path))), got
    assert "╭" not in res.output and "Usage:" not in res.output


# -- traj stats --plot: checked before any report runs ------------------------------------------


@pytest.mark.parametrize("args, says", [
    (["--plot", "{tmp}/p.txt"], "invalid option --plot: cannot draw a plot as '.txt'"),
    (["--statuses", "--plot", "{tmp}/p.png"], "invalid option --plot: nothing to plot"),
])
def test_plot_option_is_checked_before_any_report(small_store: str, tmp_path: Path, args: list[str],
                                                  says: str) -> None:
    pytest.importorskip("matplotlib")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    res = runner.invoke(app, ["stats", small_store, *args], env=WIDTH)
    assert res.exit_code == EXIT_USAGE, res.output
    assert res.stdout == ""  # no report printed before the refusal
    [line] = _lines(res.stderr)
    assert line.startswith(f"error: {says}"), line
    if ".txt" in says:
        assert ".png" in line and ".svg" in line and ".pdf" in line  # names what is supported
    assert not (tmp_path / "p.txt").exists() and not (tmp_path / "p.png").exists()


@pytest.mark.parametrize("target, says", [
    ("", "error: cannot write the plot: the file name is empty"),  # read as "." it drew ./traj-stats.png
    ("/proc/p.png", "error: cannot write the plot /proc/p.png: "),  # os.access said yes (root); failed after the report
])
def test_plot_destination_that_cannot_be_written_is_refused_before_any_report(small_store: str, target: str,
                                                                              says: str) -> None:
    pytest.importorskip("matplotlib")
    res = runner.invoke(app, ["stats", small_store, "--rewards", "--plot", target], env=WIDTH)
    assert res.exit_code == 1, res.output
    assert res.stdout == ""  # no report printed before the refusal
    [line] = _lines(res.stderr)
    assert line.startswith(says), line


# -- --storage-option on a local store ----------------------------------------------------------


@pytest.mark.parametrize("cmd", [["info", "{store}"], ["stats", "{store}", "--statuses"], ["runs", "{store}"],
                                 ["sql", "{store}", "SELECT 1 AS one"]])
def test_storage_option_on_a_local_store_warns_once(small_store: str, cmd: list[str]) -> None:
    args = [a.replace("{store}", small_store) for a in cmd]
    res = runner.invoke(app, [*args, "--storage-option", "anon=true", "--storage-option", "endpoint_url=http://x"],
                        env=WIDTH)
    assert res.exit_code == 0, res.output
    assert _lines(res.stderr) == [f"warning: --storage-option applies only to remote stores (s3://...); ignored for "
                                  f"the local store {small_store} (anon, endpoint_url)"]


def test_storage_option_is_kept_for_a_remote_store() -> None:
    from trajstore.cli.main import parse_storage_options

    assert parse_storage_options(["anon=true"], "s3://bucket/p") == {"anon": True}
    assert parse_storage_options(["anon=true"], "file:///tmp/x") == {}


# -- model loading: transformers' bars and FutureWarnings stay out of our output -----------------


def test_quiet_loading_silences_transformers_bars_and_future_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    import sys
    import warnings

    pytest.importorskip("transformers")
    from transformers.utils import logging as hf_logging

    from trajstore.hub import quiet_loading

    hf_logging.enable_progress_bar()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with quiet_loading():
            for _ in hf_logging.tqdm(range(3), desc="Loading weights", file=sys.stderr):
                pass
            gguf = sys.modules.get("transformers.modeling_gguf_pytorch_utils")
            if gguf is not None:  # the GGUF reader's own tqdm obeys the switch while loading
                assert gguf.tqdm is hf_logging.tqdm
            warnings.warn("`rope_scaling` is deprecated", FutureWarning)
        warnings.warn("ours", UserWarning)
    assert "Loading weights" not in capsys.readouterr().err
    assert [str(w.message) for w in seen] == ["ours"]
    assert hf_logging.is_progress_bar_enabled()  # restored after the load
    if gguf is not None:
        assert gguf.tqdm is not hf_logging.tqdm


# -- traj bench learning with one seed: no 'nan' interval ---------------------------------------


def test_one_seed_interval_reads_n_a_not_nan() -> None:
    pytest.importorskip("torch")
    from trajstore.trainer.apps.learning_bench.stats import CLAIMS, bootstrap_interval, verdict

    iv = bootstrap_interval([-0.1])
    assert not iv.has_interval and iv.describe() == "difference -0.100, CI n/a (1 seed)"
    v, why = verdict(CLAIMS[0], iv)
    assert v == "undetermined" and "nan" not in why and "CI n/a (1 seed)" in why
    assert "95% CI [" in bootstrap_interval([-0.1, 0.2, 0.0]).describe()


def test_bench_table_with_one_seed_has_no_nan(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from trajstore.trainer.apps.learning_bench import suite
    from trajstore.trainer.apps.learning_bench.presets import SuiteConfig
    from trajstore.trainer.apps.learning_bench.report import render_report
    from trajstore.trainer.apps.learning_bench.stats import CLAIMS, bootstrap_interval, verdict

    iv = bootstrap_interval([0.05])
    claims = [{"paper": c.paper, "arm": c.arm, "ref": c.ref, "task": c.task, "metric": c.metric,
               "interval": {"mean": iv.mean, "low": iv.low, "high": iv.high, "n": iv.n},
               "verdict": verdict(c, iv)[0], "reason": verdict(c, iv)[1]} for c in CLAIMS[:2]]
    fake = {"claims": claims, "seconds": 42.0, "out_dir": str(tmp_path), "runs": {}, "auc": {}, "figures": {}}
    monkeypatch.setattr(suite, "run_suite", lambda cfg, log=None: fake)
    res = runner.invoke(app, ["bench", "learning", "--preset", "smoke", "--scratch", str(tmp_path)], env=WIDTH)
    assert res.exit_code == 0, res.output
    assert "nan" not in res.stdout.lower()
    assert "paper claims (1 seed, CI n/a, 0.7 min" in res.stdout
    assert "ci_low" not in res.stdout
    cfg = SuiteConfig.preset_config("smoke", scratch=str(tmp_path))
    report = render_report(cfg, fake)
    assert "nan" not in report  # report.md: the reasons say 'CI n/a (1 seed)'
    assert "\n1 seed, 0.7 min." in report and "1 seeds" not in report


# -- traj train's progress line -----------------------------------------------------------------


def test_progress_line_shows_n_a_for_a_metric_without_a_value() -> None:
    pytest.importorskip("torch")
    from trajstore.trainer.loop.records import progress_line

    line = progress_line(0, 0, {"value/explained_variance": float("nan"), "ratio/mean": 1.0})
    assert "EV=n/a" in line and "nan" not in line and "ratio=1.000" in line
    assert "EV=0.12" in progress_line(1, 1, {"value/explained_variance": 0.12})


# -- plots: the clip plot of a one-step run ------------------------------------------------------


@pytest.mark.parametrize("steps", [[0], [0, 1, 2], list(range(40))])
def test_clip_plot_steps_are_whole_numbers_with_room_around_them(steps: list[int]) -> None:
    from types import SimpleNamespace

    pytest.importorskip("matplotlib")
    import duckdb
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from trajstore.audit.plots import _clip

    rows = ", ".join(f"('r1', {s}, 0.0, 0.0)" for s in steps)
    rel = duckdb.sql(f"SELECT * FROM (VALUES {rows}) AS t(run_id, step, masked_below, masked_above)")
    fig = Figure()
    _clip(fig, SimpleNamespace(by_step=rel), {})
    ax = fig.axes[0]
    fig.canvas.draw()
    lo, hi = ax.get_xlim()
    ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
    assert all(float(t).is_integer() for t in ticks) and ticks, ticks
    assert lo <= min(steps) - 0.5 and hi >= max(steps) + 0.5  # the points sit inside, not on the frame
    if len(steps) == 1:
        assert ticks == [steps[0]]


# -- traj train: rows without a tokenizer ---------------------------------------------------------


def _null_tokenizer_store(root: Path, *, trainable_too: bool) -> None:
    import numpy as np

    from trajstore import write_trajectories

    from tests.helpers.trajectories import tiny_model_trajectory

    rng = np.random.default_rng(0)
    engine = [tiny_model_trajectory(rng, trajectory_id=f"ng{i}").model_copy(update={
        "tokenizer": None, "not_trainable_reason": "engine token ids of an unnamed tokenizer"}) for i in range(3)]
    ok = [tiny_model_trajectory(rng, trajectory_id=f"ok{i}", tokenizer="tiny-llama") for i in range(2)]
    extra = [tiny_model_trajectory(rng, trajectory_id=f"sdk{i}").model_copy(update={"tokenizer": None})
             for i in range(2)] if trainable_too else []
    write_trajectories(str(root), engine + ok + extra)


def _vocab() -> int:
    from tests.helpers.trajectories import VOCAB

    return VOCAB


@pytest.mark.parametrize("trainable_too", [False, True])
def test_null_tokenizer_warning_is_about_trainable_rows_only_and_once(tmp_path: Path, trainable_too: bool) -> None:
    import warnings

    pytest.importorskip("torch")
    from trajstore import open_store
    from trajstore.trainer.loop.config import DataConfig
    from trajstore.trainer.data import TrajectoryStream

    _null_tokenizer_store(tmp_path, trainable_too=trainable_too)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        s = TrajectoryStream(open_store(str(tmp_path)), DataConfig(batch_size=2), tokenizer="tiny-llama",
                             vocab_size=_vocab())
        trained = []
        while (b := s.next_batch()) is not None:
            trained += [x.trajectory_id for x in b.samples]
    texts = [str(w.message) for w in seen if "tokenizer" in str(w.message)]
    assert not any(t.startswith("ng") for t in trained)  # engine rows of an unnamed tokenizer: never trained
    if not trainable_too:  # the NeMo Gym case: nothing is 'assumed' about rows that are not trained
        assert texts == []
    else:
        assert texts == ["trainable trajectories with no tokenizer recorded (null tokenizer column) are trained as "
                         "token ids of the model's tokenizer 'tiny-llama'"]
        assert {"sdk0", "sdk1"} <= set(trained)


# -- Ctrl-C during traj ingest ------------------------------------------------------------------


@pytest.mark.parametrize("strict", [False, True])
def test_ctrl_c_during_ingest_says_what_was_stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   strict: bool) -> None:
    import trajstore as ts
    from trajstore.cli import ingest as ingest_cli
    from trajstore.cli.main import EXIT_INTERRUPTED

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
    res = runner.invoke(app, ["ingest", str(logs), "--store", str(store), *(["--strict"] if strict else [])],
                        env=WIDTH)
    assert res.exit_code == EXIT_INTERRUPTED == 130, res.output
    [line] = _lines(res.stderr)
    stored = 0 if strict else 2  # non-strict flushes what it built; strict writes nothing until the end
    assert line.startswith("interrupted: " + ("nothing was stored" if strict else
                                               "this ingest stored 2 trajectories before it, each whole")), line
    assert "run the same ingest again" in line
    n = ts.read_trajectories(str(store), columns=["trajectory_id"]).num_rows if store.exists() else 0
    assert n == stored


# -- a store path the system refuses ------------------------------------------------------------


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
    res = runner.invoke(app, ["ingest", str(logs), "--store", store], env=WIDTH)
    assert res.exit_code == 1, res.output
    [line] = _lines(res.stderr)
    assert line.startswith("error: " + says.replace("{file}", str(blocker))), line
    assert "Errno" not in line and "Traceback" not in res.output


def test_an_os_error_anywhere_is_one_line_naming_the_path() -> None:
    from trajstore.errors import os_error_line

    assert os_error_line(PermissionError(13, "Permission denied", "/x/y")) == "/x/y: Permission denied"

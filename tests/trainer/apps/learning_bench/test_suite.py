"""trainer/apps/learning_bench/suite.py: the smoke preset end to end from the checkout, and
--reanalyse never writes over committed files."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.paths import REPO_ROOT


def _checkout_snapshot(root) -> dict[str, tuple[int, int]]:  # noqa: ANN001
    """(size, mtime in ns) of every file of the checkout, virtualenvs, git data and bytecode aside."""
    import os

    snap = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in (".git", ".venv", "__pycache__") and not x.endswith(".egg-info")]
        for f in files:
            st = os.stat(os.path.join(d, f))
            snap[os.path.relpath(os.path.join(d, f), root)] = (st.st_size, st.st_mtime_ns)
    return snap


@pytest.mark.slow
def test_smoke_preset_critic_beats_the_running_mean_and_leaves_the_checkout_alone(tmp_path, monkeypatch) -> None:
    """``traj bench learning --preset smoke`` run from the checkout, as a user would (77 CPU-s, 2.6
    min at load 6 on 2 cores; bench/LEARNING.md):
    it writes only under the default scratch directory (here the test's temp dir), changes no
    file of the checkout, and shows an SAO mechanism at work: after 40 critic iterations on the
    warm-start policy's data (seed 0), token-level GAE with the critic gives a policy gradient
    much closer to the Monte-Carlo oracle's than reward minus a running mean (cosine margin
    > 0.1; measured 0.63 vs 0.28 when written, and 0.30 / 0.11 / 0.22 margins on seeds 1-3), and
    its per-token advantages correlate better with A*."""
    import json
    import tempfile
    from pathlib import Path

    from typer.testing import CliRunner

    from trajstore.cli.main import app
    from trajstore.trainer.apps.learning_bench.presets import SuiteConfig

    repo = REPO_ROOT
    before = _checkout_snapshot(repo)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.chdir(repo)
    r = CliRunner().invoke(app, ["bench", "learning", "--preset", "smoke", "--format", "json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)  # --format json: the summary object, indented, alone on stdout
    assert Path(summary["out_dir"]).resolve().is_relative_to(tmp_path.resolve())
    assert (Path(summary["out_dir"]) / "report.md").is_file()
    assert _checkout_snapshot(repo) == before
    q = summary["quality"]["40"]["values"]
    sao = (q["cos"]["sao"]["0"], q["corr"]["sao"]["0"])  # seed "0" (JSON keys)
    rm = (q["cos"]["running-mean-128"]["0"], q["corr"]["running-mean-128"]["0"])
    assert sao[0] > rm[0] + 0.1, (sao, rm)
    assert sao[1] > rm[1], (sao, rm)
    assert summary["runs"]["chain/sao"]["final_eval"] > 0  # the short SAO run went through the pipeline
    # issue 28: one run of every (task, arm) of the default preset, pref-shift included, to the report
    default = SuiteConfig.preset_config("default")
    assert set(summary["runs"]) == {f"{sp.task}/{sp.arm}" for sp in default.specs({s: "x" for s in default.seeds})}


def test_reanalyse_of_a_committed_run_directory_writes_elsewhere(tmp_path) -> None:
    """Issue 16: the benchmark never writes over committed files. Issue 28: the per-run result
    files behind bench/LEARNING.md are committed, and --reanalyse recomputes the tables from them:
    a committed run directory is only read; the report, summary and tables.md go to a fresh
    directory under --scratch, and every committed file stays as it was."""
    import json
    import shutil
    import subprocess

    from typer.testing import CliRunner

    from tests.helpers.learning_results import fake_run
    from trajstore.cli.main import app
    from trajstore.trainer.apps.learning_bench.presets import SuiteConfig
    from trajstore.trainer.apps.learning_bench.suite import committed_files

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    run = tmp_path / "repo" / "bench" / "run"
    (run / "results").mkdir(parents=True)
    cfg = SuiteConfig.preset_config("smoke", seeds=[0, 1], chain_arms=["sao", "sao-k1"], shift_arms=[], quality=None)
    (run / "config.json").write_text(cfg.model_dump_json())
    for sp in cfg.specs({0: "x", 1: "x"}):
        (run / "results" / f"{sp.run_id}.json").write_text(json.dumps(
            fake_run("chain", sp.arm, sp.seed, steps=sp.steps, eval_every=sp.eval_every, gain=0.1)))
    (run / "report.md").write_text("committed report\n")
    git = ["git", "-C", str(tmp_path / "repo"), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "a run"], check=True)
    assert len(committed_files(run)) == 6
    assert committed_files(tmp_path) == []  # not a work tree
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    r = CliRunner().invoke(app, ["bench", "learning", "--reanalyse", str(run), "--scratch", str(tmp_path / "scratch"),
                                 "--format", "json"])
    assert r.exit_code == 0, r.output
    out = Path(json.loads(r.stdout)["out_dir"])
    assert out.parent == tmp_path / "scratch" and out.name.startswith("reanalyse-run-")
    assert {p.name for p in out.iterdir()} >= {"summary.json", "report.md", "tables.md"}
    assert "<!-- generated:claims -->" in (out / "tables.md").read_text()
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before

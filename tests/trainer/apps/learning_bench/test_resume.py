"""trainer/apps/learning_bench/resume.py: ``traj bench learning --resume`` keeps the complete
result files of a stopped run, runs the rest, refuses options that disagree with the run's
config.json, and records each session in machine.json and the report's provenance."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.helpers.learning_results import fake_run
from trajstore.cli.main import app
from trajstore.trainer.apps.learning_bench.arms import BenchError
from trajstore.trainer.apps.learning_bench.presets import SuiteConfig
from trajstore.trainer.apps.learning_bench.resume import kept_results, plan, resume_suite


def _stopped_run(tmp_path: Path, cfg: SuiteConfig, finished: int) -> Path:
    """A run directory as a stopped session leaves it: config.json, the first `finished` results
    of the plan, and a leftover store of the next run."""
    run = tmp_path / "run"
    (run / "results").mkdir(parents=True)
    (run / "stores").mkdir()
    (run / "config.json").write_text(cfg.model_dump_json(indent=2))
    for sp in cfg.specs({s: "x" for s in cfg.all_seeds()})[:finished]:
        d = fake_run("chain", sp.arm, sp.seed, steps=sp.steps, eval_every=sp.eval_every, gain=0.1)
        d["spec"] = json.loads(sp.model_dump_json())
        (run / "results" / f"{sp.run_id}.json").write_text(json.dumps(d))
    return run


def _cfg(**kw) -> SuiteConfig:  # noqa: ANN003
    return SuiteConfig.preset_config("smoke", seeds=[0, 1], chain_arms=["sao", "sao-k1"], shift_arms=[], quality=None,
                                     **kw)


def test_dry_run_lists_the_kept_and_the_remaining_runs(tmp_path) -> None:
    run = _stopped_run(tmp_path, _cfg(), finished=2)
    r = CliRunner().invoke(app, ["bench", "learning", "--resume", str(run), "--dry-run", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == {"kept": ["chain-sao-s0", "chain-sao-s1"],
                                    "to_run": ["chain-sao-k1-s0", "chain-sao-k1-s1"]}


def test_a_half_written_result_is_run_again(tmp_path) -> None:
    """A result file cut short (as a non-atomic write killed midway left it) is not trusted."""
    run = _stopped_run(tmp_path, _cfg(), finished=2)
    path = run / "results" / "chain-sao-s1.json"
    path.write_text(path.read_text()[:100])
    lines: list[str] = []
    assert list(kept_results(_cfg(), run, lines.append)) == ["chain-sao-s0"]
    assert "chain-sao-s1" in lines[0] and "not a complete result" in lines[0]
    assert plan(run)["to_run"][0] == "chain-sao-s1"


def test_options_that_disagree_with_config_json_are_refused_by_name(tmp_path) -> None:
    run = _stopped_run(tmp_path, _cfg(), finished=2)
    r = CliRunner().invoke(app, ["bench", "learning", "--resume", str(run), "--seeds", "0,1,2", "--dry-run"])
    assert r.exit_code == 1 and "seeds is [0, 1] in config.json, not [0, 1, 2]" in r.output, r.output
    r = CliRunner().invoke(app, ["bench", "learning", "--resume", str(run), "--preset", "default", "--dry-run"])
    assert r.exit_code == 1 and "--preset smoke, not default" in r.output, r.output
    # the same values, and the machine-local settings, are accepted
    r = CliRunner().invoke(app, ["bench", "learning", "--resume", str(run), "--seeds", "0,1", "--preset", "smoke",
                                 "--processes", "2", "--dry-run"])
    assert r.exit_code == 0, r.output


def test_a_kept_result_of_another_run_is_refused(tmp_path) -> None:
    """A result whose spec differs from the one config.json plans (here: another step count)."""
    run = _stopped_run(tmp_path, _cfg(), finished=1)
    (run / "config.json").write_text(_cfg(chain_steps=4).model_dump_json())
    with pytest.raises(BenchError, match="chain-sao-s0.json is a run with steps=3, but config.json plans steps=4"):
        kept_results(SuiteConfig.model_validate_json((run / "config.json").read_text()), run)


@pytest.mark.slow
def test_stop_and_resume_give_the_results_of_an_uninterrupted_run(tmp_path) -> None:
    """A tiny config run uninterrupted, then again stopped after half of its runs (their result
    files kept, the rest gone, a leftover store of the next) and resumed: the same result files
    (timings and store paths aside), the report written, and the session recorded."""
    from trajstore.trainer.apps.learning_bench.suite import load_results, run_suite
    from trajstore.trainer.apps.learning_bench.warmstart import WarmStartConfig

    cfg = _cfg(scratch=str(tmp_path / "scratch"), warm_start=WarmStartConfig(steps=20))
    whole = run_suite(cfg, out=tmp_path / "whole")
    stopped = tmp_path / "stopped"
    shutil.copytree(whole["out_dir"], stopped, ignore=shutil.ignore_patterns("report.md", "summary.json", "tables.md"))
    names = sorted(p.name for p in (stopped / "results").iterdir())
    for n in names[2:]:
        (stopped / "results" / n).unlink()
    shutil.rmtree(stopped / "stores")
    (stopped / "stores" / Path(names[2]).stem).mkdir(parents=True)  # the store of the run SIGTERM stopped
    (stopped / "stores" / Path(names[2]).stem / "leftover").write_text("half a run")
    summary = resume_suite(stopped)

    def strip(d: dict) -> dict:
        return {k: v for k, v in d.items() if k not in ("seconds", "cpu_seconds", "store")}

    a, b = load_results(whole["out_dir"]), load_results(stopped)
    assert sorted(a) == sorted(b) and len(a) == 4
    assert {k: strip(v) for k, v in a.items()} == {k: strip(v) for k, v in b.items()}
    assert not (stopped / "stores" / Path(names[2]).stem / "leftover").exists()
    assert (stopped / "report.md").is_file()
    resumed = json.loads((stopped / "machine.json").read_text())["resumed"]
    assert len(resumed) == 1 and resumed[0]["kept"] == 2 and resumed[0]["utc"]
    assert f"resumed {resumed[0]['utc']}" in summary["machine"]

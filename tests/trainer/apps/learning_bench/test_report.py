"""trainer/apps/learning_bench/report.py: the benchmark's report tables."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.helpers.cli import WIDTH_120
from trajstore.cli.main import app

runner = CliRunner()

# new-user walkthrough: a finding (a slip in what a command prints)
def test_bench_table_with_one_seed_has_no_nan(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from trajstore.trainer.apps.learning_bench import suite
    from trajstore.trainer.apps.learning_bench.claims import CLAIMS
    from trajstore.trainer.apps.learning_bench.presets import SuiteConfig
    from trajstore.trainer.apps.learning_bench.report import render_report
    from trajstore.trainer.apps.learning_bench.stats import t_interval
    from trajstore.trainer.apps.learning_bench.verdicts import decide

    iv = t_interval([0.05])
    claims = [{"paper": c.paper, "arm": c.arm, "ref": c.ref, "task": c.task, "metric": c.metric,
               "interval": {"mean": iv.mean, "low": iv.low, "high": iv.high, "n": iv.n},
               "verdict": d.verdict, "reason": d.reason}
              for c, d in zip(CLAIMS[:2], decide([(c, iv, True) for c in CLAIMS[:2]]))]
    fake = {"claims": claims, "seconds": 42.0, "out_dir": str(tmp_path), "runs": {}, "auc": {}, "figures": {}}
    monkeypatch.setattr(suite, "run_suite", lambda cfg, log=None: fake)
    res = runner.invoke(app, ["bench", "learning", "--preset", "smoke", "--scratch", str(tmp_path)], env=WIDTH_120)
    assert res.exit_code == 0, res.output
    assert "nan" not in res.stdout.lower()
    assert "paper claims (1 seed, CI n/a, 0.7 min" in res.stdout
    assert "ci_low" not in res.stdout
    cfg = SuiteConfig.preset_config("smoke", scratch=str(tmp_path))
    report = render_report(cfg, fake)
    assert "nan" not in report  # report.md: the reasons say 'CI n/a (1 seed)'
    assert "\n1 seed, 0.7 min." in report and "1 seeds" not in report


RESULTS = {"": ("bench/learning_results/default", "bench/learning_results/default-idle"),
           "long-": ("bench/learning_results/long", None),
           "replay-": ("bench/learning_results/default-replay", "bench/learning_results/default"),
           "power-": ("bench/learning_results/power", None),
           "held-out-": ("bench/learning_results/held-out", None),
           "engine-": ("bench/learning_results/default-engine", "bench/learning_results/default-replay"),
           "long10-": ("bench/learning_results/long-10", "bench/learning_results/long")}
"""bench/LEARNING.md's generated tables (marker prefix), the committed result files they come from
and the run they are compared with."""
SWEEP_PREFIX = "staleness-"
"""The marker prefix of the staleness sweep's table (its own test, below)."""


@pytest.mark.parametrize("prefix", list(RESULTS))
def test_learning_md_tables_are_the_reanalysis_of_the_committed_result_files(tmp_path: Path, prefix: str) -> None:
    """The per-run result files behind bench/LEARNING.md are committed, and ``--reanalyse`` of them
    (with ``--compare`` for the default run) recomputes every generated table exactly: claims with
    intervals, p-values, minimum detectable effects and verdicts; the per-arm table; the paper's
    effects; the seeds the DIS and critic claims need; the two machines side by side. The power
    preset's seed counts are the recomputed ones. The committed directory also says which
    machine made them."""
    import json
    import re

    from tests.helpers.paths import REPO_ROOT
    from trajstore.trainer.apps.learning_bench.presets import POWER_SEEDS
    from trajstore.trainer.apps.learning_bench.report import extract
    from trajstore.trainer.apps.learning_bench.suite import reanalyse

    md = (REPO_ROOT / "bench" / "LEARNING.md").read_text()
    if extract(md, f"{prefix}claims") is None:
        pytest.skip(f"bench/LEARNING.md has no generated:{prefix}claims table")
    run, other = RESULTS[prefix]
    src = REPO_ROOT / run
    assert (src / "config.json").is_file() and any((src / "results").iterdir())
    machine = json.loads((src / "machine.json").read_text())
    assert machine["cpu"] and machine["commit"] and machine["load_start"]
    summary = reanalyse(src, scratch=tmp_path, figures=False, compare=REPO_ROOT / other if other else None)
    assert Path(summary["out_dir"]).parent == tmp_path  # committed: only read
    tables = (Path(summary["out_dir"]) / "tables.md").read_text()
    names = re.findall(rf"<!-- generated:{re.escape(prefix)}([a-z]+) -->", md)
    if not prefix:  # the default run's tables: every unprefixed one (each other prefix is its own parametrisation)
        others = (*(p for p in RESULTS if p), SWEEP_PREFIX)
        names = [n for n in re.findall(r"<!-- generated:([a-z-]+) -->", md) if not n.startswith(others)]
    assert {"claims", "runs", "seeds"} <= set(names)
    for name in names:
        assert extract(tables, name) == extract(md, f"{prefix}{name}"), name
    if not prefix:
        assert {"compare", "effects"} <= set(names)
        for row in summary["seeds"]:
            assert POWER_SEEDS[row["key"]] == row["paper_power_family"], row


def test_splice_and_extract_generated_tables() -> None:
    from trajstore.trainer.apps.learning_bench.report import extract, splice

    md = "a\n<!-- generated:claims -->\nold\n<!-- /generated:claims -->\nb\n"
    new = splice(md, {"claims": "| x |\n|---|"})
    assert extract(new, "claims") == "| x |\n|---|" and new.startswith("a\n") and new.endswith("\nb\n")
    assert extract(splice(new, {"claims": "y"}), "claims") == "y"
    with pytest.raises(ValueError, match="no <!-- generated:long-claims"):
        splice(md, {"claims": "y"}, prefix="long-")


@pytest.mark.parametrize(("family", "power_family", "paper_columns"), [(21, 5, 2), (5, 5, 1)])
def test_seeds_table_has_one_paper_column_per_distinct_level(family: int, power_family: int,
                                                             paper_columns: int) -> None:
    """The seeds table names the paper's-effect seed count once per distinct Holm level: a run whose
    family is as large as the power preset's (power, held-out) gets one column, not two identical."""
    from trajstore.trainer.apps.learning_bench.report import seeds_table

    row = {"comparison": "no-correction - sao (chain)", "n": 64, "sd": 0.0671, "effect": 0.03, "mde": 0.029,
           "family": family, "power_family": power_family, "paper_run_family": 70, "paper_power_family": 62,
           "observed_power_family": None}
    head, rule, line = seeds_table({"seeds": [row]}).splitlines()
    cells = [c.strip() for c in head.strip("|").split("|")]
    assert len(cells) == len(set(cells)) == rule.count("---") == line.count("|") - 1
    assert sum(c.startswith("seeds for the paper's effect") for c in cells) == paper_columns
    assert line.endswith("| 62 | more than 2000 |")
    assert ("| 70 | 62 |" in line) == (paper_columns == 2)


SWEEP = "bench/learning_results/staleness"
"""The committed staleness sweep (one run directory per worker count under it)."""


def test_learning_md_sweep_table_is_the_reanalysis_of_the_committed_sweep(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """``--reanalyse`` of the committed staleness sweep recomputes bench/LEARNING.md's
    ``staleness-sweep`` table: every point's staleness, DIS-masked share and DIS claims."""
    from tests.helpers.paths import REPO_ROOT
    from trajstore.trainer.apps.learning_bench.report import extract
    from trajstore.trainer.apps.learning_bench.suite import reanalyse

    md = (REPO_ROOT / "bench" / "LEARNING.md").read_text()
    if extract(md, f"{SWEEP_PREFIX}sweep") is None:
        pytest.skip("bench/LEARNING.md has no generated:staleness-sweep table")
    monkeypatch.chdir(REPO_ROOT)  # the table names each point's directory as given
    summary = reanalyse(SWEEP, scratch=tmp_path, figures=False)
    assert Path(summary["out_dir"]).parent == tmp_path  # committed: only read
    tables = (Path(summary["out_dir"]) / "tables.md").read_text()
    assert extract(tables, "sweep") == extract(md, f"{SWEEP_PREFIX}sweep")
    assert len({r["workers"] for r in summary["sweep"]}) >= 2


def test_a_sweep_with_a_point_missing_is_refused(tmp_path: Path) -> None:
    import shutil

    from tests.helpers.paths import REPO_ROOT
    from trajstore.trainer.apps.learning_bench.arms import BenchError
    from trajstore.trainer.apps.learning_bench.suite import reanalyse

    if not (REPO_ROOT / SWEEP).is_dir():
        pytest.skip(f"no committed sweep at {SWEEP}")
    copy = tmp_path / "sweep"
    shutil.copytree(REPO_ROOT / SWEEP, copy)
    point = sorted(copy.glob("workers-*"))[-1]
    shutil.rmtree(point)
    with pytest.raises(BenchError, match=f"{point}: not a run directory"):
        reanalyse(copy, scratch=tmp_path / "scratch", figures=False)
    assert not (copy / "sweep.md").exists() and not (tmp_path / "scratch").exists()

"""trainer/apps/learning_bench/analysis.py: verdicts of a whole synthetic run of the default
preset's grid (10 paired seeds, no training): the rules of stats.py applied across the claims."""

from __future__ import annotations

import pytest

from tests.helpers.learning_results import fake_run


def _done(cfg, gains: dict[str, float], *, recover: float) -> dict:  # noqa: ANN001
    from trajstore.trainer.apps.learning_bench.presets import SHIFT_STYLES

    done = {}
    for sp in cfg.specs({s: "x" for s in cfg.seeds}):
        if sp.task == "chain":
            d = fake_run("chain", sp.arm, sp.seed, steps=sp.steps, eval_every=sp.eval_every, gain=gains.get(sp.arm, 0.2))
        else:
            stages = [(i * cfg.shift_stage_steps, st) for i, st in enumerate(SHIFT_STYLES)]
            d = fake_run("pref-shift", sp.arm, sp.seed, steps=sp.steps, eval_every=sp.eval_every, gain=0.0,
                         stages=stages, recover=recover)
        done[sp.run_id] = d
    return done


@pytest.fixture
def no_figures(monkeypatch):  # noqa: ANN001, ANN201
    """The figures are tested in test_plots.py; drawing them here would take ~25 s."""
    from trajstore.trainer.apps.learning_bench import plots

    for name in ("forest_plot", "quality_plot", "curves_plot", "diagnostics_plot", "log_ratio_plot", "staleness_plot",
                 "family_shift_plot"):
        monkeypatch.setattr(plots, name, lambda *a, **k: str(a[-1] if a else "figure.png"))


def test_verdicts_of_a_synthetic_default_grid(tmp_path, no_figures) -> None:  # noqa: ANN001
    """Running means clearly worse (AUC -0.03 on every seed) are reproduced after Holm; an arm
    equal to sao up to seed noise is not; no arm recovers after the shifts, so the pref-shift
    claims are not testable; every tested claim carries a Holm-adjusted p."""
    from trajstore.trainer.apps.learning_bench.analysis import analyse
    from trajstore.trainer.apps.learning_bench.presets import SuiteConfig

    cfg = SuiteConfig.preset_config("default", quality=None)
    assert len(cfg.seeds) >= 10
    summary = analyse(cfg, _done(cfg, {"running-mean-8": 0.14, "running-mean-128": 0.14}, recover=0.0), tmp_path)
    by = {c["key"]: c for c in summary["claims"]}
    assert by["critic-vs-mean-8"]["verdict"] == "reproduced" == by["critic-vs-mean-128"]["verdict"]
    assert by["k2-vs-k1"]["verdict"] == "not reproduced"
    for k in ("shift-recovery-8", "shift-recovery-128"):
        assert by[k]["verdict"] == "not testable (no arm discriminates)" and not by[k]["testable"]
    tested = [c for c in summary["claims"] if c["testable"]]
    assert tested and all(c["test"]["p_holm"] >= c["test"]["p_signflip"] for c in tested)
    assert all(0 < c["test"]["mde"] for c in tested)
    # with recovery after every shift the same pref-shift claims reach a test
    summary2 = analyse(cfg, _done(cfg, {}, recover=0.3), tmp_path)
    by2 = {c["key"]: c for c in summary2["claims"]}
    assert by2["shift-recovery-8"]["testable"] and by2["shift-recovery-8"]["verdict"] == "inconclusive"  # no paper effect

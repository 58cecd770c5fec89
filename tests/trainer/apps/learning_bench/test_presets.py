"""trainer/apps/learning_bench/presets.py: the suite's schedule of shift evaluations."""

from __future__ import annotations

import pytest


def test_shift_evaluations_land_on_every_shift_step() -> None:
    from trajstore.trainer.apps.learning_bench.presets import SuiteConfig

    cfg = SuiteConfig.preset_config("default", chain_arms=[], shift_arms=["sao"], seeds=[0])
    (spec,) = cfg.specs({0: "unused"})
    assert spec.stages == [(0, "<"), (12, "="), (24, ">")] and spec.steps == 36
    assert all(s % spec.eval_every == 0 for s in cfg.shifts())
    with pytest.raises(ValueError, match="must divide"):
        SuiteConfig.preset_config("default", shift_eval_every=5).specs({s: "x" for s in range(10)})


def test_smoke_preset_runs_every_task_arm_and_measurement_of_the_default() -> None:
    """Issue 28: the default's pref-shift runs crashed (a packing the harness did not expect)
    while the smoke preset, run in CI, had no pref-shift run. Smoke now runs one short run of
    every (task, arm) the default runs, with the same measurements (exact KL arms, the
    advantage-quality estimators, the critic warm-up), so CI goes down every path the default does."""
    from trajstore.trainer.apps.learning_bench.presets import SuiteConfig

    default, smoke = SuiteConfig.preset_config("default"), SuiteConfig.preset_config("smoke")

    def paths(cfg: SuiteConfig) -> set[tuple[str, str, bool, bool]]:
        return {(sp.task, sp.arm, sp.measure_kl, sp.critic_warmup > 0) for sp in cfg.specs({s: "x" for s in cfg.seeds})}

    assert paths(smoke) == paths(default)
    assert {t for t, *_ in paths(smoke)} == {"chain", "pref-shift"}
    assert len(smoke.seeds) == 1 and len(smoke.specs({0: "x"})) == len(paths(default))  # one short run each
    assert smoke.quality is not None and default.quality is not None
    assert smoke.quality.estimators == default.quality.estimators
    assert smoke.chain_steps < default.chain_steps and smoke.shift_stage_steps < default.shift_stage_steps

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
        SuiteConfig.preset_config("default", shift_eval_every=5).specs({s: "x" for s in range(5)})

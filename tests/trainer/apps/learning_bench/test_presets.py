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


def test_claim_seeds_give_each_arm_the_seeds_its_claims_need() -> None:
    """The power preset: an arm runs every seed any of its claims asks for (sao: the most of
    all, as it is every claim's reference but one), the paired differences use the seeds both
    arms ran; the warm starts cover every seed used. Unknown claims and empty counts are refused."""
    from pydantic import ValidationError

    from trajstore.trainer.apps.learning_bench.presets import POWER_MIN_SEEDS, POWER_SEEDS, SuiteConfig, power_family

    cfg = SuiteConfig.preset_config("power")
    runs: dict[str, set[int]] = {}
    for sp in cfg.specs({s: "x" for s in cfg.all_seeds()}):
        assert sp.task == "chain"
        runs.setdefault(sp.arm, set()).add(sp.seed)
    dis, grpo = POWER_SEEDS["dis-vs-none"], POWER_SEEDS["grpo-dis-vs-none"]
    assert runs["no-correction"] == set(range(dis)) and runs["grpo-no-dis"] == set(range(grpo))
    assert runs["grpo-dis"] == set(range(grpo)) and runs["sao"] == set(range(max(dis, POWER_MIN_SEEDS)))
    assert runs["running-mean-8"] == set(range(POWER_MIN_SEEDS))  # sized below the default's 10
    assert cfg.all_seeds() == list(range(max(POWER_SEEDS.values())))
    assert cfg.quality is None and power_family() == 5
    assert SuiteConfig.preset_config("long").seeds == list(range(10))
    with pytest.raises(ValidationError, match="unknown claim 'no-such-claim'"):
        SuiteConfig.preset_config("default", claim_seeds={"no-such-claim": 3})
    with pytest.raises(ValidationError, match="at least 1"):
        SuiteConfig.preset_config("default", claim_seeds={"k2-vs-k1": 0})


def test_the_held_out_preset_runs_chain100_from_a_warm_start_that_holds_the_same_instances_out() -> None:
    from pydantic import ValidationError

    from trajstore.trainer.apps.learning_bench.presets import SuiteConfig
    from trajstore.trainer.apps.learning_bench.warmstart import WarmStartConfig

    cfg = SuiteConfig.preset_config("held-out")
    specs = cfg.specs({s: "x" for s in cfg.all_seeds()})
    assert {sp.task for sp in specs} == {"chain100"} and all(sp.held_out == 3 for sp in specs)
    assert cfg.warm_start.tasks == ("chain100",) and cfg.warm_start.held_out == cfg.held_out == 3
    with pytest.raises(ValidationError, match="holds out the same instances"):
        SuiteConfig.preset_config("held-out", warm_start=WarmStartConfig(tasks=("chain100",), held_out=0))
    with pytest.raises(ValidationError, match="at most 9"):
        SuiteConfig.preset_config("default", held_out=12)

"""trainer/apps/throughput/config.py and suite.arm_order: arm names, presets and the trace's size."""

from __future__ import annotations

import pytest

from trajstore.trainer.apps.throughput.config import Arm, ThroughputConfig, ThroughputError
from trajstore.trainer.apps.throughput.suite import arm_order


def test_arm_names_parse_and_print_back() -> None:
    assert Arm.parse("sync") == Arm("sync") and Arm.parse(" one-step ").name == "one-step"
    assert Arm.parse("async-4") == Arm("async", 4) and Arm("async", 4).name == "async-4"
    assert Arm.parse("async-2-c4") == Arm("async", 2, 4) and Arm("async", 2, 4).name == "async-2-c4"
    for bad in ("async", "async-x", "batch", "async--1", "async-2-c0", "async-2-c", "sync-c4"):
        with pytest.raises(ThroughputError, match="unknown arm"):
            Arm.parse(bad)


def test_presets_and_overrides() -> None:
    d = ThroughputConfig.preset_config("default")
    assert d.sigmas == [0.5, 1.0, 1.5] and len(d.seeds) == 3
    # the six arms, and eta 2 at the barrier arms' concurrency (B = 4 episodes in flight)
    assert d.arms == ["sync", "one-step", "async-1", "async-2", "async-4", "async-8", "async-2-c4"]
    s = ThroughputConfig.preset_config("smoke", seeds=[4])
    assert s.steps == 2 and s.seeds == [4] and s.arms == [*d.arms[:-1], "async-2-c2"]  # B = 2 there
    assert ThroughputConfig.preset_config("default", batch_size=3).arms[-1] == "async-2-c3"
    assert ThroughputConfig.preset_config("default", arms=["sync"]).arms == ["sync"]
    with pytest.raises(ValueError, match="more than the W = 8 rollout slots"):
        ThroughputConfig(arms=["async-2-c9"])
    with pytest.raises(ValueError, match="unknown arm"):
        ThroughputConfig(arms=["sync", "fast"])
    with pytest.raises(ValueError, match="positive"):
        ThroughputConfig(sigmas=[0.0])


def test_slots_are_the_episodes_an_arm_runs_at_once() -> None:
    """The barrier arms run one batch (B) at a time, async-N every one of the W slots, async-N-cC
    C of them: async-2-c4 against sync holds concurrency fixed."""
    cfg = ThroughputConfig(batch_size=4, workers=8)
    assert [Arm.parse(a).slots(cfg) for a in ("sync", "one-step", "async-2", "async-2-c4")] == [4, 4, 8, 4]


def test_the_trace_covers_every_episode_an_arm_can_start() -> None:
    # N x B trained, plus at most W running and a batch more when the trainer finishes
    cfg = ThroughputConfig(steps=8, batch_size=8, workers=16)
    assert cfg.trace_episodes() == 64 + 16 + 8


def test_arm_order_rotates_by_seed() -> None:
    arms = ["sync", "one-step", "async-1"]
    assert [arm_order(arms, s) for s in range(4)] == [arms, arms[1:] + arms[:1], arms[2:] + arms[:2], arms]

"""trainer/apps/learning_bench/schedule.py: the asynchronous timeline, by hand."""

from __future__ import annotations

import random

from trajstore.trainer.apps.learning_bench.schedule import AsyncConfig, simulate


def test_timeline_by_hand() -> None:
    """2 workers, batch 2, every turn 1 s (sigma 0), training 0.5 s; prompts have 1, 2, 1, 1, ... turns.
    t=0: r0 (1 turn) and r1 (2 turns: actions at 0 and 1) start; t=1: r0 done, r2 starts;
    t=2: r1 and r2 done; iteration 0 takes [r0, r1] (completion order) and publishes v1 at 2.5;
    t=3: r3 and r4 done, iteration 1 takes [r2, r3]; v2 at 3.5. r2's action at t=1 used v0 and is
    trained at trainer version 1: staleness 1."""
    cfg = AsyncConfig(workers=2, batch_size=2, turn_latency_sigma=0.0, train_step_s=0.5)
    tl = simulate([1, 2] + [1] * 20, cfg, iterations=2, warmup=0, seed=0)
    assert [(it.start, it.end, it.rollouts, it.publishes) for it in tl.iterations] == [
        (2.0, 2.5, [0, 1], 1), (3.0, 3.5, [2, 3], 2)]
    assert tl.rollouts[1].action_starts == [0.0, 1.0]
    assert tl.publish_times == [0.0, 2.5, 3.5]
    assert tl.version_at(2.49) == 0 and tl.version_at(2.5) == 1
    assert tl.version_at(1) - tl.version_at(tl.rollouts[2].action_starts[0]) == 0
    # warm-up iterations publish nothing
    tl = simulate([1, 2] + [1] * 20, cfg, iterations=2, warmup=1, seed=0)
    assert [it.publishes for it in tl.iterations] == [None, 1] and tl.publish_times == [0.0, 3.5]


def test_grpo_groups_wait_for_their_slowest_member() -> None:
    cfg = AsyncConfig(workers=8, batch_size=8, group_size=4, turn_latency_sigma=1.0, train_step_s=0.3)
    rng = random.Random(1)
    tl = simulate([rng.choice([2, 3, 4]) for _ in range(400)], cfg, iterations=12, warmup=0, seed=3)
    for it in tl.iterations:
        assert len(it.rollouts) == 8
        ends = [tl.rollouts[k].end for k in it.rollouts]
        assert max(ends) <= it.start
        prompts = [tl.rollouts[k].prompt for k in it.rollouts]
        assert all(prompts.count(p) == 4 for p in prompts)  # whole groups only
    # a group member that finished early waited: some consumed rollout ended well before its batch
    assert any(it.start - tl.rollouts[k].end > 1.0 for it in tl.iterations for k in it.rollouts)

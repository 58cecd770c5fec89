"""trainer/apps/envs/__init__.py: draw_instance covers the task families with their steps."""

from __future__ import annotations

import random

from trajstore.trainer.apps.envs import draw_instance, draw_instance_from, held_out_starts


def test_draw_instance_covers_the_families_with_their_steps() -> None:
    rng = random.Random(0)
    seen = {draw_instance(rng) for _ in range(300)}
    assert {f for f, _, _ in seen} == {"easy", "medium", "hard"}
    assert all((x1 - x0) % 10 == {"easy": 1, "medium": 3, "hard": 7}[f] for f, x0, x1 in seen)


def test_held_out_starts_never_reach_training_and_are_all_the_evaluation_sees() -> None:
    """Learning bench preset v2: the evaluation episodes were drawn from the training instances. With 3 first
    terms held out per family (a seeded choice), training draws never use them and the
    evaluation instances use only them; 0 held out keeps the old draw."""
    from trajstore.trainer.apps.learning_bench.evaluation import eval_instances

    starts = held_out_starts(4, 3)
    assert all(len(v) == 3 and v <= set(range(10)) for v in starts.values())
    assert held_out_starts(4, 3) == starts and held_out_starts(5, 3) != starts
    rng = random.Random(0)
    train = {draw_instance_from(rng, starts, held_out=False) for _ in range(600)}
    assert all(x0 not in starts[f] for f, x0, _ in train) and len(train) == 3 * 7
    ev = eval_instances(4, 32, held_out=3)
    assert len(ev) == 96 and {(f, x0) for f, x0, _ in ev} == {(f, x) for f, xs in starts.items() for x in xs}
    assert all((x1 - x0) % 10 == {"easy": 1, "medium": 3, "hard": 7}[f] for f, x0, x1 in ev)
    assert len({(f, x0) for f, x0, _ in eval_instances(4, 32)}) > 9  # nothing held out: any instance

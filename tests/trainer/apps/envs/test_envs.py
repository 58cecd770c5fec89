"""trainer/apps/envs/__init__.py: draw_instance covers the task families with their steps."""

from __future__ import annotations

import random

from trajstore.trainer.apps.envs import draw_instance


def test_draw_instance_covers_the_families_with_their_steps() -> None:
    rng = random.Random(0)
    seen = {draw_instance(rng) for _ in range(300)}
    assert {f for f, _, _ in seen} == {"easy", "medium", "hard"}
    assert all((x1 - x0) % 10 == {"easy": 1, "medium": 3, "hard": 7}[f] for f, x0, x1 in seen)

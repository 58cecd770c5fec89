"""trajstore/wording.py: words that follow a count."""

from __future__ import annotations

from trajstore.wording import plural


def test_plural_follows_the_count():
    # "1 iterations, 1 policy steps", "(1 thread(s))", "2 batch(es)" in traj train / traj demo
    assert [plural(1, "iteration"), plural(2, "iteration"), plural(0, "batch", "batches")] == [
        "1 iteration", "2 iterations", "0 batches"]
    assert plural(1, "trajectory", "trajectories") == "1 trajectory" and plural(12000, "token") == "12,000 tokens"

"""trainer/apps/learning_bench/stats.py: AUC, bootstrap intervals and verdicts."""

from __future__ import annotations

import pytest


# issue 16: a new-user walkthrough finding (a slip in what a command prints)
def test_one_seed_interval_reads_n_a_not_nan() -> None:
    pytest.importorskip("torch")
    from trajstore.trainer.apps.learning_bench.stats import CLAIMS, bootstrap_interval, verdict

    iv = bootstrap_interval([-0.1])
    assert not iv.has_interval and iv.describe() == "difference -0.100, CI n/a (1 seed)"
    v, why = verdict(CLAIMS[0], iv)
    assert v == "undetermined" and "nan" not in why and "CI n/a (1 seed)" in why
    assert "95% CI [" in bootstrap_interval([-0.1, 0.2, 0.0]).describe()

"""trainer/loop/records.py: the progress line and the run's records."""

from __future__ import annotations

import pytest


# issue 16: a new-user walkthrough finding (a slip in what a command prints)
def test_progress_line_shows_n_a_for_a_metric_without_a_value() -> None:
    pytest.importorskip("torch")
    from trajstore.trainer.loop.records import progress_line

    line = progress_line(0, 0, {"value/explained_variance": float("nan"), "ratio/mean": 1.0})
    assert "EV=n/a" in line and "nan" not in line and "ratio=1.000" in line
    assert "EV=0.12" in progress_line(1, 1, {"value/explained_variance": 0.12})

"""trainer/loop/records.py: the progress line and the run's records."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trajstore.trainer.loop.records import RunRecorder, progress_line


# new-user walkthrough: a finding (a slip in what a command prints)
def test_progress_line_shows_n_a_for_a_metric_without_a_value() -> None:
    pytest.importorskip("torch")

    line = progress_line(0, 0, {"value/explained_variance": float("nan"), "ratio/mean": 1.0})
    assert "EV=n/a" in line and "nan" not in line and "ratio=1.000" in line
    assert "EV=0.12" in progress_line(1, 1, {"value/explained_variance": 0.12})


# adversarial input: `traj train` attacked with bad input (each case lost data or gave a traceback before)
def test_progress_line_labels_every_figure_once() -> None:
    """New-user walkthrough: the progress line had two unlabelled `mean=` fields (reward and ratio)."""

    line = progress_line(3, 3, {"reward/mean": 0.5, "value/explained_variance": 0.123, "ratio/mean": 1.0021,
                                "perf/tokens_per_s": 1234.4})
    assert line == "step 3 v3 reward=0.5 EV=0.12 ratio=1.002 tok/s=1,234"
    # a warm-up iteration is recorded as step = iteration - budget: iteration 7 at step -2 is the
    # 8th (7 + 1) of a budget of 9 (7 - (-2)) critic-only batches; "warm-up -2" explained nothing
    warm = progress_line(-2, 0, {"value/explained_variance": -0.5, "warn/critic_ev_not_positive": 1.0}, iteration=7)
    assert warm == "critic warm-up 8/9 v0 EV=-0.50 [critic not useful yet: EV<=0]"


def test_a_long_pass_repeats_its_line_while_it_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import time

    from trajstore.store import open_store

    rec = RunRecorder(open_store(str(tmp_path)), "r", progress=False)
    rec.STILL_RUNNING_EVERY_S = 0.2
    message = "step 0: policy update, micro-batch 1/1 (12,725 tokens, 2 trajectories)"
    during: list[str] = []
    ticks = [0]  # the heartbeat's looks at the pass (it prints a "still running" line from one)
    looked = rec._still_running_tick

    def counted_tick() -> None:
        looked()
        ticks[0] += 1

    rec._still_running_tick = counted_tick  # type: ignore[method-assign]
    try:
        t0 = time.monotonic()
        rec.activity(message)
        deadline = t0 + 120  # bounds a hang: the pass ends once it has repeated its line twice
        while len(during) < 3:
            assert time.monotonic() < deadline, during
            during += [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith(message)]
            time.sleep(0.02)
        rec.pass_done()
        elapsed = time.monotonic() - t0
        during += [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith(message)]
        # two heartbeats after the pass ended: the second comes a whole STILL_RUNNING_EVERY_S after
        # the pass's last line, when a heartbeat that outlived its pass would repeat it
        done_at = ticks[0]
        while ticks[0] < done_at + 2:
            assert time.monotonic() < deadline, "the heartbeat stopped looking"
            time.sleep(0.02)
        after = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith(message)]
    finally:
        rec.close()
    assert during[0] == message
    assert all(re.fullmatch(re.escape(message) + r" \.\.\. still running \(\d+s\)", ln) for ln in during[1:]), during
    # at most one repeat per STILL_RUNNING_EVERY_S of the pass, however long a loaded machine made it
    assert len(during) - 1 <= elapsed / 0.2, (len(during), elapsed)
    assert after == []  # nothing once the pass is done

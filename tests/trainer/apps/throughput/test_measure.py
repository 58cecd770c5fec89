"""trainer/apps/throughput/measure.py: the staleness check holds the store's audit against the
trainer's own records, on a run whose staleness is written out by hand, and says what differs
when the two count different tokens."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from tests.helpers.training import disk_config
from tests.helpers.trajectories import VOCAB
from trajstore import TrajectoryBuilder, audit
from trajstore.trainer.apps.throughput.measure import (
    StalenessTotals,
    dis_masked,
    overlap,
    staleness_check,
    step_times,
)
from trajstore.writer import write_trajectories


def _traj(tid: str, actions: list[tuple[int, int, bool]]) -> object:
    """Prompt, then per (tokens, policy version, with log-probs) an action and an observation."""
    rng = np.random.default_rng(len(tid) + sum(a[0] for a in actions))
    b = TrajectoryBuilder(trajectory_id=tid, prompt_id=tid, model="tiny", tokenizer="tiny-llama")
    b.add_prompt(rng.integers(0, VOCAB, 5))
    for i, (n, v, lp) in enumerate(actions):
        b.add_action(rng.integers(0, VOCAB, n), np.full(n, -math.log(VOCAB)) if lp else None, policy_version=v,
                     finish_reason="stop", sampling={"temperature": 1.0})
        b.add_observation(rng.integers(0, VOCAB, 3), cause_id=f"c{i}")
    b.set_reward(float(len(tid) % 2))
    return b.finish()


def _train(store: Path, trajs: list) -> None:
    from trajstore.trainer.loop.train import train

    for t in trajs:  # one shard each: the arrival order is the list's
        write_trajectories(str(store), [t])
    train(disk_config(store, max_steps=2))


def test_audit_equals_the_trainer_on_a_run_written_out_by_hand(tmp_path: Path) -> None:
    # batches of 2: step 0 (trainer v0) trains a and b, step 1 (trainer v1) trains c and d.
    # per token: a 3 + 2 tokens at v0 -> 0; b 3 at v0 -> 0; c 4 at v0 -> 1 and 2 at v1 -> 0; d 5 at v1 -> 0
    # = 19 tokens, staleness sum 4, max 1; per trajectory (its oldest token): 0, 0, 1, 0 -> sum 1, max 1
    _train(tmp_path, [_traj("a", [(3, 0, True), (2, 0, True)]), _traj("b", [(3, 0, True)]),
                      _traj("c", [(4, 0, True), (2, 1, True)]), _traj("d", [(5, 1, True)])])
    conn = audit.connect(str(tmp_path))
    summary, check = staleness_check(conn, "r")
    want = StalenessTotals(tokens=19, token_sum=4, token_max=1, trajectories=4, trajectory_sum=1, trajectory_max=1)
    assert check.audit == want and check.trainer == want and check.equal and check.problems == []
    assert summary.token_mean == 4 / 19 and summary.token_max == 1
    assert summary.traj_mean == 1 / 4 and summary.traj_max == 1
    steps = step_times(conn, "r")
    assert [s.step for s in steps] == [0, 1] and [s.trajectories for s in steps] == [2, 2]
    assert [s.action_tokens for s in steps] == [8, 11]
    assert all(s.end - s.step_s <= s.got_batch <= s.end for s in steps)
    masked = dis_masked(conn, "r")
    assert masked is not None and 0.0 <= masked <= 1.0


def test_the_check_names_what_differs_when_the_trainer_leaves_tokens_out(tmp_path: Path) -> None:
    # b's second action has no log-probs: the trainer cannot weigh it (not trained, not in its staleness
    # metric), while the audit counts every action token with a policy version: 4 tokens at v0 more
    _train(tmp_path, [_traj("a", [(3, 0, True)]), _traj("b", [(3, 0, True), (4, 0, False)]),
                      _traj("c", [(2, 0, True)]), _traj("d", [(5, 1, True)])])
    _, check = staleness_check(audit.connect(str(tmp_path)), "r")
    assert not check.equal
    assert (check.audit.tokens, check.trainer.tokens) == (17, 13)
    assert check.problems == ["tokens: audit 17 vs trainer 13"]


def test_overlap_clips_to_the_window() -> None:
    assert overlap(1.0, 3.0, 2.0, 5.0) == 1.0 and overlap(0.0, 1.0, 2.0, 5.0) == 0.0
    assert overlap(2.5, 4.0, 2.0, 5.0) == 1.5 and overlap(1.0, 9.0, 2.0, 5.0) == 3.0


def test_a_run_that_recorded_no_step_has_no_step_times(tmp_path: Path) -> None:
    # the step_metrics view has a column per metric only once some run logged it: an arm that
    # stopped before its first step (or a store with no run) was a binder error, not an empty list

    write_trajectories(str(tmp_path), [_traj("a", [(3, 0, True)])])
    conn = audit.connect(str(tmp_path))
    assert step_times(conn, "r") == []
    summary, check = staleness_check(conn, "r")
    assert check.trainer.tokens == 0 and summary.token_mean is None

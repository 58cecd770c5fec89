"""`traj train` with the replay buffer on (data.replay_fraction > 0): reuses are trained and
recorded with their count, audits see them, a resumed run draws what the uninterrupted run drew,
and a replayed step that trained reused trajectories reproduces its loss."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from tests.helpers.stores import write_synthetic_store
from tests.helpers.training import disk_config
from trajstore.audit import connect
from trajstore.cli.main import app
from trajstore.trainer.config import TrainConfig
from trajstore.trainer.loop.replay import replay_step
from trajstore.trainer.loop.train import train


def replay_config(root: Path, **run) -> TrainConfig:
    """Steps of 4: 2 read by the stream, 2 replay slots; each trajectory reused at most once,
    while at most 2 versions stale."""
    cfg = disk_config(root, **run)
    cfg.data.batch_size, cfg.data.micro_batch_size = 4, 4
    cfg.data.replay_fraction, cfg.data.replay_max_reuse, cfg.data.replay_max_staleness = 0.5, 1, 2
    return cfg


def consumed(root: Path) -> list[tuple[int, int, str, int, int | None]]:
    rows = connect(str(root)).execute("SELECT step, trainer_version, trajectory_id, reuse, staleness_min "
                                      "FROM consumed ORDER BY step, trajectory_id").fetchall()
    return [tuple(r) for r in rows]


def test_reuses_are_trained_recorded_and_audited(tmp_path: Path) -> None:
    ids = write_synthetic_store(tmp_path, 12, per_shard=2)
    s = train(replay_config(tmp_path))
    rows = consumed(tmp_path)
    fresh = [r for r in rows if r[3] == 0]
    reused = [r for r in rows if r[3] > 0]
    assert sorted(r[2] for r in fresh) == sorted(ids)  # every trajectory trained once first
    assert reused and all(r[3] == 1 for r in reused)  # at most replay_max_reuse times
    first_step = {r[2]: r[0] for r in fresh}
    for step, _version, tid, _, staleness in reused:
        assert step > first_step[tid] and staleness is not None and staleness <= 2
    by_step = {m_step: sum(1 for r in reused if r[0] == m_step) for m_step in {r[0] for r in rows}}
    assert [h["data/replayed"] for h in s.history] == [by_step[k] for k in sorted(by_step)]
    assert s.history[0]["data/replayed"] == 0 and max(by_step.values()) == 2  # two slots, empty at first
    assert s.steps == 6  # the stream read 2 a step: 12 trajectories
    r = CliRunner().invoke(app, ["stats", str(tmp_path), "--staleness", "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    by_run = doc["staleness.by_run"][0]
    assert (by_run["consumed"], by_run["reused"]) == (len(rows), len(reused))


def test_a_resumed_run_draws_what_the_uninterrupted_run_drew(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for root in (a, b):
        write_synthetic_store(root, 12, per_shard=2)
    train(replay_config(a, checkpoint_every=2))
    train(replay_config(b, checkpoint_every=2, max_steps=3))  # stops after a checkpoint at iteration 2
    assert len({r[0] for r in consumed(b)}) == 3
    train(replay_config(b, checkpoint_every=2), resume=True)  # the buffer starts empty, as a's did there
    assert consumed(b) == consumed(a)
    # the step after each checkpoint has nothing to draw: the buffer was emptied there
    assert [r for r in consumed(a) if r[0] in (2, 4) and r[3] > 0] == []


def test_a_replayed_step_with_reused_trajectories_reproduces_its_loss(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 12, per_shard=2)
    cfg = replay_config(tmp_path, checkpoint_every=2, keep_checkpoints=5)
    cfg.data.replay_max_staleness = 10  # the synthetic rollouts' versions stay at 0 and 1
    train(cfg)
    reused_at = {r[0] for r in consumed(tmp_path) if r[3] > 0}
    assert 3 in reused_at  # step 3 trained reuses (drawn from what steps 2 read)
    got = replay_step(str(tmp_path), "r", 3)
    assert (got.checkpoint_iteration, got.iterations_before) == (2, 1)
    assert len(got.trajectories) == 4
    rec, new = got.metrics["policy/loss"]
    assert rec != 0 and abs(new - rec) <= 1e-6 * abs(rec), got.metrics

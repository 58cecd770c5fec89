"""Text-only trajectories (ingested logs: no policy version) trained with
``--behaviour-logprobs initial-policy`` have an undefined staleness, and every report says so
the same way: consumed records carry null versions (never -1, which made staleness
trainer_version + 1), step metrics leave them out, the staleness and clip audits agree, and the
plot never claims that nothing was consumed."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.helpers.trajectories import VOCAB, tiny_model_trajectory
from trajstore import audit, open_store, write_trajectories
from trajstore.trainer.config import AlgoConfig, DataConfig, ModelConfig, RunConfig, TrainConfig
from trajstore.trainer.loop.train import train


def test_text_only_logs_have_undefined_staleness_in_every_report(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    trajs = [tiny_model_trajectory(rng, trajectory_id=f"t{i}", policy_versions=(None,), with_logprobs=False)
             for i in range(4)]
    write_trajectories(str(tmp_path), trajs)
    cfg = TrainConfig(
        store=str(tmp_path), model=ModelConfig(name="tiny-llama", tiny_vocab_size=VOCAB),
        data=DataConfig(batch_size=4, micro_batch_size=2, max_seq_len=512, max_batch_tokens=8192,
                        behaviour_logprobs="initial-policy"),
        algo=AlgoConfig(critic_warmup_steps=0),
        run=RunConfig(run_id="r1", max_steps=1, checkpoint_every=100, progress=False))
    summary = train(cfg)
    metrics = summary.history[0]
    action_tokens = int(metrics["data/action_tokens"])
    assert "staleness/mean" not in metrics and "staleness/max" not in metrics
    assert metrics["staleness/unversioned_action_tokens"] == action_tokens

    conn = audit.connect(open_store(str(tmp_path)))
    rows = conn.sql("SELECT min_policy_version, max_policy_version, staleness_min, staleness_max "
                    "FROM consumed").fetchall()
    assert rows and all(r == (None, None, None, None) for r in rows)

    st = audit.staleness_report(conn, run="r1")
    by_run = dict(zip(st.by_run.columns, st.by_run.fetchall()[0]))
    assert by_run["consumed"] == 4
    assert by_run["unversioned_action_tokens"] == action_tokens
    assert by_run["versioned_action_tokens"] == 0 and by_run["token_p50"] is None and by_run["traj_max"] is None
    assert st.histogram.fetchall() == []
    clip = audit.clip_report(conn, run="r1")
    assert clip.by_staleness.fetchall() == []  # no made-up staleness bucket (was staleness 1)
    assert sum(r[4] for r in clip.by_step.fetchall()) == action_tokens
    step_rel = conn.sql("SELECT * FROM step_metrics")
    cols, sm = step_rel.columns, step_rel.fetchall()[0]
    assert "staleness/mean" not in cols or dict(zip(cols, sm))["staleness/mean"] is None

    # the empty tables' notes say why, never that nothing was consumed
    for rep, table in ((st, "histogram"), (clip, "by_staleness")):
        note = rep.empty_note(table)
        assert "undefined" in note and "no training run consumed" not in note

    from trajstore.audit.plots import draw_reports

    fig = draw_reports({"staleness": st})
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert not any("no training run consumed" in t for t in texts)
    assert any("staleness is undefined" in t for t in texts)


def test_engine_rollouts_whose_logs_have_no_version_train_with_undefined_staleness(tmp_path: Path) -> None:
    """Issue 16 walkthrough: ingested NeMo Gym rollouts (engine ids and log-probs, no policy
    version in the logs) were stored with a made-up version 0, so `traj stats` showed
    share_with_policy_version 1.000 and staleness lags of 0. They now carry no version (metadata
    policy_version_known: false), train on their engine log-probs, and their staleness is undefined."""
    import pytest

    from trajstore.errors import TrajectoryValidationError

    rng = np.random.default_rng(1)
    flag = {"policy_version_known": False}
    trajs = [tiny_model_trajectory(rng, trajectory_id=f"e{i}", policy_versions=(None,), metadata=flag)
             for i in range(4)]
    # without the flag an engine rollout still needs its version (a harness that forgot it)
    with pytest.raises(TrajectoryValidationError, match="policy_version_known"):
        tiny_model_trajectory(rng, trajectory_id="forgot", policy_versions=(None,))
    write_trajectories(str(tmp_path), trajs)
    conn = audit.connect(open_store(str(tmp_path)))
    cov = audit.coverage_report(conn)
    (row,) = [dict(zip(cov.tokens.columns, r)) for r in cov.tokens.fetchall()]
    assert row["share_with_logprob"] == 1.0 and row["share_with_policy_version"] == 0.0
    assert audit.staleness_report(conn).unconsumed.fetchall() == []  # no lag of a made-up version 0

    cfg = TrainConfig(
        store=str(tmp_path), model=ModelConfig(name="tiny-llama", tiny_vocab_size=VOCAB),
        data=DataConfig(batch_size=4, micro_batch_size=2, max_seq_len=512, max_batch_tokens=8192),
        algo=AlgoConfig(critic_warmup_steps=0),
        run=RunConfig(run_id="r1", max_steps=1, checkpoint_every=100, progress=False))
    summary = train(cfg)  # engine log-probs: no --behaviour-logprobs initial-policy needed
    metrics = summary.history[0]
    assert summary.steps == 1 and "staleness/mean" not in metrics
    assert metrics["staleness/unversioned_action_tokens"] == metrics["data/action_tokens"] > 0

"""trainer/apps/learning_bench/harness.py: a tiny run through the store mixes versions inside
trajectories."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def tiny_warm_start(tmp_path_factory) -> str:  # noqa: ANN001
    from trajstore.trainer.apps.learning_bench.warmstart import WarmStartConfig, ensure_warm_start

    return str(ensure_warm_start(tmp_path_factory.mktemp("scratch"), 0, WarmStartConfig(steps=3, batch_episodes=8)))


@pytest.mark.parametrize("arm", ["sao", "gae-turn-avg", "grpo-no-dis"])
def test_a_tiny_run_mixes_versions_inside_trajectories(tmp_path, tiny_warm_start: str, arm: str) -> None:
    """Through the store: each action's version is the one current when it started (so some
    trajectories hold several), the trainer read the batches in completion order (run_one checks
    the stream), and the recorded staleness is trainer version - action version."""
    import duckdb

    from trajstore.trainer.apps.learning_bench.harness import run_one
    from trajstore.trainer.apps.learning_bench.spec import RunSpec
    from trajstore.trainer.apps.learning_bench.trainer_side import train_config

    spec = RunSpec(task="chain", arm=arm, seed=0, warm_start=tiny_warm_start, steps=5, critic_warmup=3,
                   policy_lr=3e-4, batch_size=8, workers=16, eval_every=5, eval_per_family=2, logit_noise=0.2)
    # the timeline publishes nothing for exactly critic_warmup iterations: the trainer's warm-up
    # must not end early on explained variance (its default), or its versions run ahead
    assert train_config(spec, "unused").algo.critic_warmup_until == "budget"
    res = run_one(spec, str(tmp_path / "store"))
    assert [e["step"] for e in res.evals] == [0, 5]
    warmup = 0 if arm.startswith("grpo") else 3  # GRPO has no critic, hence no warm-up
    assert [h["step"] for h in res.history] == [-1] * warmup + [0, 1, 2, 3, 4]
    con = duckdb.connect()
    root = tmp_path / "store"
    mixed = con.execute(f"SELECT count(*) FROM read_parquet('{root}/trajectories/*.parquet') "
                    f"WHERE min_policy_version < max_policy_version").fetchone()[0]
    assert mixed > 0
    stale = con.execute(f"SELECT max(c.staleness_max), min(c.staleness_min) FROM read_parquet('{root}/runs/{spec.run_id}/"
                    f"consumed/*.parquet') c").fetchone()
    assert stale[0] >= 1 and stale[1] >= 0
    assert sum(res.staleness_tokens.values()) == sum(v[0] for v in res.band.values()) > 0
    if arm == "grpo-no-dis":
        groups = con.execute(f"SELECT count(DISTINCT group_id), count(*) FROM read_parquet('{root}/trajectories/*.parquet')"
                         ).fetchone()
        assert groups[1] == 4 * groups[0]


def test_a_pref_shift_run_packs_as_the_trainer_does(tmp_path, tiny_warm_start: str) -> None:
    """Issue 28: the trainer caps a CPU micro-batch at 256 tokens (its memory plan) while the
    harness split each batch by trajectory count, so a batch whose 8 longest trajectories exceed
    256 tokens (pref-shift's) stopped with "the policy loss saw a packing other than the
    harness's". The harness now asks the trainer's own micro-batching; this run has such batches."""
    import duckdb

    from trajstore.trainer.apps.learning_bench.harness import run_one
    from trajstore.trainer.apps.learning_bench.spec import RunSpec

    spec = RunSpec(task="pref-shift", arm="sao", seed=0, warm_start=tiny_warm_start, steps=2, critic_warmup=1,
                   policy_lr=3e-4, batch_size=32, workers=64, eval_every=2, eval_per_family=1, logit_noise=0.2,
                   stages=[(0, "<"), (1, "=")])
    res = run_one(spec, str(tmp_path / "store"))
    assert [h["step"] for h in res.history] == [-1, 0, 1]
    assert sum(res.staleness_tokens.values()) > 0
    root = tmp_path / "store"
    tops = duckdb.connect().execute(
        f"SELECT c.step, list(t.num_tokens ORDER BY t.num_tokens DESC)[1:8] FROM read_parquet('{root}/runs/"
        f"{spec.run_id}/consumed/*.parquet') c JOIN read_parquet('{root}/trajectories/*.parquet') t USING "
        f"(trajectory_id) GROUP BY c.step").fetchall()
    assert max(sum(top) for _, top in tops) > 256  # split by count, this run would have crashed

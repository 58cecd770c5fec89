"""trainer/apps/learning_bench/harness.py: a tiny run through the store mixes versions inside
trajectories."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def tiny_warm_start(tmp_path_factory) -> str:  # noqa: ANN001
    from trajstore.trainer.apps.learning_bench.warmstart import WarmStartConfig, ensure_warm_start

    return str(ensure_warm_start(tmp_path_factory.mktemp("scratch"), 0, WarmStartConfig(steps=3, batch_episodes=8)))


@pytest.mark.parametrize("arm", ["sao", "gae-turn-avg", "grpo-no-dis", "replay"])
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
    # every arm has the warm-up (default preset v2): GRPO, without a critic, takes no step during it
    assert [h["step"] for h in res.history] == [-1] * 3 + [0, 1, 2, 3, 4]
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
    reuse = con.execute(f"SELECT count(*) FILTER (WHERE reuse > 0), count(*) FILTER (WHERE reuse = 0), "
                        f"count(DISTINCT trajectory_id) FROM read_parquet('{root}/runs/{spec.run_id}/consumed/*.parquet')"
                        ).fetchone()
    # the replay arm trains sao's rollouts once each and some of them again; the others, once each
    assert reuse[1] == reuse[2] and ((reuse[0] > 0) == (arm == "replay"))


def test_a_pref_shift_run_packs_as_the_trainer_does(tmp_path, tiny_warm_start: str) -> None:
    """Learning bench preset v2: the trainer caps a CPU micro-batch at 256 tokens (its memory plan) while the
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


def test_arms_differ_from_sao_only_in_what_they_ablate() -> None:
    """Learning bench preset v2: the critic-free arms started at once while the critic arms had 10 warm-up
    batches, so their first policy batch and their baseline's state differed from sao's by more
    than the ablation. Every arm's trainer config differs from sao's only in the settings its
    ablation names (the learning rate only where the ablation is the step size), and every arm
    is on sao's timeline: the same prompts and warm-up, and with one rollout per prompt the same
    rollouts in every iteration (GRPO's groups, its ablation, reorder which finish first)."""
    from trajstore.trainer.apps.learning_bench.arms import ARMS
    from trajstore.trainer.apps.learning_bench.harness import plan_timeline
    from trajstore.trainer.apps.learning_bench.spec import RunSpec
    from trajstore.trainer.apps.learning_bench.trainer_side import train_config
    from trajstore.trainer.data import replay_slots

    def flat(d: dict, pre: str = "") -> dict:
        out = {}
        for k, v in d.items():
            out.update(flat(v, f"{pre}{k}.") if isinstance(v, dict) else {f"{pre}{k}": v})
        return out

    base = RunSpec(task="chain", arm="sao", seed=3, warm_start="unused", steps=4, critic_warmup=3, policy_lr=5e-4,
                   batch_size=8, workers=16)
    ref = flat(train_config(base, "store").model_dump())
    ref_prompts, ref_tl = plan_timeline(base)
    lr_arms = []
    for name, arm in ARMS.items():
        spec = base.model_copy(update={"arm": name})
        cfg = flat(train_config(spec, "store").model_dump())
        # the trainer zeroes its critic warm-up without a critic; the harness runs that warm-up
        # for every arm (the timeline below)
        diff = {k for k in ref if cfg[k] != ref[k]} - {"run.run_id"} - (
            {"algo.critic_warmup_steps"} if not arm.has_critic else set())
        allowed = {f"algo.{k}" for k in arm.algo}
        allowed |= {"model.critic_trainable_pattern"} if arm.full_critic else set()
        allowed |= {"optim.policy_lr", "optim.critic_lr"} if arm.lr_factor != 1 else set()
        # the replay slots come on top of the timeline's batch: the stream still reads sao's batch
        allowed |= {"data.batch_size", "data.max_batch_tokens", "data.replay_fraction", "data.replay_max_reuse",
                    "data.replay_max_staleness"} if arm.replay else set()
        if arm.replay:
            assert cfg["data.batch_size"] - replay_slots(cfg["data.batch_size"], cfg["data.replay_fraction"]) == 8
        assert diff <= allowed, (name, diff - allowed)
        if arm.lr_factor != 1:
            lr_arms.append(name)
            assert cfg["optim.policy_lr"] == 5e-4 * arm.lr_factor
        else:
            assert cfg["optim.policy_lr"] == ref["optim.policy_lr"] and cfg["optim.critic_lr"] == ref["optim.critic_lr"]
        assert cfg["algo.critic_warmup_steps"] == (3 if arm.has_critic else 0)
        prompts, tl = plan_timeline(spec)
        assert prompts == ref_prompts
        assert [it.publishes for it in tl.iterations] == [None] * 3 + [1, 2, 3, 4]
        if arm.group_size == 1:
            assert [it.rollouts for it in tl.iterations] == [it.rollouts for it in ref_tl.iterations], name
            assert tl.publish_times == ref_tl.publish_times, name
        else:
            assert [it.rollouts for it in tl.iterations] != [it.rollouts for it in ref_tl.iterations], name
    assert all("lr" in ARMS[a].name or "step" in ARMS[a].changes for a in lr_arms)


def test_critic_free_arms_fill_their_baseline_in_the_same_warm_up_and_see_sao_s_first_batch(
        tmp_path, tiny_warm_start: str, monkeypatch) -> None:
    """A running-mean arm gets sao's warm-up batches, token for token (the same rollouts, sampled
    by the same warm start with the same generator), takes no policy step on them, and its first
    policy step's baseline is the mean of the last `window` warm-up rewards (the window was empty,
    the baseline 0, on the first policy step before the warm-up applied to every arm)."""
    import duckdb

    from trajstore.trainer.apps.learning_bench.harness import run_one
    from trajstore.trainer.apps.learning_bench.spec import RunSpec
    from trajstore.trainer.sao import baselines

    means: list[float] = []
    filled: list[int] = []
    rewards: list[list[float]] = []
    call = baselines.RunningMeanBaseline.__call__

    def spy(self, r, g=None):  # noqa: ANN001, ANN202
        means.append(self.mean)
        filled.append(self._history.numel())
        rewards.append(r.tolist())
        return call(self, r, g)

    monkeypatch.setattr(baselines.RunningMeanBaseline, "__call__", spy)
    common = dict(task="chain", seed=0, warm_start=tiny_warm_start, steps=2, critic_warmup=3, policy_lr=3e-4,
                  batch_size=8, workers=16, eval_every=2, eval_per_family=1, logit_noise=0.2)
    runs = {arm: run_one(RunSpec(arm=arm, **common), str(tmp_path / arm)) for arm in ("sao", "running-mean-8")}
    for res in runs.values():
        assert [h["step"] for h in res.history] == [-1, -1, -1, 0, 1]
    assert len(means) == 5 and means[0] == 0.0  # 3 warm-up batches, then 2 policy steps
    assert filled == [0, 8, 8, 8, 8]  # full when the first policy step comes (it was empty: baseline 0)
    assert means[3] == pytest.approx(sum(rewards[2]) / 8)  # window 8 = the last warm-up batch
    con = duckdb.connect()

    def v0(arm: str) -> dict[str, list[int]]:
        rows = con.execute(f"SELECT trajectory_id, tokens FROM read_parquet('{tmp_path / arm}/trajectories/*.parquet') "
                           "WHERE max_policy_version = 0").fetchall()
        return {tid.rsplit("-r", 1)[1]: list(tok) for tid, tok in rows}

    first = v0("sao")
    assert len(first) >= 3 * 8 and v0("running-mean-8") == first


@pytest.mark.slow  # two short harness runs: minutes on a loaded 2-core machine
def test_the_engine_like_mismatch_reaches_a_run_and_shows_at_staleness_zero(tmp_path, tiny_warm_start: str) -> None:
    """Learning bench preset v2: ``--mismatch engine`` (float8 LM head + Student-t logit noise) goes through the
    harness, not only the sampler's unit test. At staleness 0 the trainer's weights are the
    engine's, so the log-ratio there is the injected mismatch alone: without any mismatch every
    such token sits in the two histogram bins around 0 (|log-ratio| < 0.05, float32 rounding);
    with the engine-like model some tokens land farther out, and a few in the tails (> 0.5 nats)."""
    from trajstore.trainer.apps.learning_bench.harness import run_one
    from trajstore.trainer.apps.learning_bench.spec import RunSpec
    from trajstore.trainer.apps.learning_bench.trainer_side import LOG_RATIO_EDGES

    common = dict(task="chain", arm="sao", seed=0, warm_start=tiny_warm_start, steps=3, critic_warmup=1,
                  policy_lr=3e-4, batch_size=16, workers=16, eval_every=3, eval_per_family=1)
    runs = {"none": RunSpec(bf16=False, logit_noise=0.0, **common),
            "engine": RunSpec(mismatch="engine", logit_noise=0.3, **common)}
    hist = {k: run_one(spec, str(tmp_path / k)).log_ratio_hist for k, spec in runs.items()}
    zero = LOG_RATIO_EDGES.index(0.0)  # torch.bucketize: bin i holds edges[i-1] < x <= edges[i]

    def outside(h: list[int], lo: float) -> int:  # tokens with |log-ratio| beyond the edge at +-lo
        i_lo, i_hi = LOG_RATIO_EDGES.index(-lo), LOG_RATIO_EDGES.index(lo)
        return sum(h[:i_lo + 1]) + sum(h[i_hi + 1:])

    h0 = {k: [int(c) for c in h[0]] for k, h in hist.items()}  # staleness 0
    assert sum(h0["none"]) > 0 and sum(h0["engine"]) > 0
    assert sum(h0["none"][zero:zero + 2]) == sum(h0["none"]), h0["none"]
    assert outside(h0["engine"], 0.05) > 0.1 * sum(h0["engine"]), h0["engine"]
    assert outside(h0["engine"], 0.5) > 0, h0["engine"]

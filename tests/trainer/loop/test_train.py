"""trainer/loop/train.py: the SAO loop on tiny random models: a 3-step smoke train changes every
trainable parameter and no frozen critic attention parameter; micro-batching does not change the
update; the baselines run; text-only data trains only with the opt-in; records land in the store;
a non-finite update stops the run with the last good version kept; --keep-versions and
--keep-checkpoints bound the disk."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from tests.helpers.stores import write_synthetic_store
from tests.helpers.training import disk_config, refusal_config, run_files_digest
from tests.helpers.trajectories import VOCAB, tiny_model_trajectory
from trajstore import open_store
from trajstore.policies import latest_policy_version, list_policy_versions
from trajstore.trainer.config import AlgoConfig, DataConfig, ModelConfig, OptimConfig, RunConfig, TrainConfig
from trajstore.trainer.data import TrainDataError
from trajstore.trainer.loop.setup import setup
from trajstore.trainer.loop.step import NonFiniteUpdateError, train_step
from trajstore.trainer.loop.train import train


def _cfg(store: Path, *, model: str = "tiny-llama", run_id: str = "r", batch_size: int = 4, micro: int = 2,
         max_steps: int | None = 3, warmup: int = 1, **algo) -> TrainConfig:
    return TrainConfig(
        store=str(store), model=ModelConfig(name=model, tiny_vocab_size=VOCAB),
        data=DataConfig(batch_size=batch_size, micro_batch_size=micro, max_seq_len=512, max_batch_tokens=8192),
        algo=AlgoConfig(critic_warmup_steps=warmup, **algo),
        run=RunConfig(run_id=run_id, max_steps=max_steps, checkpoint_every=100, progress=False))


def _snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in module.named_parameters()}


@pytest.mark.parametrize("model", ["tiny-llama", "tiny-qwen3-moe"])
def test_smoke_three_steps_change_every_trainable_and_no_frozen_parameter(tmp_path: Path, model: str) -> None:
    write_synthetic_store(tmp_path, 16, per_shard=4, tokenizer=model)
    cfg = _cfg(tmp_path, model=model)  # paper learning rates (1e-6 / 5e-6), 1 warm-up + 3 policy steps
    tr = setup(cfg)
    pol0, crit0 = _snapshot(tr.loaded.model), _snapshot(tr.critic)
    summary = train(cfg, trainer=tr)
    assert (summary.iterations, summary.steps, summary.version) == (4, 3, 3)
    unchanged = [n for n, p in tr.loaded.model.named_parameters() if torch.equal(p, pol0[n])]
    assert unchanged == []
    frozen = [n for n, p in tr.critic.named_parameters() if not p.requires_grad]
    assert frozen and all(".mlp." not in n or ".mlp.gate.weight" in n for n in frozen)  # attention, norms, ...
    for n, p in tr.critic.named_parameters():
        assert torch.equal(p, crit0[n]) == (n in frozen), n
    # published v0 (initial weights) and one version per policy step; --keep-versions 3 (default)
    # pruned v0 once v3 was out
    assert list_policy_versions(tmp_path, "r") == [1, 2, 3]


def test_records_steps_consumed_and_config(tmp_path: Path) -> None:
    import duckdb

    ids = write_synthetic_store(tmp_path, 12, per_shard=4)
    train(_cfg(tmp_path, max_steps=None, warmup=1))
    root = open_store(str(tmp_path)).path("runs", "r")
    con = duckdb.connect()
    consumed = con.execute(f"SELECT trajectory_id, step, trainer_version, staleness_min, staleness_max, "
                           f"ratio_mean FROM '{root}/consumed/*.parquet' ORDER BY step").fetchall()
    assert sorted(r[0] for r in consumed) == ids  # each trajectory exactly once
    assert {r[1] for r in consumed} == {-1, 0, 1}  # one warm-up iteration, then policy steps 0, 1
    warm = [r for r in consumed if r[1] == -1]
    assert all(r[5] is None for r in warm) and all(r[5] is not None for r in consumed if r[1] >= 0)
    assert all(r[3] <= r[4] for r in consumed)
    metrics = {m for (m,) in con.execute(f"SELECT DISTINCT metric FROM '{root}/steps/*.parquet'").fetchall()}
    for m in ("policy/loss", "value/explained_variance", "ratio/masked_below", "staleness/max",
              "perf/tokens_per_s", "perf/data_wait_frac",
              # the value loss's and policy loss's statistics that were not logged before
              "value/clip_frac", "value/last_update_mean", "policy/abs_logp_diff_mean"):
        assert m in metrics
    from trajstore.trainer.loop.records import METRIC_DOCS

    assert metrics - set(METRIC_DOCS) == set()  # every recorded metric is documented
    saved = json.loads(Path(root, "config.json").read_text())
    assert saved["algo"]["critic_updates"] == 2 and saved["optim"]["policy_lr"] == 1e-6


def test_data_wait_counts_the_whole_wait_for_a_batch(tmp_path: Path) -> None:
    """perf/data_wait_frac covers every second the loop waited, not only the last 0.2 s slice of
    its polling (it was cut there: a 0.5 s wait read as at most 0.2 s)."""
    import time

    write_synthetic_store(tmp_path, 8, per_shard=4)
    cfg = _cfg(tmp_path, batch_size=4, micro=4, max_steps=2, warmup=0)
    tr = setup(cfg)
    real = tr.stream.next_batch

    def slow() -> object:
        time.sleep(0.6)
        return real()

    tr.stream.next_batch = slow  # type: ignore[method-assign]
    train(cfg, trainer=tr)
    waits = [m["perf/data_wait_frac"] * m["perf/step_s"] for m in tr.history]
    assert len(waits) == 2 and waits[0] >= 0.55  # the first batch: the whole 0.6 s
    # the second batch was read while the first trained; whatever was left of its 0.6 s is counted
    assert all(w <= m["perf/step_s"] for w, m in zip(waits, tr.history))


def test_follow_stops_after_max_steps_without_waiting_for_another_batch(tmp_path: Path) -> None:
    """--follow --max-steps N returns once the N-th step is published: it waited for one more batch
    it would not train (for ever with no idle timeout; the demo's agents had to stop first)."""
    import threading

    write_synthetic_store(tmp_path, 4, per_shard=4)
    base = _cfg(tmp_path, batch_size=4, micro=4, max_steps=1, warmup=0)
    cfg = base.model_copy(update={"data": base.data.model_copy(update={"follow": True, "poll_interval_s": 0.1,
                                                                      "idle_timeout_s": None})})
    out: dict = {}
    th = threading.Thread(target=lambda: out.update(summary=train(cfg)), daemon=True)
    th.start()
    th.join(timeout=120)
    assert not th.is_alive(), "train() kept waiting for data after its last step"
    assert (out["summary"].steps, out["summary"].version) == (1, 1)
    assert latest_policy_version(tmp_path, "r") == 1
    # its reader thread stops too (it kept polling the store for as long as the process lived)
    import time

    deadline = time.monotonic() + 120  # bounds a hang
    while any(t.name == "trajstore-train-reader" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(t.name == "trajstore-train-reader" for t in threading.enumerate())


def _sgd_step(store: Path, micro: int, run_id: str) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    cfg = _cfg(store, run_id=run_id, micro=micro, warmup=0)
    tr = setup(cfg)
    # SGD(lr=1): the parameter change is exactly minus the (clipped) accumulated gradient, so
    # this compares the updates themselves (Adam's first step would amplify float noise to +-lr)
    tr.optimizers = {k: torch.optim.SGD([p for p in o.param_groups[0]["params"]], lr=1.0)
                     for k, o in tr.optimizers.items()}
    before = {**{f"p.{k}": v for k, v in _snapshot(tr.loaded.model).items()},
              **{f"c.{k}": v for k, v in _snapshot(tr.critic).items()}}
    metrics, _ = train_step(tr, tr.stream.next_batch())
    after = {**{f"p.{n}": p.detach() for n, p in tr.loaded.model.named_parameters()},
             **{f"c.{n}": p.detach() for n, p in tr.critic.named_parameters()}}
    tr.stream.close()
    return {k: after[k] - before[k] for k in before}, metrics


def test_micro_batch_1x4_equals_micro_batch_4x1(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 4)
    a, metrics_a = _sgd_step(tmp_path, micro=1, run_id="mb1")  # 4 micro-batches, gradient accumulation 4
    b, metrics_b = _sgd_step(tmp_path, micro=4, run_id="mb4")  # 1 packed micro-batch of 4 trajectories
    assert any(bool(d.abs().sum() > 0) for d in a.values())
    for k in a:
        # tolerance: float32 sums in a different order (4 rows vs one packed row): 1e-6 abs + 1e-4 rel
        torch.testing.assert_close(a[k], b[k], atol=1e-6, rtol=1e-4, msg=k)
    # the logged statistics merge across micro-batches too (sums, minima, maxima, moments)
    assert metrics_a.keys() == metrics_b.keys() and "value/clip_frac" in metrics_a
    for k in metrics_a:
        assert metrics_a[k] == pytest.approx(metrics_b[k], rel=1e-4, abs=1e-6), k


@pytest.mark.parametrize("value_clip", [None, 1e-6])
def test_value_clip_fraction_is_recorded(tmp_path: Path, value_clip: float | None) -> None:
    """The value loss's clip statistic reaches the step record: 0 without clipping; with a clip
    of 1e-6 the second critic update moves values further than that, and the clipped branch is
    the larger wherever the first update moved a value towards its return."""
    write_synthetic_store(tmp_path, 4)
    cfg = _cfg(tmp_path, warmup=0, max_steps=1, value_clip=value_clip)
    cfg.optim = OptimConfig(critic_lr=1e-3)
    tr = setup(cfg)
    metrics, _ = train_step(tr, tr.stream.next_batch())
    tr.stream.close()
    if value_clip is None:
        assert metrics["value/clip_frac"] == 0.0
    else:
        assert 0.0 < metrics["value/clip_frac"] <= 1.0


@pytest.mark.parametrize("advantage", ["running-mean", "grpo"])
def test_baselines_train_without_a_critic(tmp_path: Path, advantage: str) -> None:
    write_synthetic_store(tmp_path, 8, group_id="g0")
    tr = setup(_cfg(tmp_path, advantage=advantage, max_steps=2))
    assert tr.critic is None and "critic" not in tr.optimizers
    pol0 = _snapshot(tr.loaded.model)
    s = train(tr.cfg, trainer=tr)
    assert s.steps == 2 and "value/loss" not in s.history[-1]
    assert any(not torch.equal(p, pol0[n]) for n, p in tr.loaded.model.named_parameters())


def test_grpo_without_group_id_says_how_to_set_it_when_capturing(tmp_path: Path) -> None:
    from trajstore.errors import TrajstoreError

    write_synthetic_store(tmp_path, 4)  # no group_id
    tr = setup(_cfg(tmp_path, advantage="grpo", max_steps=1))
    with pytest.raises(TrajstoreError) as e:
        train(tr.cfg, trainer=tr)
    msg = str(e.value)
    # the names a user types: the proxy's header (trajstore/proxy/app.py reads x-group-id, case-
    # insensitive), its /finish body field, and the SDK's builder argument
    assert "'t00000' has none" in msg and "4 of this batch's 4" in msg
    assert "X-Group-Id" in msg and '"group_id" in the POST /s/<session>/finish body' in msg
    assert "TrajectoryBuilder(group_id=...)" in msg


@pytest.mark.parametrize("name", ["dis", "ppo-clip"])
def test_setup_picks_the_named_policy_loss(tmp_path: Path, name: str) -> None:
    from trajstore.trainer.sao.losses import dis_policy_loss, ppo_clip_policy_loss

    write_synthetic_store(tmp_path, 4)
    tr = setup(_cfg(tmp_path, policy_loss=name, max_steps=1, warmup=0))
    assert tr.policy_loss_fn is {"dis": dis_policy_loss, "ppo-clip": ppo_clip_policy_loss}[name]
    assert train(tr.cfg, trainer=tr).steps == 1


def test_tokenizer_mismatch_is_refused(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 4, tokenizer="HuggingFaceTB/SmolLM2-135M-Instruct")
    with pytest.raises(TrainDataError, match="field tokenizer is 'HuggingFaceTB/SmolLM2-135M-Instruct'"):
        train(_cfg(tmp_path))
    _assert_nothing_written(tmp_path)


def _assert_nothing_written(root: Path) -> None:
    """A refused run stops before it saves a config, publishes v0 or writes records."""
    assert not (root / "runs").exists() and not (root / "policies").exists()


def test_text_only_needs_opt_in_and_uses_the_initial_policy(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 8, with_logprobs=False)
    with pytest.raises(TrainDataError, match="--behaviour-logprobs initial-policy"):
        train(_cfg(tmp_path, run_id="no"))
    _assert_nothing_written(tmp_path)
    cfg = _cfg(tmp_path, run_id="yes", warmup=0, max_steps=2)
    cfg.data.behaviour_logprobs = "initial-policy"
    cfg.optim = OptimConfig(policy_lr=1e-2)
    s = train(cfg)
    # step 0: the policy still has its initial weights, so every ratio is exactly 1;
    # step 1: behaviour log-probs still come from the *initial* weights, not the updated ones
    assert s.history[0]["ratio/mean"] == pytest.approx(1.0, abs=1e-5)
    assert abs(s.history[1]["ratio/mean"] - 1.0) > 1e-3
    saved = json.loads(Path(open_store(str(tmp_path)).path("runs", "yes", "config.json")).read_text())
    assert saved["data"]["behaviour_logprobs"] == "initial-policy"


@pytest.mark.s3
def test_train_and_resume_on_an_s3_store(s3_store_uri: tuple[str, dict]) -> None:
    """Records, checkpoints and published policies go through fsspec to a moto S3 bucket."""
    import pyarrow.parquet as pq

    uri, opts = s3_store_uri
    import numpy as np

    from trajstore.writer import write_trajectories

    rng = np.random.default_rng(0)
    trajs = [tiny_model_trajectory(rng, trajectory_id=f"s{i}") for i in range(8)]
    write_trajectories(uri, trajs[:4], storage_options=opts)
    write_trajectories(uri, trajs[4:], storage_options=opts)
    cfg = _cfg(Path("unused"), max_steps=1, warmup=0)
    cfg.store, cfg.storage_options = uri, opts
    assert train(cfg).steps == 1
    cfg.run.max_steps = None
    s = train(cfg, resume=True)  # continues from the S3 checkpoint with the remaining batch
    assert (s.steps, s.iterations) == (2, 2)
    store = open_store(uri, storage_options=opts)
    ids = []
    for path, _ in store.shard_paths("runs/r/consumed"):
        with store.fs.open(path, "rb") as fh:
            ids += pq.read_table(fh).column("trajectory_id").to_pylist()
    assert sorted(ids) == sorted(t.trajectory_id for t in trajs)
    assert list_policy_versions(store, "r") == [0, 1, 2]


def test_tensorboard_events_are_written_next_to_the_records(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 4)
    cfg = _cfg(tmp_path, max_steps=1, warmup=0)
    cfg.run.tensorboard = True
    train(cfg)
    events = list((tmp_path / "runs" / "r" / "tensorboard").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(events[0].parent))
    acc.Reload()
    assert {"policy/loss", "value/explained_variance", "perf/tokens_per_s"} <= set(acc.Tags()["scalars"])


# disk use of training runs (published versions and checkpoints pruned, leftovers removed)
def test_keep_versions_and_checkpoints_bound_the_disk(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 12, per_shard=2)
    s = train(disk_config(tmp_path, keep_versions=2, keep_checkpoints=1, checkpoint_every=1))
    assert s.steps == 6  # 12 trajectories / 2 per step -> v0 .. v6 published
    assert list_policy_versions(tmp_path, "r") == [5, 6]
    assert sorted(os.listdir(tmp_path / "runs/r/checkpoints")) == ["LATEST", "it00000006"]


# adversarial input: `traj train` attacked with bad input (each case lost data or gave a traceback before)
def test_an_update_that_makes_weights_non_finite_stops_and_keeps_the_last_good_version(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 8)
    cfg = refusal_config(tmp_path, max_steps=1)
    assert train(cfg).steps == 1  # v0, v1 published and checkpointed
    cfg.run.max_steps = None
    # past validation (as a config edited in memory, or an lr schedule gone wrong, would be)
    cfg.optim.policy_lr = float("inf")
    before = run_files_digest(tmp_path)
    with pytest.raises(NonFiniteUpdateError, match="policy update made parameters non-finite"):
        train(cfg, resume=True)
    assert latest_policy_version(tmp_path, "r") == 1 and list_policy_versions(tmp_path, "r") == [0, 1]
    after = run_files_digest(tmp_path)
    # only the config was rewritten and v1 re-published on resume; no record or checkpoint of the bad step
    assert {k for k in after if k not in before} == set()
    ckpt = json.loads((tmp_path / "runs/r/checkpoints/LATEST").read_text())
    assert ckpt["iteration"] == 1

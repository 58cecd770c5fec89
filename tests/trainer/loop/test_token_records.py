"""trainer/loop/token_records.py: ``traj train --record-tokens`` writes, per trained action token of
the recorded trajectories, exactly what the policy loss and the critic saw (issue 27); the sample
is picked by id hash; the rows read back through the ``token_annotations`` view; a resumed run
rolls them back with the other records."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pytest
import torch

from tests.helpers.stores import write_synthetic_store
from tests.helpers.trajectories import VOCAB
from trajstore import audit
from trajstore.store import open_store
from trajstore.store.layout import run_tokens_dir
from trajstore.trainer.config import AlgoConfig, DataConfig, ModelConfig, RunConfig, TrainConfig
from trajstore.trainer.loop.records import RunRecorder
from trajstore.trainer.loop.setup import setup
from trajstore.trainer.loop.token_records import is_recorded
from trajstore.trainer.loop.train import train

EPS = 0.01
"""A narrow DIS band, so that the tiny model's ratios (within a few percent of 1) fall on both sides."""


def _cfg(store: Path, *, fraction: float, **algo) -> TrainConfig:
    return TrainConfig(
        store=str(store), model=ModelConfig(name="tiny-llama", tiny_vocab_size=VOCAB),
        data=DataConfig(batch_size=4, micro_batch_size=2, max_seq_len=512, max_batch_tokens=8192),
        algo=AlgoConfig(critic_warmup_steps=1, eps_low=EPS, eps_high=EPS, **algo),
        run=RunConfig(run_id="r", max_steps=2, checkpoint_every=100, progress=False, record_tokens=fraction))


def _spy(tr) -> list[dict]:  # noqa: ANN001
    """Per micro-batch pass, in order: what the advantage estimator returned (with the samples and
    the packing) and then what the policy loss was called with."""
    seen: list[dict] = []
    adv_fn, loss_fn = tr.advantage_fn, tr.policy_loss_fn

    def advantage(mb, samples, values, scalar):  # noqa: ANN001, ANN202
        adv, ret, lam = adv_fn(mb, samples, values, scalar)
        seen.append({"warm_up": tr.in_warmup(), "ids": [s.trajectory_id for s in samples],
                     "segments": mb.segments.tolist(),
                     "values": None if values is None else values.detach().clone(),
                     "returns": None if ret is None else ret.detach().clone()})
        return adv, ret, lam

    def loss(logprobs, rollout_logprobs, advantages, action_mask, *a, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        pending = next(s for s in seen if "logprobs" not in s and not s["warm_up"])
        pending.update(logprobs=logprobs.detach().clone(), rollout=rollout_logprobs.clone(),
                       advantages=advantages.clone(), mask=action_mask.clone())
        return loss_fn(logprobs, rollout_logprobs, advantages, action_mask, *a, **kw)

    tr.advantage_fn, tr.policy_loss_fn = advantage, loss
    return seen


def _expected(seen: list[dict]) -> dict[tuple[str, int], tuple]:
    """(trajectory_id, position) -> what the loss saw there, written out from the spied tensors:
    packed slot p of a trajectory starting at offset a predicts its token p - a + 1."""
    out = {}
    for s in seen:
        if "logprobs" not in s:  # a warm-up pass: no policy loss, nothing recorded
            continue
        for i, tid in enumerate(s["ids"]):
            a, b = s["segments"][i], s["segments"][i + 1]
            for p in range(a, b):
                if not bool(s["mask"][0, p]):
                    continue
                lp, ro = float(s["logprobs"][0, p]), float(s["rollout"][0, p])
                ratio = math.exp(lp - ro)
                band = -1 if ratio <= 1 - EPS else 1 if ratio >= 1 + EPS else 0
                out[(tid, p - a + 1)] = (ro, lp, ratio, band, float(s["advantages"][0, p]),
                                         float(s["values"][0, p]), float(s["returns"][0, p]))
    return out


def test_recorded_annotations_equal_what_the_loss_saw(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 12, per_shard=4)
    cfg = _cfg(tmp_path, fraction=1.0)
    tr = setup(cfg)
    seen = _spy(tr)
    train(cfg, trainer=tr)  # 1 critic warm-up iteration, then policy steps 0 and 1
    # the warm-up's passes are the first two advantage calls; they never reach the policy loss
    assert sum("logprobs" in s for s in seen) == 4 and len(seen) == 6
    expected = _expected(seen)
    conn = audit.connect(str(tmp_path))
    rows = conn.sql('SELECT trajectory_id, position, rollout_logprob, trainer_logprob, ratio, band, advantage, '
                    'value, "return", step, trainer_version FROM token_annotations').fetchall()
    got = {(r[0], r[1]): r[2:9] for r in rows}
    assert len(got) == len(rows) == len(expected) > 0
    assert got.keys() == expected.keys()
    for key, want in expected.items():
        have = got[key]
        # the stored float32 values are the loss's own float32 tensors: equal exactly
        assert have[0] == want[0] and have[1] == want[1] and have[4] == want[4], key
        assert have[5] == want[5] and have[6] == want[6], key
        assert have[2] == pytest.approx(want[2], rel=1e-6), key  # float32 exp vs Python's float64 exp
        if abs(want[2] - (1 - EPS)) > 1e-6 and abs(want[2] - (1 + EPS)) > 1e-6:
            assert have[3] == want[3], key
    bands = {g[3] for g in got.values()}
    assert bands == {-1, 0, 1}, bands  # the narrow band puts tokens on each side and inside
    # warm-up records nothing; the policy steps record under their step and trainer version
    assert {(r[9], r[10]) for r in rows} == {(0, 0), (1, 1)}
    # each row's position is an action token of its trajectory, in the spans view's terms
    outside = conn.sql('SELECT count(*) FROM token_annotations a WHERE NOT EXISTS (SELECT 1 FROM spans s WHERE '
                       's.trajectory_id = a.trajectory_id AND s.kind = \'action\' AND a.position >= s.start '
                       'AND a.position < s."end")').fetchall()[0][0]
    assert outside == 0


def test_fraction_picks_trajectories_by_id_hash(tmp_path: Path) -> None:
    ids = [f"t{i:05d}" for i in range(200)]

    def below_half(tid: str) -> bool:  # BLAKE2b-64 of the id, little-endian, against 2**63
        return int.from_bytes(hashlib.blake2b(tid.encode(), digest_size=8).digest(), "little") < 2**63

    assert is_recorded(ids, 0.5) == [below_half(t) for t in ids]
    assert 60 < sum(is_recorded(ids, 0.5)) < 140
    assert is_recorded(ids, 0.0) == [False] * 200 and is_recorded(ids, 1.0) == [True] * 200
    write_synthetic_store(tmp_path, 12, per_shard=4)
    train(_cfg(tmp_path, fraction=0.5))
    conn = audit.connect(str(tmp_path))
    recorded = {r[0] for r in conn.sql("SELECT DISTINCT trajectory_id FROM token_annotations").fetchall()}
    trained = {r[0] for r in conn.sql("SELECT trajectory_id FROM consumed WHERE step >= 0").fetchall()}
    assert recorded == {t for t in trained if below_half(t)}


def test_off_by_default_and_rolled_back_on_resume(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 12, per_shard=4)
    cfg = _cfg(tmp_path, fraction=0.0)
    train(cfg)
    store = open_store(str(tmp_path))
    assert store.shard_paths(run_tokens_dir("r")) == []
    cfg.run.run_id, cfg.run.record_tokens = "r2", 1.0
    train(cfg)
    shards = store.shard_paths(run_tokens_dir("r2"))
    assert len(shards) == 2  # one per policy step (iterations 1 and 2)
    removed = RunRecorder(store, "r2", progress=False).rollback_after(1)
    assert len(store.shard_paths(run_tokens_dir("r2"))) == 1 and removed >= 1


def _host_reads_of_one_step(store: Path, fraction: float, monkeypatch: pytest.MonkeyPatch) -> int:
    cfg = _cfg(store, fraction=fraction)
    cfg.algo.critic_warmup_steps = 0
    cfg.run.run_id = f"r{fraction}"
    tr = setup(cfg)
    from trajstore.trainer.loop.step import train_step

    calls = [0]
    with monkeypatch.context() as m:
        for name in ("tolist", "item", "__bool__", "__float__", "__int__"):
            real = getattr(torch.Tensor, name)

            def counted(self, *a, _real=real, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
                calls[0] += 1
                return _real(self, *a, **kw)

            m.setattr(torch.Tensor, name, counted)
        train_step(tr, tr.stream.next_batch())
    tr.stream.close()
    return calls[0]


def test_recording_adds_no_host_read_to_the_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every read of a tensor's value on the host (``.tolist()``, ``.item()``, ``bool()``, ...) is a
    device sync on CUDA: a step that records every token makes as many as one that records none
    (the annotations are copied without waiting and read after the step's one sync)."""
    write_synthetic_store(tmp_path, 4)
    without = _host_reads_of_one_step(tmp_path, 0.0, monkeypatch)
    with_tokens = _host_reads_of_one_step(tmp_path, 1.0, monkeypatch)
    assert with_tokens == without > 0
    assert len(open_store(str(tmp_path)).shard_paths(run_tokens_dir("r1.0"))) == 1  # and they were written

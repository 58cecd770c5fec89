"""trainer/loop/step.py: invariants of one SAO iteration that a wrong loop would silently break (issue 15, part 1):
K critic optimiser steps per iteration (warm-up included); warm-up iterations leave the policy
bit-identical; the advantages that reach the policy loss are exactly the ones the estimator (or
an override) produced, across a context rewrite as one chain (issue 23); and (issue 22) in every
loss_agg mode the update does not depend on how the step is split into micro-batches, nor on the
packed layout; the step reads device tensors on the host once (issue 22)."""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers.stores import write_synthetic_store
from tests.helpers.trajectories import VOCAB
from trajstore.trainer.config import AlgoConfig, DataConfig, ModelConfig, RunConfig, TrainConfig
from trajstore.trainer.loop.setup import setup
from trajstore.trainer.loop.step import train_step


def _cfg(store: Path, *, warmup: int, k: int = 2, batch_size: int = 4, **algo) -> TrainConfig:
    return TrainConfig(
        store=str(store), model=ModelConfig(name="tiny-llama", tiny_vocab_size=VOCAB),
        data=DataConfig(batch_size=batch_size, micro_batch_size=batch_size, max_seq_len=512, max_batch_tokens=8192),
        algo=AlgoConfig(critic_warmup_steps=warmup, critic_updates=k, **algo),
        run=RunConfig(run_id="r", checkpoint_every=100, progress=False))


def _count_steps(opt: torch.optim.Optimizer) -> list[int]:
    calls = [0]
    step = opt.step

    def counted(*a, **kw):  # noqa: ANN002, ANN003, ANN202
        calls[0] += 1
        return step(*a, **kw)

    opt.step = counted  # type: ignore[method-assign]
    return calls


@pytest.mark.parametrize("k", [1, 2, 3])
def test_critic_optimiser_steps_are_k_per_iteration_warmup_included(tmp_path: Path, k: int) -> None:
    write_synthetic_store(tmp_path, 12)
    tr = setup(_cfg(tmp_path, warmup=1, k=k))
    critic_calls, policy_calls = _count_steps(tr.optimizers["critic"]), _count_steps(tr.optimizers["policy"])
    for _ in range(3):  # 1 warm-up iteration + 2 policy steps, 4 trajectories each
        train_step(tr, tr.stream.next_batch())
    tr.stream.close()
    assert critic_calls[0] == k * 3  # K critic updates in each of the 3 iterations
    assert policy_calls[0] == 2  # no policy update in the warm-up iteration
    # AdamW's own counter agrees (it is what the bias correction uses)
    head = dict(tr.critic.named_parameters())["value_head.weight"]
    assert int(tr.optimizers["critic"].state[head]["step"]) == k * 3


def test_warmup_iterations_leave_every_policy_parameter_bit_identical(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 12)
    tr = setup(_cfg(tmp_path, warmup=2))
    before = {n: p.detach().clone() for n, p in tr.loaded.model.named_parameters()}
    critic0 = {n: p.detach().clone() for n, p in tr.critic.named_parameters()}
    for i in range(2):
        metrics, _ = train_step(tr, tr.stream.next_batch())
        changed = [n for n, p in tr.loaded.model.named_parameters() if not torch.equal(p, before[n])]
        assert changed == [], f"warm-up iteration {i} changed {changed}"
        assert all(p.grad is None for p in tr.loaded.model.parameters())
        assert (tr.state.step, tr.state.version) == (0, 0) and "policy/loss" not in metrics
    assert not tr.optimizers["policy"].state  # AdamW never stepped: no moment estimates either
    assert any(not torch.equal(p, critic0[n]) for n, p in tr.critic.named_parameters() if p.requires_grad)
    train_step(tr, tr.stream.next_batch())  # the first policy step does move the policy
    tr.stream.close()
    assert (tr.state.step, tr.state.version) == (1, 1)
    assert any(not torch.equal(p, before[n]) for n, p in tr.loaded.model.named_parameters())


def _spy_loss(tr) -> list[torch.Tensor]:  # noqa: ANN001
    """Record the advantages argument of every policy-loss call."""
    seen: list[torch.Tensor] = []
    loss = tr.policy_loss_fn

    def spy(logprobs, rollout_logprobs, advantages, action_mask, *a, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        seen.append(advantages.detach().clone())
        return loss(logprobs, rollout_logprobs, advantages, action_mask, *a, **kw)

    tr.policy_loss_fn = spy
    return seen


def test_an_advantage_override_reaches_the_loss_unchanged(tmp_path: Path) -> None:
    """A replaced estimator (how the learning benchmark sets up its GAE variants) is what the loss
    sees: advantages = 0.01 * slot index + trajectory index at action slots, 0 elsewhere."""
    write_synthetic_store(tmp_path, 4)
    tr = setup(_cfg(tmp_path, warmup=0))
    given: list[torch.Tensor] = []

    def override(mb, samples, values, _scalar):  # noqa: ANN001, ANN202
        adv = torch.zeros(mb.action_mask.shape)
        for i in range(len(samples)):
            a, b = int(mb.segments[i]), int(mb.segments[i + 1])
            adv[0, a:b] = torch.arange(b - a) * 0.01 + i
        adv = adv * mb.action_mask
        given.append(adv)
        return adv, torch.zeros_like(adv), torch.ones(len(samples))

    tr.advantage_fn = override
    seen = _spy_loss(tr)
    train_step(tr, tr.stream.next_batch())
    tr.stream.close()
    assert len(seen) == 1 and torch.equal(seen[0], given[0])
    assert float(seen[0].abs().sum()) > 0


def test_running_mean_advantages_reach_the_loss(tmp_path: Path) -> None:
    """Global running mean, window 128: batch 1 has no history (baseline 0, A = R), batch 2 gets
    A = R - mean(batch 1 rewards), spread on every action slot of the trajectory."""
    write_synthetic_store(tmp_path, 8)
    tr = setup(_cfg(tmp_path, warmup=0, advantage="running-mean", running_mean_window=128))
    seen = _spy_loss(tr)
    b1 = tr.stream.next_batch()
    train_step(tr, b1)
    b2 = tr.stream.next_batch()
    train_step(tr, b2)
    tr.stream.close()
    from trajstore.trainer.data import pack, split_for_rank

    mean1 = sum(s.reward for s in b1.samples) / 4
    for batch, base, adv in ((b1, 0.0, seen[0]), (b2, mean1, seen[1])):
        samples = split_for_rank(batch.samples, 0, 1)  # the loop's packing order (1 rank, 1 micro-batch)
        mb = pack(samples)
        for i, s in enumerate(samples):
            a, b = int(mb.segments[i]), int(mb.segments[i + 1])
            m = mb.action_mask[0, a:b]
            assert torch.allclose(adv[0, a:b][m], torch.full((int(m.sum()),), s.reward - base))
            assert torch.all(adv[0, a:b][~m] == 0)
    assert len({s.reward for s in b2.samples}) > 1 or mean1 not in (0.0, 1.0)  # the test can tell them apart


def _reference_gae(values: torch.Tensor, mask: torch.Tensor, reward: float) -> torch.Tensor:
    """Skip-observation GAE written out for one trajectory in the prediction frame, gamma = 1:
    over the action slots t_1 < ... < t_l, delta_j = r_j + V(t_{j+1}) - V(t_j) (V after the last
    = 0, reward on the last), A_j = delta_j + lambda A_{j+1}, lambda = 1 - 1 / (1.5 l)."""
    slots = mask.nonzero().flatten().tolist()
    lam = 1 - 1 / (1.5 * len(slots))
    out = torch.zeros_like(values)
    nxt_v, nxt_a = 0.0, 0.0
    for j, t in enumerate(reversed(slots)):
        r = reward if j == 0 else 0.0
        a = r + nxt_v - float(values[t]) + lam * nxt_a
        out[t] = a
        nxt_v, nxt_a = float(values[t]), a
    return out


def test_sao_gae_advantages_from_the_critic_reach_the_loss(tmp_path: Path) -> None:
    """The default estimator: the loss sees skip-observation GAE of the critic's values before its
    updates (recomputed here with the critic and a loop written out in this test)."""
    write_synthetic_store(tmp_path, 4)
    tr = setup(_cfg(tmp_path, warmup=0))
    seen = _spy_loss(tr)
    estimator = tr.advantage_fn
    inputs = []

    def capture(mb, samples, values, scalar):  # noqa: ANN001, ANN202
        with torch.no_grad():
            own = tr.critic(mb.input_ids, mb.position_ids)  # the critic before this step's updates
        inputs.append((mb, list(samples), own))
        return estimator(mb, samples, values, scalar)

    tr.advantage_fn = capture
    train_step(tr, tr.stream.next_batch())
    tr.stream.close()
    (mb, samples, values), = inputs
    expected = torch.zeros_like(values)
    for i, s in enumerate(samples):
        a, b = int(mb.segments[i]), int(mb.segments[i + 1])
        expected[0, a:b] = _reference_gae(values[0, a:b], mb.action_mask[0, a:b], s.reward)
    torch.testing.assert_close(seen[0], expected, atol=1e-5, rtol=1e-5)
    # not trivially equal to the reward: the critic's values enter
    assert not torch.allclose(seen[0][mb.action_mask], torch.zeros(int(mb.action_mask.sum())))


def _reference_chain_gae(values: list[torch.Tensor], masks: list[torch.Tensor], reward: float) -> list[torch.Tensor]:
    """:func:`_reference_gae` over the action slots of several parts in order, as over one
    trajectory (issue 23): the last slot of a part bootstraps from the first slot of the next,
    lambda = 1 - 1 / (1.5 l) with l the chain's slots, the reward only on the very last slot."""
    slots = [(k, t) for k, m in enumerate(masks) for t in m.nonzero().flatten().tolist()]
    lam = 1 - 1 / (1.5 * len(slots))
    out = [torch.zeros_like(v) for v in values]
    nxt_v, nxt_a = 0.0, 0.0
    for j, (k, t) in enumerate(reversed(slots)):
        a = (reward if j == 0 else 0.0) + nxt_v - float(values[k][t]) + lam * nxt_a
        out[k][t] = a
        nxt_v, nxt_a = float(values[k][t]), a
    return out


@pytest.mark.parametrize("micro", [1, 3])
def test_the_gae_chain_runs_across_a_context_rewrite_even_across_micro_batches(tmp_path: Path, micro: int) -> None:
    """Issue 23, `traj train` on split episodes: a part and its context-rewrite successor are
    one chain (the part's last action bootstraps from the successor's first; the episode's reward
    only at the successor's end), whether they share a micro-batch or not; the sub-agent child of
    the same episode is credited on its own (a terminal lineage)."""
    from tests.helpers.stores import write_split_episode_store
    from trajstore.trainer.data import pack

    write_split_episode_store(tmp_path, 1)
    cfg = _cfg(tmp_path, warmup=0, batch_size=3)
    tr = setup(cfg.model_copy(update={"data": cfg.data.model_copy(update={"micro_batch_size": micro})}))
    seen = _spy_loss(tr)
    batch = tr.stream.next_batch()
    root, rewrite, sub = batch.samples
    assert (rewrite.parent_trajectory_id, rewrite.link_kind, sub.link_kind) == ("ep0.0", "context_rewrite", "subagent")
    with torch.no_grad():  # the critic before this step's updates, one trajectory at a time
        v = {s.trajectory_id: tr.critic(pack([s]).input_ids, pack([s]).position_ids)[0] for s in batch.samples}
    masks = {s.trajectory_id: pack([s]).action_mask[0] for s in batch.samples}
    train_step(tr, batch)
    tr.stream.close()
    chain = _reference_chain_gae([v["ep0.0"], v["ep0.1"]], [masks["ep0.0"], masks["ep0.1"]], rewrite.reward)
    expected = {"ep0.0": chain[0], "ep0.1": chain[1], "ep0.2": _reference_gae(v["ep0.2"], masks["ep0.2"], sub.reward)}
    # the loop's order: chains longest first, a chain's parts together (split_for_rank)
    from trajstore.trainer.data import split_for_rank

    order = [s.trajectory_id for s in split_for_rank(batch.samples, 0, 1)]
    assert order.index("ep0.1") == order.index("ep0.0") + 1
    got = torch.cat([a[0] for a in seen])
    torch.testing.assert_close(got, torch.cat([expected[t] for t in order]), atol=1e-5, rtol=1e-5)
    # not what training the parts apart gives: the root's own reward on its last action
    apart = _reference_gae(v["ep0.0"], masks["ep0.0"], root.reward)
    assert not torch.allclose(apart, chain[0], atol=1e-4)


def test_old_split_episodes_train_as_before(tmp_path: Path) -> None:
    """v1 / v2 shards of an episode split the old way (metadata `episode` parts, no lineage
    columns) train unchanged: each part alone, credited with its own reward."""
    import numpy as np

    from tests.helpers.trajectories import tiny_model_trajectory
    from trajstore import open_store
    from trajstore.convert import trajectories_to_table
    from trajstore.trainer.data import pack, split_for_rank

    rng = np.random.default_rng(1)
    store = open_store(str(tmp_path))
    for version in (1, 2):
        parts = [tiny_model_trajectory(rng, trajectory_id=f"v{version}.{i}", reward=1.0,
                                       metadata={"episode": {"id": f"v{version}", "part": i + 1, "parts": 2,
                                                             "change": None if i == 0 else "engine-prompt"}})
                 for i in range(2)]
        store.write_table(trajectories_to_table(parts, version=version))
    tr = setup(_cfg(tmp_path, warmup=0, batch_size=4))
    seen = _spy_loss(tr)
    batch = tr.stream.next_batch()
    assert {s.episode_id for s in batch.samples} == {"v1", "v2"} and not any(s.link_kind for s in batch.samples)
    with torch.no_grad():
        samples = split_for_rank(batch.samples, 0, 1)
        mb = pack(samples)
        values = tr.critic(mb.input_ids, mb.position_ids)
    train_step(tr, batch)
    tr.stream.close()
    expected = torch.zeros_like(values)
    for i, s in enumerate(samples):
        a, b = int(mb.segments[i]), int(mb.segments[i + 1])
        expected[0, a:b] = _reference_gae(values[0, a:b], mb.action_mask[0, a:b], s.reward)
    torch.testing.assert_close(seen[0], expected, atol=1e-5, rtol=1e-5)


def _record_grads(tr, which: str) -> list[dict[str, torch.Tensor]]:  # noqa: ANN001
    """The gradient of every trainable parameter of `which` ("policy" / "critic") at each of its
    optimiser steps (after clipping: the update's direction and size)."""
    opt = tr.optimizers[which]
    model = tr.loaded.model if which == "policy" else tr.critic
    seen: list[dict[str, torch.Tensor]] = []
    step = opt.step

    def recording(*a, **kw):  # noqa: ANN002, ANN003, ANN202
        seen.append({n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None})
        return step(*a, **kw)

    opt.step = recording  # type: ignore[method-assign]
    return seen


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_the_update_does_not_depend_on_how_the_step_is_split_or_laid_out(tmp_path: Path, agg: str) -> None:
    """Issue 22: the loop packs each micro-batch into one (1, L) row; with loss_agg
    "seq-mean-token-mean" the loss averaged that row as one trajectory, so the update changed with
    the micro-batch size (one trajectory per micro-batch was right, four packed together were not).
    Every mode: the same 4 trajectories as 1 packed micro-batch of 4, 4 of 1, or 3 + 1 give the
    same policy and critic loss and gradients, and the packed loss equals the padded layout's
    (one row per trajectory, no segment ids) of the same inputs."""
    from trajstore.trainer.data import pack, split_for_rank, to_rows
    from trajstore.trainer.sao.losses import POLICY_LOSSES

    write_synthetic_store(tmp_path, 4)
    runs = []
    for micro in (4, 1, 3):
        cfg = _cfg(tmp_path, warmup=0, k=1, loss_agg=agg)
        cfg = cfg.model_copy(update={"data": cfg.data.model_copy(update={"micro_batch_size": micro})})
        tr = setup(cfg)
        policy, critic = _record_grads(tr, "policy"), _record_grads(tr, "critic")
        calls: list[tuple] = []
        loss_fn = tr.policy_loss_fn

        def spy(*a, calls=calls, loss_fn=loss_fn, **kw):  # noqa: ANN002, ANN003, ANN202
            calls.append((a, kw))
            return loss_fn(*a, **kw)

        tr.policy_loss_fn = spy
        batch = tr.stream.next_batch()
        metrics, _ = train_step(tr, batch)
        tr.stream.close()
        assert len(calls) == (4 + micro - 1) // micro  # that many micro-batches
        runs.append((metrics, policy[0], critic[0], calls))
        if micro == 4:
            segments = pack(split_for_rank(batch.samples, 0, 1)).segments  # the loop's packing (1 rank)
    (m0, p0, c0, calls0), *others = runs
    for m, p, c, _ in others:
        assert m["policy/loss"] == pytest.approx(m0["policy/loss"], rel=1e-4, abs=1e-7)
        assert m["value/loss"] == pytest.approx(m0["value/loss"], rel=1e-4, abs=1e-7)
        for ref, got in ((p0, p), (c0, c)):
            assert ref.keys() == got.keys()
            for name in ref:
                torch.testing.assert_close(got[name], ref[name], rtol=1e-4, atol=1e-6, msg=name)
    # the packed micro-batch's loss, recomputed in the padded layout (one row per trajectory)
    (lp, rollout, adv, mask, eps_low, eps_high), kw = calls0[0]
    rows = [to_rows(x, segments) for x in (lp, rollout, adv, mask)]
    padded, _ = POLICY_LOSSES["dis"](*rows, eps_low, eps_high, agg=agg, num_tokens=kw["num_tokens"],
                                     num_sequences=kw["num_sequences"])
    assert len(segments) == 5 and float(padded.detach()) == pytest.approx(m0["policy/loss"], rel=1e-5, abs=1e-8)


LOOP_DIR = str(Path(__import__("trajstore.trainer.loop", fromlist=["x"]).__file__).parent)

CONVERSIONS = ("item", "tolist", "__float__", "__int__", "__bool__")


def _count_conversions(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    """Wrap every tensor-to-Python conversion; count calls by the calling file (and line)."""
    seen: collections.Counter[str] = collections.Counter()
    for name in CONVERSIONS:
        original = getattr(torch.Tensor, name)

        def counted(self, *a, _original=original, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
            caller = sys._getframe(1)
            seen[f"{caller.f_code.co_filename}:{caller.f_lineno}"] += 1
            return _original(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return seen


def _loop_calls(seen: collections.Counter[str]) -> dict[str, int]:
    return {k: v for k, v in seen.items() if k.startswith(LOOP_DIR)}


@pytest.mark.parametrize("micro", [1, 4])
def test_one_host_sync_per_step_from_the_loop_whatever_the_micro_batches(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, micro: int) -> None:
    write_synthetic_store(tmp_path, 8)
    cfg = TrainConfig(store=str(tmp_path), model=ModelConfig(name="tiny-llama", tiny_vocab_size=VOCAB),
                      data=DataConfig(batch_size=4, micro_batch_size=micro, max_seq_len=512),
                      algo=AlgoConfig(critic_warmup_steps=1, critic_updates=2),
                      run=RunConfig(run_id="r", progress=False))
    tr = setup(cfg)
    batches = [tr.stream.next_batch(), tr.stream.next_batch()]
    tr.stream.close()
    seen = _count_conversions(monkeypatch)
    for batch, warmup in zip(batches, (True, False)):  # one critic warm-up iteration, then a policy step
        seen.clear()
        metrics, consumed = train_step(tr, batch)
        assert ("policy/loss" in metrics) != warmup  # the kind of step the test meant
        calls = _loop_calls(seen)
        others = {k: v for k, v in seen.items() if k not in calls}
        # 4 trajectories: micro-batches of 1 run 4 passes per update, of 4 one pass; the loop's own
        # reads stay at one (log_metrics' single .tolist())
        assert sum(calls.values()) == 1, (calls, others)
        (where,) = calls
        assert where.startswith(str(Path(LOOP_DIR) / "step_stats.py")), where
    # the one read carried everything: the ratios of the consumed rows and the value-loss stats
    assert all(r["ratio_mean"] is not None for r in consumed) and "value/clip_frac" in metrics


def test_a_step_that_raises_ends_its_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 22 (a flake seen while splitting): a step that raised left its pass "running", and the
    # recorder's heartbeat thread, kept alive by the traceback, printed "... still running" lines
    # into a later test's captured stderr
    from trajstore.trainer.loop import step as step_module

    write_synthetic_store(tmp_path, 8)
    tr = setup(_cfg(tmp_path, warmup=0))
    assert tr.recorder is not None

    def broken(*a, **kw):  # noqa: ANN002, ANN003, ANN202
        tr.say("step 0: policy update, micro-batch 1/1")  # the pass announces itself, then fails
        raise RuntimeError("boom")

    monkeypatch.setattr(step_module, "_policy_update", broken)
    with pytest.raises(RuntimeError, match="boom"):
        train_step(tr, tr.stream.next_batch())
    tr.stream.close()
    assert tr.recorder._activity is None  # no pass left for the heartbeat to report
    tr.recorder.close()

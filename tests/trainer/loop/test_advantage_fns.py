"""trainer/loop/advantage_fns.py: an episode stored as several linked trajectories is credited
once. SAO's skip-observation GAE runs across a context rewrite (the last action of one
part bootstraps from the first action of the next), the reward lands on the chain's last part
only; a sub-agent child is its own terminal lineage; the baselines take one reward per chain.
Expected values written out by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trajstore.sampling import no_truncation
from trajstore.trainer.config import AlgoConfig, ModelConfig, RunConfig, TrainConfig
from trajstore.trainer.data import DataCursor, TrainSample, episode_chains, gae_inputs, join_chains, pack
from trajstore.trainer.loop.advantage_fns import sao_gae_advantages, scalar_baseline_fn
from trajstore.trainer.loop.checkpoint import TrainerState


def _sample(tid: str, mask: list[bool], reward: float, *, parent: str | None = None, link: str | None = None,
            episode: str = "e", abandoned: bool | None = None) -> TrainSample:
    t = len(mask)
    m = np.array(mask)
    return TrainSample(trajectory_id=tid, group_id=None, shard="s", row=0, tokens=np.arange(t, dtype=np.int64),
                       rollout_logprobs=np.where(m, -0.5, np.nan).astype(np.float32), action_mask=m,
                       policy_version=np.where(m, 0, -1).astype(np.int64), sampling=no_truncation(t),
                       reward=reward, needs_behaviour=False, cursor=DataCursor(), episode_id=episode,
                       parent_trajectory_id=parent, link_kind=link, fork_point=None if parent is None else 1,
                       abandoned=abandoned)


def _cfg(**algo) -> TrainConfig:
    return TrainConfig(store="unused", model=ModelConfig(name="tiny-llama"), algo=AlgoConfig(**algo),
                       run=RunConfig(run_id="r"))


# P = [prompt, a1, obs, a2]: action slots (prediction frame) at positions 0 and 2; S = [prompt,
# prompt, a]: its slot at position 1, packed at 4 + 1 = 5. Values at the slots: P 0.5 and 0.2,
# S 0.4; 9 elsewhere (never read). Both parts carry the episode's reward 1.0, as the proxy writes it.
VALUES = torch.tensor([[0.5, 9.0, 0.2, 9.0, 9.0, 0.4, 9.0]])
P_MASK, S_MASK = [False, True, False, True], [False, False, True]


def test_the_gae_chain_runs_across_a_context_rewrite_and_the_reward_is_credited_once():
    p = _sample("p", P_MASK, 1.0)
    s = _sample("s", S_MASK, 1.0, parent="p", link="context_rewrite")
    mb = pack([p, s])
    assert mb.action_mask[0].nonzero().flatten().tolist() == [0, 2, 5]
    adv, ret, lam = sao_gae_advantages(_cfg())(mb, [p, s], VALUES, {})
    # one chain of l = 3 action tokens: lambda = 1 - 1 / (1.5 * 3) = 7/9; gamma = 1; the reward
    # only at S's last action:
    #   A(5) = 1 + 0 - 0.4                       = 0.6
    #   A(2) = 0 + V(5) - V(2) + 7/9 * A(5)       = 0.4 - 0.2 + 7/9 * 0.6       = 0.6666667
    #   A(0) = 0 + V(2) - V(0) + 7/9 * A(2)       = 0.2 - 0.5 + 7/9 * 0.6666667 = 0.2185185
    # returns (lambda_critic = 1): the one reward, at every slot of the chain
    expected = [0.2185185, 0.0, 0.6666667, 0.0, 0.0, 0.6, 0.0]
    torch.testing.assert_close(adv[0], torch.tensor(expected), atol=1e-6, rtol=0)
    torch.testing.assert_close(ret[0], torch.tensor([1.0, 0, 1.0, 0, 0, 1.0, 0]), atol=1e-6, rtol=0)
    torch.testing.assert_close(lam, torch.tensor([7 / 9, 7 / 9]))


def test_a_sub_agent_child_is_its_own_terminal_lineage():
    p = _sample("p", P_MASK, 1.0)
    s = _sample("s", S_MASK, 1.0, parent="p", link="subagent")
    adv, ret, lam = sao_gae_advantages(_cfg())(pack([p, s]), [p, s], VALUES, {})
    # two rows, each credited: P (l = 2, lambda = 2/3): A(2) = 1 - 0.2 = 0.8,
    # A(0) = 0.2 - 0.5 + 2/3 * 0.8 = 0.2333333; S (l = 1, lambda = 1/3): A(5) = 1 - 0.4 = 0.6
    torch.testing.assert_close(adv[0], torch.tensor([0.2333333, 0, 0.8, 0, 0, 0.6, 0]), atol=1e-6, rtol=0)
    torch.testing.assert_close(lam, torch.tensor([2 / 3, 1 / 3]))


def test_a_chain_split_across_calls_order_does_not_matter():
    # the successor packed first: the same advantages at the same slots
    p = _sample("p", P_MASK, 1.0)
    s = _sample("s", S_MASK, 1.0, parent="p", link="continuation")
    values = torch.tensor([[9.0, 0.4, 9.0, 0.5, 9.0, 0.2, 9.0]])
    adv, _, _ = sao_gae_advantages(_cfg())(pack([s, p]), [s, p], values, {})
    torch.testing.assert_close(adv[0], torch.tensor([0, 0.6, 0, 0.2185185, 0, 0.6666667, 0]), atol=1e-6, rtol=0)


@pytest.mark.parametrize("advantage", ["running-mean", "grpo"])
def test_the_baselines_take_one_reward_per_chain(advantage):
    p = _sample("p", P_MASK, 0.0)  # a part before the rewrite carrying another reward: not counted
    s = _sample("s", S_MASK, 1.0, parent="p", link="context_rewrite")
    q = _sample("q", S_MASK, 0.0, episode="other")
    for x in (p, s, q):
        x.group_id = "g"
    state = TrainerState(0, 0, 0, None, DataCursor())
    fn = scalar_baseline_fn(_cfg(advantage=advantage, running_mean_window=8), state)
    got = fn([p, s, q], state)
    if advantage == "running-mean":  # no history yet: A = R, one reward per chain (1.0 and 0.0)
        assert got == {"p": 1.0, "s": 1.0, "q": 0.0} and state.baseline == [1.0, 0.0]
    else:  # group of 2 chains, rewards 1 and 0: normalised to +a and -a
        assert got["p"] == got["s"] > 0 > got["q"] and got["s"] == pytest.approx(-got["q"])


# Credit per link kind, as `traj proxy` stores each (tests/proxy/test_lineage.py checks the stored
# rows): every row carries the episode's reward 1.0; the chain rule and `abandoned` decide who earns it.
CREDIT_CASES = {
    # a retry from an earlier turn: the original is abandoned, the fork is what the harness finished
    "retry fork": ([("p", None, None, True), ("f", "p", "fork", False)], {"f": 1.0}),
    # the last call sent again: the first attempt is abandoned (also of the episode's first call)
    "resample": ([("p", None, None, True), ("r", "p", "fork", False)], {"r": 1.0}),
    # a resample of a resample: both earlier attempts are abandoned
    "two retries": ([("p", None, None, True), ("f", "p", "fork", True), ("g", "f", "fork", False)], {"g": 1.0}),
    # a condensed context: one chain, credited at its end
    "context rewrite": ([("p", None, None, False), ("c", "p", "context_rewrite", False)], {"c": 1.0}),
    # a sub-agent: its own terminal lineage, credited as the parent is
    "sub-agent": ([("p", None, None, False), ("s", "p", "subagent", False)], {"p": 1.0, "s": 1.0}),
    # the calls after an idle eviction continue the evicted part: one chain
    "eviction continuation": ([("p", None, None, False), ("n", "p", "continuation", False)], {"n": 1.0}),
    # rows written before `abandoned` existed (null): credited as before
    "unrecorded": ([("p", None, None, None), ("f", "p", "fork", None)], {"p": 1.0, "f": 1.0}),
}


@pytest.mark.parametrize("case", list(CREDIT_CASES))
def test_each_link_kind_is_credited_as_designed_and_abandoned_branches_earn_nothing(case):
    rows, expected = CREDIT_CASES[case]
    samples = [_sample(t, P_MASK, 1.0, parent=p, link=k, abandoned=a) for t, p, k, a in rows]
    mb = pack(samples)
    chains = episode_chains(samples)
    joined = join_chains(gae_inputs(mb, samples, torch.zeros(mb.action_mask.shape)), mb.segments, chains)
    credited = {samples[c[-1]].trajectory_id: float(r.sum()) for c, r in zip(chains, joined.inputs.rewards)}
    assert {t: r for t, r in credited.items() if r} == expected
    # the finished branch is credited once; an abandoned one's tokens still train, against a return of 0
    adv, ret, _ = sao_gae_advantages(_cfg())(mb, samples, torch.zeros(mb.action_mask.shape), {})
    for i, s in enumerate(samples):
        a, b = int(mb.segments[i]), int(mb.segments[i + 1])
        if s.abandoned:
            assert ret[0, a:b].abs().sum() == 0 and mb.action_mask[0, a:b].any()


def test_the_baselines_leave_an_abandoned_branch_out():
    p = _sample("p", P_MASK, 1.0, abandoned=True)  # the thrown-away attempt, stored with the episode's reward
    f = _sample("f", S_MASK, 1.0, parent="p", link="fork", abandoned=False)
    q = _sample("q", S_MASK, 0.0, episode="other")
    state = TrainerState(0, 0, 0, None, DataCursor())
    got = scalar_baseline_fn(_cfg(advantage="running-mean", running_mean_window=8), state)([p, f, q], state)
    assert got == {"p": 0.0, "f": 1.0, "q": 0.0} and state.baseline == [1.0, 0.0]  # one reward per episode

"""trainer/data/episodes.py: which parts of an episode the trainer joins into one chain (context
rewrite, continuation), and which it keeps apart (sub-agents, forks, parts outside the batch)."""

from __future__ import annotations

from dataclasses import dataclass

from trajstore.trainer.data.episodes import episode_chains, is_successor_of, shared_prefix_end


@dataclass
class _S:
    trajectory_id: str
    parent_trajectory_id: str | None = None
    link_kind: str | None = None


def test_rewrites_and_continuations_chain_sub_agents_and_forks_do_not():
    batch = [_S("p"), _S("sub", "p", "subagent"), _S("r", "p", "context_rewrite"), _S("q"),
             _S("c", "r", "continuation"), _S("f", "c", "fork")]
    assert episode_chains(batch) == [[0, 2, 4], [1], [3], [5]]
    assert is_successor_of(batch[2], {"p"}) and not is_successor_of(batch[1], {"p"})


def test_a_successor_before_its_part_or_outside_the_batch():
    # arrival order does not matter; a part whose parent is not in the batch starts a chain
    batch = [_S("r", "p", "context_rewrite"), _S("p"), _S("x", "gone", "continuation")]
    assert episode_chains(batch) == [[1, 0], [2]]


def test_two_successors_of_one_part_the_first_one_chains():
    batch = [_S("p"), _S("a", "p", "continuation"), _S("b", "p", "context_rewrite")]
    assert episode_chains(batch) == [[0, 1], [2]]


def test_every_index_once_even_for_a_cycle():
    batch = [_S("a", "b", "continuation"), _S("b", "a", "continuation"), _S("c")]
    chains = episode_chains(batch)
    assert sorted(i for c in chains for i in c) == [0, 1, 2]


def test_shared_prefix_end():
    assert shared_prefix_end(None, None) == 0 and shared_prefix_end("p", 0) == 0 and shared_prefix_end("p", 7) == 7

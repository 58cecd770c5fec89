"""Store -> format -> store for every format trajstore both writes and reads (ATIF, the Hugging
Face folder's Parquet): identical rows (tokens, log-probs, versions, spans with every field,
lineage, rewards, sampling), except what the format cannot carry (the README's list, checked here
to be the only difference), on a hand-built SDK store and on the shared fixtures ingested.
The proxy's store: tests/proxy/test_interchange.py."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.export import CREATED, three_turn_trajectories, write_store
from tests.helpers.interchange import NOT_CARRIED, ROUND_TRIP_FORMATS, differences, round_trip
from tests.helpers.trajectories import random_trajectory
from trajstore import SamplingParams, TrajectoryBuilder


def _every_field():
    """One trajectory with every span field set: a system prompt, sampling parameters, call and
    tool-call ids, two adjacent tool results answering two tool calls, a truncated observation, a
    call of two policy versions, a call without log-probs among calls with them, a trailing
    observation; and a fork child of it, not trainable, with a raw reward."""
    b = TrajectoryBuilder(trajectory_id="every", prompt_id="p", group_id="g", model="m", tokenizer="tok",
                          metadata={"env": "swe", "fidelity_gaps": {"tools": "not logged"}})
    b.add_prompt([1, 2, 3], role="system")
    b.add_prompt([4], role="user")
    b.add_action([10, 11, 12], [-0.0, -1e-45, -0.5], policy_version=3, policy_version_max=4,
                 finish_reason="tool_calls", call_id="resp-1", tool_call_ids=["call_a", "call_b"],
                 sampling=SamplingParams(temperature=0.7, top_p=0.9, top_k=40, min_p=0.05, max_tokens=512,
                                         extra={"seed": 7}))
    b.add_observation([20, 21], cause_id="call_a", call_id="ev-1")
    b.add_observation([22], cause_id="call_b", call_id="ev-2", truncated=True)
    b.add_action([30, 31], None, policy_version=5, finish_reason="stop", call_id="resp-2",
                 sampling={"temperature": 1.0})
    b.add_observation([40], role="user")
    b.set_reward(0.75, raw={"passed": 3, "total": 4})
    every = b.finish("truncated", created_at=CREATED)
    f = TrajectoryBuilder(trajectory_id="child", prompt_id="p", group_id="g", model="m", tokenizer="tok")
    f.add_prompt([1, 2, 3], role="system")
    f.add_action([50], [-0.25], policy_version=6, call_id="resp-3")
    f.set_reward(0.0, raw={"a": 1, "passed": True})
    child = f.finish("failed", created_at=CREATED).model_copy(update={
        "parent_trajectory_id": "every", "fork_point": 3, "link_kind": "fork", "episode_id": "every",
        "not_trainable_reason": "redacted: an action's context changed"})
    return [every, child]


@pytest.mark.parametrize("fmt", ROUND_TRIP_FORMATS)
def test_an_sdk_store_comes_back_identical(fmt, tmp_path):
    # before: through ATIF, temperature and sampling_params were lost, call ids became step numbers,
    # tool-call ids were dropped and causes rewritten, the source became "atif", the system prompt
    # became a user prompt and two adjacent tool results came back as one span
    rng = np.random.default_rng(41)
    rand = [random_trajectory(rng, trajectory_id=f"r{i}", with_logprobs=i % 3 != 0) for i in range(6)]
    store = write_store(tmp_path / "s", [*three_turn_trajectories(), *_every_field(), *rand])
    before, after = round_trip(str(store), fmt, tmp_path)
    diff = differences(before, after)
    assert set(diff) <= NOT_CARRIED[fmt], diff
    every = after["every"]
    assert every["source"] == "sdk" and every["trainable"] and every["logprob_source"] == "engine"
    assert [(s["kind"], s["role"], s["call_id"], s["cause_id"], s["tool_call_ids"], s["truncated"])
            for s in every["spans"]] == [
        ("prompt", "system", None, None, None, None), ("prompt", "user", None, None, None, None),
        ("action", "assistant", "resp-1", None, ["call_a", "call_b"], None),
        ("observation", "tool", "ev-1", "call_a", None, None), ("observation", "tool", "ev-2", "call_b", None, True),
        ("action", "assistant", "resp-2", None, None, None), ("observation", "user", None, None, None, None)]
    a1 = every["spans"][2]
    assert (a1["temperature"], a1["top_p"], a1["top_k"], a1["min_p"], a1["max_tokens"], a1["policy_version"],
            a1["policy_version_max"]) == (0.7, 0.9, 40, 0.05, 512, 3, 4)
    assert '"seed": 7' in a1["sampling_params"] and every["spans"][5]["temperature"] == 1.0
    assert np.isnan(every["action_logprobs"][3:]).all()  # the call without log-probs stays unknown
    child = after["child"]
    assert (child["trainable"], child["parent_trajectory_id"], child["fork_point"], child["link_kind"],
            child["reward_raw"]) == (False, "every", 3, "fork", '{"a": 1, "passed": true}')


@pytest.mark.parametrize("fmt", ROUND_TRIP_FORMATS)
def test_the_ingested_fixtures_come_back_identical(fmt, ingested_fixtures, tmp_path):
    before, after = round_trip(ingested_fixtures, fmt, tmp_path)
    assert len(after) == len(before) >= 60
    diff = differences(before, after)
    assert set(diff) <= NOT_CARRIED[fmt], {k: v[:3] for k, v in diff.items()}
    # the fixtures hold adjacent tool results (several observation spans between two calls)
    adjacent = [tid for tid, r in before.items()
                if any(a["kind"] == b["kind"] == "observation" for a, b in zip(r["spans"], r["spans"][1:]))]
    assert adjacent
    assert all(len(after[t]["spans"]) == len(before[t]["spans"]) for t in adjacent)

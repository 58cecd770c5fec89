"""trajstore/builder.py: TrajectoryBuilder refuses what would not validate when it is
added or finished, and never wraps or drops what it was given."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import trajstore as ts
from trajstore import TrajectoryBuilder, action_from_openai_completion
from trajstore.errors import TrajectoryValidationError


# adversarial input: a hole found attacking the store and the SDK (failed before its fix)
def test_builder_refuses_bad_sampling_at_finish() -> None:
    b = TrajectoryBuilder(trajectory_id="b1")
    b.add_prompt([1])
    b.add_action([2, 3], [-0.1, -0.2], policy_version=0, sampling={"top_k": -5, "max_tokens": -3})
    with pytest.raises(TrajectoryValidationError) as ei:
        b.finish()
    assert {v.field for v in ei.value.violations} == {"spans[1].top_k", "spans[1].max_tokens"}


@pytest.mark.parametrize("ids", [[2**40, 5], [2**32 + 5], np.array([2**63], dtype=np.uint64), [-(2**32)]])
def test_builder_refuses_ids_outside_int32_instead_of_wrapping(ids: Any) -> None:
    b = TrajectoryBuilder(trajectory_id="wrap")
    with pytest.raises(ValueError, match="must fit in int32"):
        b.add_prompt(ids)
    assert b.num_tokens == 0


# hostile tester: bad input answered by one clear line naming the file, row, field or flag
def test_numpy_rewards_are_stored_as_numbers() -> None:
    def raw(reward: Any, **kw: Any) -> str | None:
        b = ts.TrajectoryBuilder(trajectory_id="t", source="sdk")
        b.add_prompt([1, 2])
        b.add_action([3], [-0.5], policy_version=0)
        b.set_reward(reward, **kw)
        return b.finish().reward_raw

    assert raw(np.float32(1.0)) == "1.0"  # was '"1.0"', a JSON string
    assert raw(np.float32(0.1)) == "0.1"  # float32's own shortest decimal, not 0.10000000149011612
    assert raw(np.float64(0.25)) == "0.25" and raw(1.0, raw=np.int64(3)) == "3"
    assert json.loads(raw(1.0, raw={"score": np.float32(0.5), "passed": np.bool_(True),
                                    "per_test": np.array([1, 0], dtype=np.int8)})) == {
        "score": 0.5, "passed": True, "per_test": [1, 0]}


# reported: ../shared/fixtures/reported/zero-token-length-turn
def test_zero_token_length_turn_is_refused_when_added_and_the_builder_stays_usable():
    # zero-token-length-turn/repro.py: call c2 was cut at zero tokens (finish_reason=length).
    ok = {"id": "c1", "choices": [{"index": 0, "finish_reason": "tool_calls", "token_ids": [5, 6, 7],
          "message": {"role": "assistant", "content": None, "tool_calls": [{"id": "t1", "type": "function",
                      "function": {"name": "ls", "arguments": "{}"}}]},
          "logprobs": {"content": [{"token": "x", "logprob": -0.1}] * 3}}]}
    empty = {"id": "c2", "choices": [{"index": 0, "finish_reason": "length", "token_ids": [],
             "message": {"role": "assistant", "content": ""}, "logprobs": {"content": []}}]}
    b = TrajectoryBuilder(prompt_id="p")
    b.add_prompt([1, 2])
    b.add_action_call(action_from_openai_completion(ok), policy_version=4)
    b.add_observation([8, 9], cause_id="t1")
    with pytest.raises(ValueError, match=r"action call 'c2' has no tokens \(finish_reason 'length'\)"):
        b.add_action_call(action_from_openai_completion(empty), policy_version=4)
    assert b.num_tokens == 7  # nothing of c2 was added
    t = b.finish(status="truncated")
    # prompt [0, 2), action [2, 5), observation [5, 7)
    assert [(s.kind, s.start, s.end) for s in t.spans] == [("prompt", 0, 2), ("action", 2, 5), ("observation", 5, 7)]
    assert t.status == "truncated" and t.tokens.tolist() == [1, 2, 5, 6, 7, 8, 9]
    # the same family: an empty observation or prompt is refused at add time too
    b2 = TrajectoryBuilder()
    with pytest.raises(ValueError, match="observation span has no tokens"):
        b2.add_observation([])
    with pytest.raises(ValueError, match="prompt span has no tokens"):
        b2.add_prompt(np.zeros(0, np.int32))


def test_split_off_and_append_from_move_whole_spans_between_lines_of_context() -> None:
    # a line that held two agents' calls: [prompt 1 2][action 3 (v0)][obs 4][action 5 6 (v1)]
    b = TrajectoryBuilder(trajectory_id="lead", model="m")
    b.add_prompt([1, 2])
    b.add_action([3], [-0.5], policy_version=0, call_id="c0")
    b.add_observation([4], role="user")
    b.add_action([5, 6], [-0.1, -0.2], policy_version=1, call_id="c1")
    with pytest.raises(ValueError, match="span boundary"):
        b.split_off(5, "x")  # inside the second action
    sub = b.split_off(3, "sub")  # after the first action: the second call went on from there
    assert b.num_tokens == 3
    t = sub.finish()
    assert (t.trajectory_id, t.model, t.tokens.tolist()) == ("sub", "m", [1, 2, 3, 4, 5, 6])
    assert [(s.kind, s.start, s.end, s.call_id) for s in t.spans] == [("prompt", 0, 4, None),
                                                                     ("action", 4, 6, "c1")]
    assert t.action_logprobs[4:].tolist() == pytest.approx([-0.1, -0.2]) and t.logprob_source == "engine"
    other = TrajectoryBuilder(trajectory_id="other")
    other.add_prompt([1, 2, 3, 7, 8])  # shares the lead's 3 tokens, then its own
    other.add_action([9], None, policy_version=2, call_id="c2")
    b.append_from(other, role="tool", cause_id="c0")
    t = b.finish()
    assert t.tokens.tolist() == [1, 2, 3, 7, 8, 9]
    assert [(s.kind, s.start, s.end, s.role) for s in t.spans] == [
        ("prompt", 0, 2, None), ("action", 2, 3, "assistant"), ("observation", 3, 5, "tool"),
        ("action", 5, 6, "assistant")]
    wrong = TrajectoryBuilder(trajectory_id="w")
    wrong.add_prompt([1, 9, 9])
    wrong.add_action([4], None, policy_version=0)
    c = TrajectoryBuilder(trajectory_id="c")
    c.add_prompt([1, 2])
    with pytest.raises(ValueError, match="does not go on"):
        c.append_from(wrong)

"""Stores with hand-chosen contents for the export tests; each test writes its target's expected
arrays by hand from the table below (never from the exporter).

:func:`three_turn_trajectories` (arrival order t1, t2; token ids chosen so each piece is visible):

    t1  group g1, prompt p1, completed, reward 1.0, model m, tokenizer tok
        prompt      [11, 12, 13]
        action A1   [21, 22]       log-probs [-0.1, -0.2]         version 3, finish tool_calls
        observation [31]
        action A2   [41, 42, 43]   log-probs [-0.3, -0.4, -0.5]   version 4
        observation [51, 52]
        action A3   [61]           log-probs [-0.6]               version 4, finish stop
    t2  group g1, prompt p1, truncated, reward 0.5
        prompt      [14]
        action B1   [23]           log-probs [-0.7]               version 5, finish length
        observation [32]           (trailing: after the last model call)

:func:`refused_trajectories`, one reason each:

    no-lp      prompt [1], action [2, 3] without log-probs (no version), reward 1.0
    no-reward  prompt [1], action [2] lp [-0.5] version 0, no reward
    no-action  prompt [1, 2], observation [3] (nothing generated), reward 0.0
"""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np

import trajstore as ts
from trajstore import TrajectoryBuilder
from trajstore.export import ExportOptions, export_store

CREATED = datetime(2026, 11, 1, tzinfo=timezone.utc)


def three_turn_trajectories() -> list[ts.Trajectory]:
    """t1 (three model calls, observations between them) and t2 (one call, a trailing observation)."""
    b = TrajectoryBuilder(trajectory_id="t1", prompt_id="p1", group_id="g1", model="m", tokenizer="tok")
    b.add_prompt([11, 12, 13])
    b.add_action([21, 22], [-0.1, -0.2], policy_version=3, finish_reason="tool_calls", call_id="c1")
    b.add_observation([31], cause_id="c1")
    b.add_action([41, 42, 43], [-0.3, -0.4, -0.5], policy_version=4, call_id="c2")
    b.add_observation([51, 52], cause_id="c2")
    b.add_action([61], [-0.6], policy_version=4, finish_reason="stop", call_id="c3")
    b.set_reward(1.0)
    t1 = b.finish(created_at=CREATED)
    b = TrajectoryBuilder(trajectory_id="t2", prompt_id="p1", group_id="g1", model="m", tokenizer="tok")
    b.add_prompt([14])
    b.add_action([23], [-0.7], policy_version=5, finish_reason="length")
    b.add_observation([32])
    b.set_reward(0.5)
    t2 = b.finish("truncated", created_at=CREATED)
    return [t1, t2]


def refused_trajectories() -> list[ts.Trajectory]:
    """no-lp, no-reward, no-action (see the module docstring)."""
    b = TrajectoryBuilder(trajectory_id="no-lp", tokenizer="tok")
    b.add_prompt([1])
    b.add_action([2, 3], None, policy_version=None)
    b.set_reward(1.0)
    no_lp = b.finish(created_at=CREATED).model_copy(update={"token_source": "retokenized"})
    b = TrajectoryBuilder(trajectory_id="no-reward", tokenizer="tok")
    b.add_prompt([1])
    b.add_action([2], [-0.5], policy_version=0)
    no_reward = b.finish(created_at=CREATED)
    b = TrajectoryBuilder(trajectory_id="no-action", tokenizer="tok")
    b.add_prompt([1, 2])
    b.add_observation([3])
    b.set_reward(0.0)
    no_action = b.finish(created_at=CREATED)
    return [no_lp, no_reward, no_action]


def write_store(path, trajectories: list[ts.Trajectory]) -> str:
    """Write `trajectories` as one shard (arrival order = list order); return the store path."""
    ts.write_trajectories(str(path), trajectories)
    return str(path)


ROOT_LINEAGE = {"episode_id": ["t1", "t2"], "parent_trajectory_id": [None, None], "fork_point": [None, None],
                "link_kind": [None, None], "abandoned": [None, None]}
"""The lineage columns every layout carries for the two root trajectories of the fixture (each its
own episode, no parent)."""


UNCHECKED = ExportOptions(allow_secrets=True)
"""Options of the exports whose tests are about something else than the secret check: the tokenizer
of these fixtures ("tok", and tests/helpers/stores.py's) cannot be loaded, so `traj redact --dry-run`
cannot scan their spans and `traj export` refuses them without --allow-secrets
(tests/export/test_secrets.py tests the check)."""


RESPONSE_LOGPROBS = [[np.float32(v) for v in (-0.1, -0.2, 0.0, -0.3, -0.4, -0.5, 0.0, 0.0, -0.6)], [np.float32(-0.7)]]
"""The engine's log-prob of each response token of t1 and t2, unpadded, 0.0 on observations (float32 values)."""


def response_window(*, prompt: str, response: str, mask: str, logprobs: str) -> dict[str, list]:
    """The unpadded response window of t1 and t2 under a target's own column names: the prompt
    tokens, the response tokens (actions and the observations between them; t2's trailing
    observation dropped), the loss mask (1 = action token) and :data:`RESPONSE_LOGPROBS`."""
    return {prompt: [[11, 12, 13], [14]], response: [[21, 22, 31, 41, 42, 43, 51, 52, 61], [23]],
            mask: [[1, 1, 0, 1, 1, 1, 0, 0, 1], [1]], logprobs: RESPONSE_LOGPROBS}


def assert_tensors(tensors, dtype, **expected) -> None:
    """Each named array of `tensors` equals its expected values and has `dtype`."""
    for name, values in expected.items():
        assert tensors[name].dtype == dtype, name
        np.testing.assert_array_equal(tensors[name], np.array(values, dtype), err_msg=name)


def export_as_torch(store: str, out, target: str) -> dict:
    """Export `store` to `target` in `out`; its first part's safetensors as torch tensors (the
    framework checks: torch and safetensors are installed where these run)."""
    from safetensors.torch import load_file

    export_store(store, target, str(out), UNCHECKED)
    return load_file(str(out / "part-00000.safetensors"))


def single_rows(tensors: dict) -> list[dict]:
    """The two one-row batches t1 and t2 would be on their own: each (B, L) tensor cut to the row and
    its real length (12 and 2 tokens), each (B,) tensor to the row."""
    return [{k: v[i:i + 1, :n] if v.ndim == 2 else v[i:i + 1] for k, v in tensors.items()} for i, n in ((0, 12), (1, 2))]

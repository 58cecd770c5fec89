"""TRL: what a ``GRPOTrainer`` ``rollout_func`` returns (``prompt_ids``, ``completion_ids``,
``logprobs``, ``env_mask``, plus extra fields handed to the reward functions), one Parquet row per
trajectory, so that a ``rollout_func`` can serve stored trajectories to the trainer.

Layout checked against TRL 1.16.0 (PyPI; github huggingface/trl commit f2cd577):
``trl/trainer/grpo_trainer.py`` (``RolloutFunc``; ``_generate``: the required keys, ``env_mask`` 1 =
model token, 0 = environment token; ``_generate_and_score_completions``: prompts left-padded,
completions and log-probs right-padded with 0.0 by the trainer itself).
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

from trajstore.export.samples import Sample, held_window_columns, lineage_arrays, response_window_lists
from trajstore.export.target import Part, trainer_target, write_table_part

FIELDS: Final[dict[str, str]] = {"logprobs": "logprobs", "rewards": "reward"}
"""TRL's name of each field it holds (its optional columns, in this order)."""


def trl_rollouts(samples: list[Sample], *, holds: frozenset[str]) -> pa.Table:
    """The ``rollout_func`` output of `samples`, one row per trajectory (R = its completion length).

    Columns: ``prompt_ids`` (list<int32>), ``completion_ids`` (list<int32>, R long: the actions and
    the observations between them), ``env_mask`` (list<int32>, R long, 1 = model token, 0 =
    environment token), ``trajectory_id``; with ``logprobs`` held ``logprobs`` (list<float32>, R
    long, the engine's log-prob of each model token, 0.0 on environment tokens); with ``rewards``
    held ``reward`` (float64; an extra field, which the trainer hands to every reward function as
    a keyword argument). TRL's ``rollout_func`` carries no policy version.
    """
    window = response_window_lists(samples)
    cols: dict[str, pa.Array] = {
        "prompt_ids": window["prompt"], "completion_ids": window["response"], "env_mask": window["mask"],
        "trajectory_id": pa.array([s.trajectory_id for s in samples], pa.string()),
    }
    cols.update(held_window_columns(samples, window, holds=holds, names=FIELDS))
    cols.update(lineage_arrays(samples))
    return pa.table(cols)


def write_part(part: Part) -> list[str]:
    return write_table_part(part, trl_rollouts(part.samples, holds=part.holds))


LOADER = """\
import pyarrow.parquet as pq
rows = pq.read_table("DIR/part-00000.parquet").to_pydict()
def rollout_func(prompts, trainer):  # serve the stored rollouts in order, len(prompts) at a time
    n = len(prompts); out = {k: v[:n] for k, v in rows.items()}; [v.__delitem__(slice(0, n)) for v in rows.values()]
    return out
trainer = GRPOTrainer(..., rollout_func=rollout_func, reward_funcs=[lambda completions, reward, **kw: reward])"""

TARGET = trainer_target(
    name="trl", description="TRL GRPOTrainer rollout_func output (Parquet, one row per trajectory)",
    fields=FIELDS,
    alignment="response window, unpadded: completion_ids, env_mask and logprobs equally long (0 / 0.0 on "
              "environment tokens); TRL pads them itself",
    checked_against="TRL 1.16.0 (github huggingface/trl@f2cd577): trl/trainer/grpo_trainer.py",
    write=write_part, loader=LOADER)

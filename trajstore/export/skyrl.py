"""SkyRL: the lists of a ``GeneratorOutput`` (``skyrl.train.generators.base``), one Parquet row per
trajectory, with the scheduling step the fully-async trainer keeps beside each group.

Layout checked against github NovaSky-AI/SkyRL commit a956457 (the same files in skyrl 0.3.0 on
PyPI): ``skyrl/train/generators/base.py`` (``GeneratorOutput``, ``TrajectoryID``),
``skyrl/train/generators/skyrl_gym_generator.py`` (``TurnOutput``: observation tokens get loss
mask 0 and log-prob 0.0), ``skyrl/train/fully_async_trainer.py``
(``GeneratedOutputGroup.global_step_when_scheduled``) and ``skyrl/train/dataset/preprocess.py``
(``convert_prompts_responses_to_batch_tensors``, which pads these lists for training).
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

from trajstore.export.samples import Sample, held_window_columns, lineage_arrays, response_window_lists
from trajstore.export.target import Part, trainer_target, write_table_part

FIELDS: Final[dict[str, str]] = {"rewards": "rewards", "logprobs": "rollout_logprobs", "versions": "global_step_when_scheduled"}
"""SkyRL's name of each field it holds (its optional columns, in this order)."""


def skyrl_output(samples: list[Sample], *, holds: frozenset[str]) -> pa.Table:
    """The ``GeneratorOutput`` lists of `samples`, one row per trajectory (R = its response length).

    Columns: ``prompt_token_ids`` (list<int32>), ``response_ids`` (list<int32>, R long: actions and
    the observations between them), ``loss_masks`` (list<int32>, R long, 1 = action token),
    ``stop_reasons`` (the last model call's finish reason, null when not logged),
    ``instance_id`` / ``repetition_id`` (``TrajectoryID``: the prompt id, else the trajectory id,
    and the trajectory's rank among the export's trajectories of that instance in this file),
    ``trajectory_id``; with ``rewards`` held ``rewards`` (float64, one per trajectory); with
    ``logprobs`` held ``rollout_logprobs`` (list<float32>, R long, 0.0 where loss_masks is 0); with
    ``versions`` held ``global_step_when_scheduled`` (the oldest policy version of the
    trajectory's calls: the step its generation started at); then the lineage columns.
    """
    seen: dict[str, int] = {}
    reps = []
    for s in samples:
        key = s.prompt_id or s.trajectory_id
        reps.append(seen.get(key, 0))
        seen[key] = reps[-1] + 1
    window = response_window_lists(samples)
    cols: dict[str, pa.Array] = {
        "prompt_token_ids": window["prompt"], "response_ids": window["response"], "loss_masks": window["mask"],
        "stop_reasons": pa.array([s.calls[-1].finish_reason for s in samples], pa.string()),
        "instance_id": pa.array([s.prompt_id or s.trajectory_id for s in samples], pa.string()),
        "repetition_id": pa.array(reps, pa.int64()),
        "trajectory_id": pa.array([s.trajectory_id for s in samples], pa.string()),
    }
    cols.update(held_window_columns(samples, window, holds=holds, names=FIELDS))
    if "versions" in holds:
        cols[FIELDS["versions"]] = pa.array([s.min_version for s in samples], pa.int64())
    cols.update(lineage_arrays(samples))
    return pa.table(cols)


def write_part(part: Part) -> list[str]:
    return write_table_part(part, skyrl_output(part.samples, holds=part.holds))


LOADER = """\
import pyarrow.parquet as pq
from skyrl.train.dataset.preprocess import convert_prompts_responses_to_batch_tensors
out = pq.read_table("DIR/part-00000.parquet").to_pydict()  # GeneratorOutput keys, one list entry per trajectory
rewards = [[0.0] * (len(r) - 1) + [x] for r, x in zip(out["response_ids"], out["rewards"])]  # on the last token
tensors = convert_prompts_responses_to_batch_tensors(tokenizer, out["prompt_token_ids"], out["response_ids"], rewards,
                                                     out["loss_masks"], out["rollout_logprobs"])  # tokenizer: 0.3.0"""

TARGET = trainer_target(
    name="skyrl", description="SkyRL GeneratorOutput lists (Parquet, one row per trajectory)",
    fields=FIELDS,
    alignment="response window, unpadded: response_ids, loss_masks and rollout_logprobs equally long "
              "(0 / 0.0 on observation tokens); one reward per trajectory",
    checked_against="SkyRL github NovaSky-AI/SkyRL@a956457 / skyrl 0.3.0: skyrl/train/generators/base.py, "
                    "skyrl_gym_generator.py, fully_async_trainer.py, dataset/preprocess.py",
    write=write_part, loader=LOADER)

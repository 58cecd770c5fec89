"""ATIF: one ``trajectory.json`` per trajectory (Agent Trajectory Interchange Format, Harbor), laid
out as Harbor trials (``<trajectory_id>/agent/trajectory.json`` and, with a reward,
``<trajectory_id>/verifier/reward.txt``), keeping the engine's token ids and log-probs in each agent
step's ``metrics`` so that ``traj ingest DIR`` gives the same tokens, log-probs and versions back.

Fields checked against the ATIF RFC (harbor docs/rfcs/0001-trajectory-format.md, v1.4, mirrored in
github OpenAgentsInc/openagents docs/atif/0001-trajectory-format.md at d39efb6): ``metrics``
``prompt_token_ids`` (v1.4: every token sent to the model in that step, history included),
``completion_token_ids`` (v1.3) and ``logprobs`` (aligned with them); ``extra`` objects at the
root and on every step for what the format has no field for (trajstore's ids, tokenizer, status,
policy versions, trainability, lineage, metadata with its fidelity flags). The store keeps token
ids, not text: ``message`` is empty (the format allows it); decode with the tokenizer named in
``extra.trajstore.tokenizer``.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Final

import numpy as np

from trajstore import __version__
from trajstore.export.files import write_json, write_text
from trajstore.export.samples import CARRIED_LINEAGE, metadata_of, rows_of
from trajstore.export.target import Part, Target
from trajstore.schema import ACTION_LOGPROBS_COLUMN

ATIF_VERSION: Final[str] = "ATIF-v1.4"
"""The ATIF version written: the first that defines every metrics field used (prompt_token_ids)."""

TRAJECTORY_FILE: Final[str] = os.path.join("agent", "trajectory.json")
REWARD_FILE: Final[str] = os.path.join("verifier", "reward.txt")
"""Where a Harbor trial keeps the trajectory and the verifier's score (what ``traj ingest`` reads)."""

EXTRA_KEY: Final[str] = "trajstore"
"""The key of trajstore's own values in the ATIF ``extra`` objects."""


def atif_document(row: dict[str, Any]) -> dict[str, Any]:
    """The ATIF trajectory of one stored row (:func:`~trajstore.export.samples.rows_of`).

    One agent step per action span, in order: ``metrics.prompt_token_ids`` = every token before
    the span (so each step's prompt extends the previous prompt + completion by the observation
    tokens between them), ``completion_token_ids`` = the span's tokens, ``logprobs`` = their engine
    log-probs (null where unknown; absent when the trajectory has none), ``extra.trajstore`` =
    the span's ``policy_version`` / ``policy_version_max`` / ``finish_reason`` / ``call_id``.
    Observation tokens after the last action span reached no model call, so no step's prompt holds
    them: they are kept in the root ``extra.trajstore.trailing_observation_token_ids``. The root
    ``extra.trajstore`` also keeps the stored row's other fields (ids, group, tokenizer, status,
    reward and raw reward, time, token and log-prob sources, ``trainable`` and its reason, the
    metadata with its ``fidelity_gaps``, the lineage columns), which ``traj ingest`` puts back
    (:func:`trajstore.ingest.formats.atif.parse_trajectory`).
    """
    tokens = np.asarray(row["tokens"], np.int64)
    lps = np.asarray(row[ACTION_LOGPROBS_COLUMN], np.float64)
    with_lp = row["logprob_source"] == "engine"
    steps, last_end = [], 0
    for s in sorted((s for s in row["spans"] if s["kind"] == "action"), key=lambda s: s["start"]):
        a, b, lo = s["start"], s["end"], s["logprob_start"]
        metrics: dict[str, Any] = {"prompt_tokens": a, "completion_tokens": b - a,
                                   "prompt_token_ids": tokens[:a].tolist(), "completion_token_ids": tokens[a:b].tolist()}
        if with_lp:
            metrics["logprobs"] = [None if math.isnan(x) else x for x in lps[lo:lo + b - a].tolist()]
        extra = {k: s.get(k) for k in ("policy_version", "policy_version_max", "finish_reason", "call_id")
                 if s.get(k) is not None}
        step: dict[str, Any] = {"step_id": len(steps) + 1, "source": "agent", "message": "", "metrics": metrics,
                                "extra": {EXTRA_KEY: extra}}
        if row.get("model"):
            step["model_name"] = row["model"]
        steps.append(step)
        last_end = b
    root_extra = {
        "trajectory_id": row["trajectory_id"], "prompt_id": row.get("prompt_id"), "group_id": row.get("group_id"),
        "source": row["source"], "tokenizer": row.get("tokenizer"), "status": row["status"],
        "created_at": row["created_at"].isoformat() if row.get("created_at") else None,
        "reward": row.get("reward"), "reward_raw": row.get("reward_raw"), "token_source": row["token_source"],
        "logprob_source": row["logprob_source"], "trainable": row["trainable"],
        "not_trainable_reason": row.get("not_trainable_reason"), "metadata": metadata_of(row),
        **{c: row.get(c) for c in CARRIED_LINEAGE}}
    if last_end < len(tokens):
        root_extra["trailing_observation_token_ids"] = tokens[last_end:].tolist()
    doc: dict[str, Any] = {
        "schema_version": ATIF_VERSION, "session_id": row["trajectory_id"],
        "agent": {"name": row["source"], "version": __version__, **({"model_name": row["model"]} if row.get("model")
                                                                   else {})},
        "steps": steps,
        "final_metrics": {"total_prompt_tokens": sum(s["metrics"]["prompt_tokens"] for s in steps),
                          "total_completion_tokens": sum(s["metrics"]["completion_tokens"] for s in steps),
                          "total_steps": len(steps)},
        "extra": {EXTRA_KEY: root_extra},
    }
    return doc


def write_part(part: Part) -> list[str]:
    written = []
    for row in rows_of(part.rows):
        trial = row["trajectory_id"]
        written.append(write_json(part.out_dir, os.path.join(trial, TRAJECTORY_FILE), atif_document(row)))
        if row.get("reward") is not None:
            written.append(write_text(part.out_dir, os.path.join(trial, REWARD_FILE), json.dumps(row["reward"]) + "\n"))
    return written


TARGET = Target(
    name="atif", description="ATIF trajectory.json per trajectory, Harbor trial layout, token ids and log-probs kept",
    fields={},  # log-probs and versions are written when known (null / absent otherwise): nothing to refuse
    required=frozenset(),
    alignment="one agent step per action span: metrics.prompt_token_ids = every token before it, "
              "completion_token_ids = its tokens, logprobs aligned with them (null = unknown)",
    checked_against="ATIF RFC v1.4 (harbor docs/rfcs/0001-trajectory-format.md)",
    uses_samples=True,  # a trajectory without an action span has no agent step to hold its tokens: refused
    write=write_part, loader="traj ingest DIR --store STORE")

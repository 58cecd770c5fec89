"""ATIF: one ``trajectory.json`` per trajectory (Agent Trajectory Interchange Format, Harbor), laid
out as Harbor trials (``<trajectory_id>/agent/trajectory.json`` and, with a reward,
``<trajectory_id>/verifier/reward.txt``), keeping the engine's token ids and log-probs in each agent
step's ``metrics`` and every stored field of the row and its spans in ``extra``, so that ``traj ingest DIR``
gives the same row back (only metadata ``ingest`` names the file read then).

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
from datetime import datetime
from typing import Any, Final

import numpy as np

from trajstore import __version__
from trajstore.export.files import write_json, write_text
from trajstore.export.samples import CARRIED_LINEAGE, metadata_of, rows_of
from trajstore.export.target import Part, Target
from trajstore.schema import ACTION_LOGPROBS_COLUMN, DERIVED_SPAN_FIELDS, SPAN_FIELDS

ATIF_VERSION: Final[str] = "ATIF-v1.4"
"""The ATIF version written: the first that defines every metrics field used (prompt_token_ids)."""

TRAJECTORY_FILE: Final[str] = os.path.join("agent", "trajectory.json")
REWARD_FILE: Final[str] = os.path.join("verifier", "reward.txt")
"""Where a Harbor trial keeps the trajectory and the verifier's score (what ``traj ingest`` reads)."""

EXTRA_KEY: Final[str] = "trajstore"
"""The key of trajstore's own values in the ATIF ``extra`` objects."""

KEPT_SPAN_FIELDS: Final[tuple[str, ...]] = tuple(f.name for f, _ in SPAN_FIELDS if f.name not in DERIVED_SPAN_FIELDS)
"""The stored span fields the root ``extra.trajstore.spans`` keeps (the derived ones are recomputed
by the writer): boundaries, roles, call and tool-call ids, causes, sampling, truncation, versions."""

STEP_FIELDS: Final[tuple[str, ...]] = (
    "policy_version", "policy_version_max", "finish_reason", "call_id", "tool_call_ids", "temperature", "top_p",
    "top_k", "min_p", "max_tokens", "sampling_params")
"""The action span's fields repeated in its agent step's ``extra.trajstore`` (read by a reader of
one step without the root's span list)."""


def _span_record(s: dict[str, Any]) -> dict[str, Any]:
    """A stored span as the root ``extra.trajstore.spans`` keeps it: its non-null kept fields (call
    times as ISO 8601 strings)."""
    return {k: s[k].isoformat() if isinstance(s[k], datetime) else s[k]
            for k in KEPT_SPAN_FIELDS if s.get(k) is not None}


def atif_document(row: dict[str, Any]) -> dict[str, Any]:
    """The ATIF trajectory of one stored row (:func:`~trajstore.export.samples.rows_of`).

    A first step of source ``system`` or ``user`` (empty message): the role of the prompt, in
    ATIF's own field. Then one agent step per action span, in order: ``metrics.prompt_token_ids`` =
    every token before the span (so each step's prompt extends the previous prompt + completion by
    the observation tokens between them), ``completion_token_ids`` = the span's tokens,
    ``logprobs`` = their engine log-probs (null where unknown; absent when the trajectory has
    none), ``extra.trajstore`` = the span's :data:`STEP_FIELDS` that are set (versions, finish
    reason, call and tool-call ids, sampling parameters).
    Observation tokens after the last action span reached no model call, so no step's prompt holds
    them: they are kept in the root ``extra.trajstore.trailing_observation_token_ids``. The root
    ``extra.trajstore`` also keeps the stored row's other fields (ids, group, tokenizer, status,
    reward and raw reward, time, token and log-prob sources, ``trainable`` and its reason, the
    metadata with its ``fidelity_gaps``, the lineage columns) and ``spans``: every stored span with
    its :data:`KEPT_SPAN_FIELDS` (boundaries, roles, ids, causes, sampling, truncation), so that
    two adjacent observations stay two spans. ``traj ingest`` puts all of it back
    (:func:`trajstore.ingest.formats.atif.parse_trajectory`).
    """
    tokens = np.asarray(row["tokens"], np.int64)
    lps = np.asarray(row[ACTION_LOGPROBS_COLUMN], np.float64)
    with_lp = row["logprob_source"] == "engine"
    spans = row["spans"]
    first = min(spans, key=lambda s: s["start"]) if spans else {}
    steps: list[dict[str, Any]] = [{"step_id": 1, "source": "system" if first.get("role") == "system" else "user",
                                    "message": ""}]  # the prompt's role, in ATIF's own field
    last_end = 0
    for s in sorted((s for s in row["spans"] if s["kind"] == "action"), key=lambda s: s["start"]):
        a, b, lo = s["start"], s["end"], s["logprob_start"]
        metrics: dict[str, Any] = {"prompt_tokens": a, "completion_tokens": b - a,
                                   "prompt_token_ids": tokens[:a].tolist(), "completion_token_ids": tokens[a:b].tolist()}
        if with_lp:
            metrics["logprobs"] = [None if math.isnan(x) else x for x in lps[lo:lo + b - a].tolist()]
        extra = {k: s[k] for k in STEP_FIELDS if s.get(k) is not None}
        step: dict[str, Any] = {"step_id": len(steps) + 1, "source": "agent", "message": "", "metrics": metrics,
                                "extra": {EXTRA_KEY: extra}}
        if row.get("model"):
            step["model_name"] = row["model"]
        steps.append(step)
        last_end = b
    agents = steps[1:]
    root_extra = {
        "trajectory_id": row["trajectory_id"], "prompt_id": row.get("prompt_id"), "group_id": row.get("group_id"),
        "source": row["source"], "tokenizer": row.get("tokenizer"), "status": row["status"],
        "created_at": row["created_at"].isoformat() if row.get("created_at") else None,
        "reward": row.get("reward"), "reward_raw": row.get("reward_raw"), "token_source": row["token_source"],
        "logprob_source": row["logprob_source"], "trainable": row["trainable"],
        "not_trainable_reason": row.get("not_trainable_reason"), "metadata": metadata_of(row),
        **{c: row.get(c) for c in CARRIED_LINEAGE},
        "spans": [_span_record(s) for s in spans]}
    if last_end < len(tokens):
        root_extra["trailing_observation_token_ids"] = tokens[last_end:].tolist()
    doc: dict[str, Any] = {
        "schema_version": ATIF_VERSION, "session_id": row["trajectory_id"],
        "agent": {"name": row["source"], "version": __version__, **({"model_name": row["model"]} if row.get("model")
                                                                   else {})},
        "steps": steps,
        "final_metrics": {"total_prompt_tokens": sum(s["metrics"]["prompt_tokens"] for s in agents),
                          "total_completion_tokens": sum(s["metrics"]["completion_tokens"] for s in agents),
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
    write=write_part, loader="traj ingest STORE DIR")

"""What ``traj export --to atif`` keeps in an ATIF file beside the token ids (``extra.trajstore``
of the root and of each agent step: policy versions, finish reasons, the stored row's id, lineage,
trainability and metadata), put back when the file is ingested again, so that a round trip
stores the same row.
"""

from __future__ import annotations

import json
from typing import Any

from trajstore.ingest.records import EngineRollout, EngineSegment, ExportedFields
from trajstore.ingest.values import parse_time

EXPORT_EXTRA_KEY = "trajstore"
"""Key of the values ``traj export --to atif`` keeps in ATIF ``extra`` objects (trajstore.export.atif)."""


def exported_fields(d: dict[str, Any], agents: list[dict[str, Any]], rollout: EngineRollout, *,
                    whole: bool) -> EngineRollout:
    """What a trajstore ATIF export kept beside the token ids, put back on `rollout` (in place), from
    the document `d` and its agent steps `agents` (in order):
    each agent step's ``extra.trajstore.policy_version`` / ``policy_version_max`` and
    ``finish_reason`` on its action segment, the root ``extra.trajstore`` tokenizer and status,
    and the token ids of an observation after the last step (``trailing_observation_token_ids``,
    checked with the other ids when the rollout is built). When `rollout` is the `whole` document,
    also the stored row's other fields: its id, group, lineage, trainability, token and log-prob
    sources (``rollout.exported``), prompt id, time, raw reward, and its metadata under this
    ingest's own keys, ``fidelity_gaps`` included. Other ATIF logs have none of these: their
    metadata says ``policy_version_known: false``, as before."""
    root = d.get("extra") if isinstance(d.get("extra"), dict) else {}
    ours = root.get(EXPORT_EXTRA_KEY) if isinstance(root.get(EXPORT_EXTRA_KEY), dict) else {}
    if isinstance(ours.get("tokenizer"), str):
        rollout.tokenizer = ours["tokenizer"]
    if ours.get("status") in ("completed", "truncated", "aborted", "failed"):
        rollout.status = ours["status"]
    if whole and isinstance(ours.get("trajectory_id"), str):
        _stored_row(ours, rollout)
    actions = [seg for seg in rollout.segments if seg.kind == "action"]
    for step, seg in zip(agents, actions):
        extra = step.get("extra") if isinstance(step.get("extra"), dict) else {}
        kept = extra.get(EXPORT_EXTRA_KEY) if isinstance(extra.get(EXPORT_EXTRA_KEY), dict) else {}
        for name in ("policy_version", "policy_version_max"):
            v = kept.get(name)
            if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                setattr(seg, name, v)
        if isinstance(kept.get("finish_reason"), str):
            seg.finish_reason = kept["finish_reason"]
    if any(seg.policy_version is None for seg in actions):
        rollout.metadata["policy_version_known"] = False
    tail = ours.get("trailing_observation_token_ids")
    if isinstance(tail, list) and tail and actions:
        last = actions[-1]
        rollout.segments.append(EngineSegment("observation", list(tail), role="tool",
                                              cause_id=(last.tool_call_ids or [last.call_id])[0]))
        rollout.metadata.pop("last_observation", None)
    return rollout


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _stored_row(ours: dict[str, Any], rollout: EngineRollout) -> None:
    """The stored row's fields a trajstore ATIF export kept in the root ``extra.trajstore`` (see
    :func:`_exported_fields`), put back on `rollout`; a value of the wrong type is left out (the
    row is then built as from any engine log, and the trajectory's own checks still apply)."""
    fork = ours.get("fork_point")
    trainable = ours.get("trainable")
    rollout.exported = ExportedFields(
        trajectory_id=ours["trajectory_id"], group_id=_text(ours.get("group_id")),
        episode_id=_text(ours.get("episode_id")), parent_trajectory_id=_text(ours.get("parent_trajectory_id")),
        fork_point=fork if isinstance(fork, int) and not isinstance(fork, bool) else None,
        link_kind=_text(ours.get("link_kind")), trainable=trainable if isinstance(trainable, bool) else None,
        not_trainable_reason=_text(ours.get("not_trainable_reason")),
        token_source="retokenized" if ours.get("token_source") == "retokenized" else "engine",
        logprob_source="none" if ours.get("logprob_source") == "none" else "engine")
    rollout.prompt_id = _text(ours.get("prompt_id"))
    rollout.created_at = parse_time(ours.get("created_at")) or rollout.created_at
    raw = _text(ours.get("reward_raw"))
    if raw is not None and rollout.reward.error is None:
        try:
            rollout.reward.raw = json.loads(raw)
        except ValueError:
            pass  # not JSON: the reward file's value stands
    stored = ours.get("metadata") if isinstance(ours.get("metadata"), dict) else {}
    gaps = stored.get("fidelity_gaps") if isinstance(stored.get("fidelity_gaps"), dict) else {}
    rollout.fidelity_gaps = {**{k: str(v) for k, v in gaps.items()}, **rollout.fidelity_gaps}
    rollout.metadata = {**{k: v for k, v in stored.items() if k != "fidelity_gaps"}, **rollout.metadata}

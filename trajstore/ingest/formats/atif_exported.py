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
from trajstore.models import CallTiming, CallUsage
from trajstore.schema import CALL_TIMING_FIELDS

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
    sources (``rollout.exported``), prompt id, time, raw reward, its metadata as stored (``fidelity_gaps``
    included; only ``ingest`` names the file read now, as for any ingest) and its spans (:func:`_stored_spans`). Other ATIF logs have none of these: their
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
    if rollout.exported is None and any(seg.policy_version is None for seg in actions):
        rollout.metadata["policy_version_known"] = False  # a restored row's metadata says what it said
    tail = ours.get("trailing_observation_token_ids")
    if isinstance(tail, list) and tail and actions:
        last = actions[-1]
        rollout.segments.append(EngineSegment("observation", list(tail), role="tool",
                                              cause_id=(last.tool_call_ids or [last.call_id])[0]))
        rollout.metadata.pop("last_observation", None)
    if whole and isinstance(ours.get("spans"), list):
        _stored_spans(ours["spans"], rollout)
    return rollout


_SPAN_TYPES: dict[str, tuple[type, ...]] = {
    "role": (str,), "call_id": (str,), "cause_id": (str,), "finish_reason": (str,), "sampling_params": (str,),
    "temperature": (int, float), "top_p": (int, float), "min_p": (int, float), "top_k": (int,), "max_tokens": (int,),
    "policy_version": (int,), "policy_version_max": (int,), "truncated": (bool,), "tool_call_ids": (list,),
    "logprob_mode": (str,)}
"""The span fields the root ``extra.trajstore.spans`` may hold, with their JSON types."""


def _stored_spans(spans: list[Any], rollout: EngineRollout) -> None:
    """The stored spans a trajstore ATIF export kept in the root ``extra.trajstore.spans``, put
    back on `rollout` (in place): its segments are re-cut at the stored boundaries with each span's
    fields (role, call and tool-call ids, cause, sampling, truncation, versions), so that two
    adjacent observations stay two spans and the prompt keeps its role. The token ids and log-probs
    stay those the steps' metrics gave. When the list does not cover those token ids exactly, or its
    action spans are not the steps' completions, the segments the steps gave stand and metadata
    ``exported_spans_ignored`` says why (a document edited after the export)."""
    tokens = [t for seg in rollout.segments for t in seg.token_ids]
    acts = [seg for seg in rollout.segments if seg.kind == "action"]
    why = _spans_mismatch(spans, tokens, acts)
    if why:
        rollout.metadata["exported_spans_ignored"] = why
        return
    segs, k = [], 0
    for sp in spans:
        kind, a, b = sp["kind"], sp["start"], sp["end"]
        fields = {f: sp[f] for f, types in _SPAN_TYPES.items() if isinstance(sp.get(f), types)
                  and (f == "truncated" or not isinstance(sp[f], bool))}
        if kind == "action":
            act, k = acts[k], k + 1
            segs.append(EngineSegment("action", act.token_ids, act.logprobs, **fields, usage=_usage(sp),
                                      timing=_timing(sp)))
        else:
            segs.append(EngineSegment(kind, tokens[a:b], **fields))
    rollout.segments = segs


def _usage(sp: dict[str, Any]) -> CallUsage | None:
    """The engine's usage counts a stored span kept (None when it kept none: the row had none)."""
    got = {f: sp[f"usage_{f}"] for f in ("prompt_tokens", "completion_tokens", "cached_tokens")
           if isinstance(sp.get(f"usage_{f}"), int) and not isinstance(sp.get(f"usage_{f}"), bool)}
    return CallUsage(**got) if got else None


def _timing(sp: dict[str, Any]) -> CallTiming | None:
    """The call times a stored span kept (ISO 8601 strings), None when it kept none."""
    got = {f: parse_time(sp.get(f)) for f in CALL_TIMING_FIELDS if isinstance(sp.get(f), str)}
    got = {f: t for f, t in got.items() if t is not None}
    return CallTiming(**got) if got else None


def _spans_mismatch(spans: list[Any], tokens: list[int], acts: list[EngineSegment]) -> str | None:
    """Why the exported `spans` cannot be the stored spans of these `tokens` and action segments, or None."""
    pos, k = 0, 0
    for n, sp in enumerate(spans):
        ok = isinstance(sp, dict) and sp.get("kind") in ("prompt", "action", "observation") and all(
            isinstance(sp.get(f), int) and not isinstance(sp.get(f), bool) for f in ("start", "end"))
        if not ok or sp["start"] != pos or sp["end"] <= pos:
            return f"span {n} is not the next contiguous span (kind, start, end) of the token ids"
        if sp["kind"] == "action":
            if k >= len(acts) or len(acts[k].token_ids) != sp["end"] - sp["start"]:
                return f"span {n} is not the agent step's completion it stands for"
            k += 1
        pos = sp["end"]
    if pos != len(tokens) or k != len(acts):
        return f"the spans cover {pos} of {len(tokens)} token ids and {k} of {len(acts)} agent steps"
    return None


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
        link_kind=_text(ours.get("link_kind")), abandoned=ours["abandoned"] if isinstance(ours.get("abandoned"), bool)
        else None, trainable=trainable if isinstance(trainable, bool) else None,
        not_trainable_reason=_text(ours.get("not_trainable_reason")),
        token_source="retokenized" if ours.get("token_source") == "retokenized" else "engine",
        logprob_source="none" if ours.get("logprob_source") == "none" else "engine",
        source=_text(ours.get("source")))
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
    # the stored row's, not what this reader derives from the export file (its schema version,
    # session id, status evidence describe the export, not the rollout)
    rollout.fidelity_gaps = {k: str(v) for k, v in gaps.items()}
    rollout.metadata = {k: v for k, v in stored.items() if k != "fidelity_gaps"}

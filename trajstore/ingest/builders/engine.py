"""A parsed :class:`~trajstore.ingest.records.EngineRollout` -> validated trajectories whose
token ids and log-probs are the engine's, checked as the adapters check an engine response and
stored exactly (one trajectory per context).
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

from trajstore.adapters import engine_logprob, token_ids_from
from trajstore.errors import AdapterError
from trajstore.ingest.builders import stored_fields
from trajstore.ingest.formats.finish_reasons import stored_finish_reason
from trajstore.ingest.records import EngineRollout, EngineSegment, RecordError
from trajstore.models import Span, Trajectory
from trajstore.validate import validate_trajectory

ENGINE_TOKENIZER_FROM_MODEL = "model"
"""``engine_tokenizer`` value meaning: each rollout's engine ids belong to the tokenizer named
like its model (true when the engine served a Hugging Face repo id under its own name)."""


_ACTION_FIELDS = ("tool_call_ids", "policy_version", "policy_version_max", "finish_reason", "temperature", "top_p",
                  "top_k", "min_p", "max_tokens", "sampling_params", "logprob_mode")
"""The span fields only an action span carries."""


def _engine_parts(segments: list[EngineSegment]) -> list[list[EngineSegment]]:
    parts: list[list[EngineSegment]] = []
    for s in segments:
        if not parts or (s.kind == "prompt" and any(x.kind == "action" for x in parts[-1])):
            parts.append([])
        parts[-1].append(s)
    return parts


def rollout_to_trajectories(r: EngineRollout, *, input_format: str,
                            engine_tokenizer: str | None = None) -> list[Trajectory]:
    """Keep an engine rollout's token ids (and log-probs) exactly (``token_source = engine``):
    one trajectory per context (a prompt segment after an action starts the next part, linked to
    the part before and with metadata ``episode`` as in
    :func:`~trajstore.ingest.builders.conversation.conversation_to_trajectories`).

    Log-probs are all-or-nothing per rollout: when some action lacks them none is stored
    (``logprob_source = none``, metadata ``engine_logprobs_discarded``). With log-probs, action
    spans carry no policy version (null: the logs never say which version generated them, except a
    log that records one per call, whose versions are kept) and metadata says
    ``policy_version_known: false``, so their staleness is undefined in the audits
    and the trainer, as for text-only logs; they train on their engine log-probs. The tokenizer
    is the rollout's own, else `engine_tokenizer` (:data:`ENGINE_TOKENIZER_FROM_MODEL` = the
    rollout's model name); with neither, the trajectory is stored with ``trainable = false`` and
    the reason.

    A rollout read back from a trajstore export (``r.exported``, one context) gets the stored row's
    id, group, lineage, trainability and token source back (:class:`~trajstore.ingest.records.ExportedFields`);
    with engine log-probs, a call whose log-probs are all unknown keeps NaN (the others keep theirs).

    Raises:
        TrajectoryValidationError: a result breaks a schema rule (e.g. a positive log-prob).
    """
    acts = [s for s in r.segments if s.kind == "action"]
    parts = _engine_parts(r.segments)
    kept = r.exported if len(parts) == 1 else None  # an export holds one context per document
    with_lp = bool(acts) and (all(s.logprobs is not None for s in acts) or (
        kept is not None and kept.logprob_source == "engine" and any(s.logprobs is not None for s in acts)))
    meta0 = dict(r.metadata)
    if kept is None and with_lp and any(s.policy_version is None for s in acts):
        # version 0 was stored before: audits showed a made-up staleness and full version coverage
        meta0["policy_version_known"] = False
    if not with_lp and any(s.logprobs is not None for s in acts):
        meta0["engine_logprobs_discarded"] = (f"{sum(s.logprobs is None for s in acts)} of {len(acts)} model calls "
                                              "have no log-probs")
    tokenizer = r.tokenizer or (r.model if engine_tokenizer == ENGINE_TOKENIZER_FROM_MODEL else engine_tokenizer)
    reason = None if tokenizer else (
        f"engine token ids of an unnamed tokenizer (model {r.model!r}): name it with the ingest's engine_tokenizer "
        "option (--engine-tokenizer), else ids of another vocabulary would be trained as other text")
    if kept is not None and kept.trainable is not None:
        reason = None if kept.trainable else kept.not_trainable_reason or "not trainable (as exported)"
    all_ids = np.concatenate([np.asarray(s.token_ids, dtype=np.int64) for s in r.segments]).astype(np.int32)
    digest = stored_fields.content_hash({
        "source": r.source, "key": r.key, "reward": stored_fields.reward_raw(r), **stored_fields.status_part(r),
        "tokenizer": tokenizer, "tokens": hashlib.sha256(all_ids.tobytes()).hexdigest(),
        "cuts": [len(s.token_ids) for s in r.segments]})
    base_id = kept.trajectory_id if kept is not None else stored_fields.trajectory_id(r.source, r.key, digest)
    gaps = dict(r.fidelity_gaps)
    if kept is None:  # an exported row's gaps are restored as stored
        stored_fields.check_call_count(r, len(acts), gaps)
    out = []
    for n, segs in enumerate(parts):
        tokens = np.concatenate([np.asarray(s.token_ids, dtype=np.int64) for s in segs]).astype(np.int32)
        lps = np.concatenate([np.asarray(s.logprobs, dtype=np.float32) if with_lp and s.logprobs is not None
                              else np.full(len(s.token_ids), np.nan, dtype=np.float32) for s in segs])
        spans, pos = [], 0
        for s in segs:
            k = len(s.token_ids)
            act = s.kind == "action"
            sampling = {f: getattr(s, f) if act else None for f in _ACTION_FIELDS}
            if act:  # every spelling of a length stop is stored as "length"
                sampling["finish_reason"] = stored_finish_reason(s.finish_reason)
            spans.append(Span(kind=s.kind, start=pos, end=pos + k, role=s.role, call_id=s.call_id,
                              cause_id=s.cause_id, truncated=s.truncated, **sampling,
                              usage_prompt_tokens=s.usage.prompt_tokens if act and s.usage else None,
                              usage_completion_tokens=s.usage.completion_tokens if act and s.usage else None,
                              usage_cached_tokens=s.usage.cached_tokens if act and s.usage else None,
                              started_at=s.timing.started_at if act and s.timing else None,
                              first_token_at=s.timing.first_token_at if act and s.timing else None,
                              ended_at=s.timing.ended_at if act and s.timing else None))
            pos += k
        meta = dict(meta0)
        meta["ingest"] = {"format": input_format, "path": r.origin.path, "line": r.origin.line}
        if len(parts) > 1:
            meta["episode"] = stored_fields.episode(base_id, n + 1, len(parts), "engine-prompt")
        if gaps:
            meta["fidelity_gaps"] = gaps
        lineage = {} if kept is None else {
            "group_id": kept.group_id, "episode_id": kept.episode_id, "parent_trajectory_id": kept.parent_trajectory_id,
            "fork_point": kept.fork_point, "link_kind": kept.link_kind, "abandoned": kept.abandoned}
        traj = Trajectory(
            trajectory_id=stored_fields.part_id(base_id, n + 1, len(parts)), prompt_id=r.prompt_id,
            source=kept.source if kept is not None and kept.source else r.source,
            model=r.model, tokenizer=tokenizer, created_at=stored_fields.created_at(r), status=r.status,
            reward=r.reward.value, reward_raw=stored_fields.reward_raw(r),
            token_source=kept.token_source if kept is not None else "engine",
            logprob_source="engine" if with_lp else "none", tokens=tokens, action_logprobs=lps, spans=spans, metadata=meta,
            not_trainable_reason=reason, **lineage)
        out.append(traj)
    stored_fields.link_parts(out, [None] + ["engine-prompt"] * (len(parts) - 1), base_id)
    return [validate_trajectory(t) for t in out]


def check_engine_segments(r: EngineRollout) -> EngineRollout:
    """Check an engine rollout's numbers as the adapters check an engine response, in place:
    token ids are integers in [0, 2**31); log-probs are numbers, and a null / non-finite /
    -9999.0 stand-in log-prob becomes NaN (missing), never a value; an action whose log-probs
    are all missing has none (``logprobs = None``).

    Raises:
        RecordError: naming the segment and the position of the first bad value (a token id
            past int64, a log-prob that is a string, counts that differ).
    """
    if not r.segments:
        raise RecordError("the rollout has no token segments")
    for k, seg in enumerate(r.segments):
        where = f"segment {k} ({seg.kind}{' ' + str(seg.call_id) if seg.call_id else ''})"
        try:
            seg.token_ids = token_ids_from(seg.token_ids, f"{where} token ids").tolist()
            if seg.logprobs is None:
                continue
            if not isinstance(seg.logprobs, (list, tuple)) or len(seg.logprobs) != len(seg.token_ids):
                n = len(seg.logprobs) if isinstance(seg.logprobs, (list, tuple)) else "no"
                raise RecordError(f"{where}: {len(seg.token_ids)} token ids but {n} log-probs")
            lps = [engine_logprob(x, f"{where} log-prob [{i}]") for i, x in enumerate(seg.logprobs)]
            seg.logprobs = None if lps and all(math.isnan(x) for x in lps) else lps
        except AdapterError as e:
            raise RecordError(str(e)) from None
    return r

"""A parsed :class:`~trajstore.ingest.records.TextRollout` (an RL framework's dump of the very text
the model saw and produced) -> one validated trajectory, each segment tokenized as it is.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trajstore.ingest.builders.stored_fields import content_hash, created_at, reward_raw, status_part, trajectory_id
from trajstore.ingest.records import RecordError, TextRollout
from trajstore.models import Span, Trajectory
from trajstore.validate import validate_trajectory


def text_rollout_to_trajectory(r: TextRollout, tokenizer: Any, *, tokenizer_name: str,
                               input_format: str) -> Trajectory:
    """Tokenize each segment of an already-rendered text rollout as it is (no chat template, no
    special tokens added) and make it one span.

    Returns:
        A validated :class:`Trajectory` with ``token_source = retokenized`` and ``logprob_source
        = none``; metadata ``special_tokens_in_text`` says whether the prompt text holds the
        tokenizer's special tokens (if not, the dump dropped them and the prompt ids differ from
        what the model saw).

    Raises:
        RecordError: a segment tokenizes to nothing.
        TrajectoryValidationError: the result breaks a schema rule.
    """
    ids: list[np.ndarray] = []
    spans: list[Span] = []
    pos = 0
    for k, seg in enumerate(r.segments):
        t = np.asarray(tokenizer(seg.text, add_special_tokens=False)["input_ids"], dtype=np.int32)
        if not len(t):
            raise RecordError(f"segment {k} ({seg.kind}) has no tokens")
        spans.append(Span(kind=seg.kind, start=pos, end=pos + len(t), role=seg.role))
        ids.append(t)
        pos += len(t)
    tokens = np.concatenate(ids)
    special = [x for x in getattr(tokenizer, "all_special_tokens", []) if x]
    digest = content_hash({"source": r.source, "key": r.key, "reward": reward_raw(r), **status_part(r),
                           "tokenizer": tokenizer_name,
                            "segments": [[s.kind, s.text] for s in r.segments]})
    meta = dict(r.metadata)
    meta["ingest"] = {"format": input_format, "path": r.origin.path, "line": r.origin.line, "render_method": "raw-text"}
    meta["special_tokens_in_text"] = any(x in r.segments[0].text for x in special)
    gaps = dict(r.fidelity_gaps)
    if not meta["special_tokens_in_text"]:
        gaps["special_tokens"] = ("the prompt text holds none of the tokenizer's special tokens: the dump dropped "
                                  "them (skip_special_tokens), so the prompt ids differ from what the model saw")
    if gaps:
        meta["fidelity_gaps"] = gaps
    if r.reward.error:
        meta["reward_error"] = r.reward.error
    traj = Trajectory(
        trajectory_id=trajectory_id(r.source, r.key, digest), prompt_id=r.prompt_id, source=r.source, model=r.model,
        tokenizer=tokenizer_name, created_at=created_at(r), status=r.status, reward=r.reward.value,
        reward_raw=reward_raw(r), token_source="retokenized", logprob_source="none", tokens=tokens,
        action_logprobs=np.full(len(tokens), np.nan, dtype=np.float32), spans=spans, metadata=meta)
    return validate_trajectory(traj)

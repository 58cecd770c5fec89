"""A parsed :class:`~trajstore.ingest.records.Conversation` -> validated trajectories: observations
capped, a deterministic id from what is stored, the render cut into spans (one trajectory per
context the model saw), and the ingest metadata.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trajstore.ingest.builders.render import render_conversation
from trajstore.ingest.builders.stored_fields import (
    check_call_count,
    content_hash,
    created_at,
    episode,
    link_parts,
    part_id,
    reward_raw,
    status_part,
    trajectory_id,
)
from trajstore.ingest.builders.template import template_features
from trajstore.ingest.records import Conversation, Message
from trajstore.models import Span, Trajectory
from trajstore.validate import validate_trajectory

DEFAULT_MAX_OBSERVATION_CHARS = 200_000
"""Observation text longer than this (characters) is capped at ingest (multi-MB browser trees)."""

TRUNCATION_MARKER = "\n[... trajstore ingest: {dropped} of {total} characters truncated ...]\n"
"""Inserted where an observation was cut; ``{dropped}`` and ``{total}`` are character counts."""


def cap_text(msg: Message, max_chars: int | None) -> Message:
    """Cap an observation's content at `max_chars` characters, keeping its head and tail around
    a visible :data:`TRUNCATION_MARKER`; sets ``truncated`` and ``original_chars``."""
    if max_chars is None or len(msg.content) <= max_chars or msg.truncated:  # capped once only
        return msg
    total = len(msg.content)
    head = max_chars * 3 // 4
    tail = max_chars - head
    dropped = total - head - tail
    msg.content = (msg.content[:head] + TRUNCATION_MARKER.format(dropped=dropped, total=total)
                   + (msg.content[-tail:] if tail else ""))
    msg.truncated = True
    msg.original_chars = total
    return msg


def _context_digest(conv: Conversation) -> list[Any]:
    pos = {id(m): i for i, m in enumerate(conv.messages)}
    out = []
    for i, m in enumerate(conv.messages):
        if m.context is not None:
            out.append([i, m.context.change, m.context.tools,
                        [pos[id(c)] if id(c) in pos else c.canonical() for c in m.context.messages]])
    return out


def reconstructed_actions_reason(gaps: dict[str, str]) -> str | None:
    """Why a trajectory whose actions are a reconstruction (fidelity flag ``action_text``: the
    log keeps only a parsed or reformatted version of what the model wrote) is not trainable by
    default, naming the format's reason; None when its actions are the model's own text."""
    if "action_text" not in gaps:
        return None
    return (f"actions reconstructed, not the model's own tokens: {gaps['action_text']} (ingest with "
            "--train-reconstructed-actions to train on them)")


def conversation_to_trajectories(conv: Conversation, tokenizer: Any, *, tokenizer_name: str, input_format: str,
                                 max_observation_chars: int | None = DEFAULT_MAX_OBSERVATION_CHARS,
                                 train_reconstructed_actions: bool = False) -> list[Trajectory]:
    """Tokenize a conversation with the tokenizer's chat template: one trajectory per context
    the model saw (usually one).

    Spans: the first call's context is one prompt span; each assistant message is an action
    span (what the model generated, end-of-turn token included); every other message is an
    observation span, linked by ``cause_id``. When the conversation splits (see
    :func:`~trajstore.ingest.builders.render.render_conversation`), the parts are linked lineages of one
    episode (:func:`~trajstore.ingest.builders.stored_fields.link_parts`: each part the child of the one
    before, ``link_kind`` by the change), every part carries metadata ``episode`` =
    ``{"id", "part", "parts", "change"}`` and the same reward, prompt id and group id
    (``group_id`` keeps its meaning, a GRPO group of rollouts of one prompt: parts of one
    episode in one group would cancel each other's advantage).

    Actions the log keeps only as a parsed or reformatted version of what the model wrote
    (the parser's flag ``action_text``) are stored as its best reconstruction with ``trainable =
    false`` and the reason (:func:`reconstructed_actions_reason`), unless
    `train_reconstructed_actions` (then the choice is part of the trajectory id, so such an
    ingest stores its own copy).

    Returns:
        Validated :class:`Trajectory` s with ``token_source = retokenized``, ``logprob_source
        = none`` and no policy versions; metadata ``fidelity_gaps`` names what could not be
        reproduced (the conversation's own gaps plus the render's approximations).

    Raises:
        ValueError: the conversation cannot be rendered.
        TrajectoryValidationError: a result breaks a schema rule.
    """
    first_action = next((i for i, m in enumerate(conv.messages) if m.role == "assistant"), len(conv.messages))
    truncated = []
    for i, m in enumerate(conv.messages):
        if i >= first_action and m.role != "assistant":
            cap_text(m, max_observation_chars)
            if m.truncated:
                truncated.append({"message": i, "original_chars": m.original_chars})
    # The id hashes what is stored (messages after capping), not the cap option: a cap that cuts
    # nothing leaves the id unchanged, so re-ingesting with another cap stays idempotent.
    digest = content_hash({"source": conv.source, "key": conv.key, "reward": reward_raw(conv), **status_part(conv),
                           "messages": [m.canonical() for m in conv.messages], "tokenizer": tokenizer_name,
                           "tools": conv.tools, "contexts": _context_digest(conv),
                           **({"train_reconstructed": True} if train_reconstructed_actions
                              and "action_text" in conv.fidelity_gaps else {})})
    parts = render_conversation(tokenizer, conv.messages, tools=conv.tools)
    features = template_features(tokenizer)
    base_id = trajectory_id(conv.source, conv.key, digest)
    gaps = dict(conv.fidelity_gaps)
    if first_action < len(conv.messages) and conv.messages[first_action].context is None and not any(
            m.role in ("system", "user") for m in conv.messages[:first_action]):
        gaps.setdefault("prompt", "no system or user message before the first model call: the task the model was "
                                  "given is not in the log (the prompt is the template's default)")
    notes = [n for p in parts for n in p.notes]
    if notes:
        gaps.setdefault("render", "; ".join(notes))
    check_call_count(conv, sum(m.role == "assistant" for m in conv.messages), gaps)
    not_trainable = None if train_reconstructed_actions else reconstructed_actions_reason(gaps)
    out = []
    for n, part in enumerate(parts):
        spans: list[Span] = []
        for s in part.spans:
            m = conv.messages[s.message] if s.message is not None else None
            if s.kind == "prompt":
                ctx = conv.messages[:first_action] if n == 0 else []
                if not ctx and n == 0 and first_action < len(conv.messages) and conv.messages[first_action].context:
                    ctx = conv.messages[first_action].context.messages
                roles = [x.role for x in ctx]
                spans.append(Span(kind="prompt", start=s.start, end=s.end,
                                  role="system" if "system" in roles or not roles else roles[0]))
            elif s.kind == "action":
                assert m is not None
                spans.append(Span(kind="action", start=s.start, end=s.end, role="assistant", call_id=m.call_id,
                                  tool_call_ids=[t.id for t in m.tool_calls if t.id] or None,
                                  finish_reason=m.finish_reason))
            else:
                spans.append(Span(kind="observation", start=s.start, end=s.end, role=m.role if m else None,
                                  call_id=m.call_id if m else None, cause_id=m.cause_id if m else None,
                                  truncated=True if m is not None and m.truncated else None))
        meta = dict(conv.metadata)
        meta["ingest"] = {"format": input_format, "path": conv.origin.path, "line": conv.origin.line,
                          "render_method": part.method,
                          "tool_calls": "template" if features.tool_calls else "flattened-json",
                          "reasoning": "template" if features.reasoning else "flattened-think",
                          "tools": None if not conv.tools else "template" if features.tools else "system-text"}
        if len(parts) > 1:
            meta["episode"] = episode(base_id, n + 1, len(parts), part.change)
        if gaps:
            meta["fidelity_gaps"] = gaps
        if truncated:
            meta["truncated_observations"] = truncated
        if conv.degraded_events:
            meta["degraded_events"] = conv.degraded_events
        if conv.reward.error:
            meta["reward_error"] = conv.reward.error
        n_tok = len(part.token_ids)
        traj = Trajectory(
            trajectory_id=part_id(base_id, n + 1, len(parts)), prompt_id=conv.prompt_id,
            group_id=None, source=conv.source, model=conv.model, tokenizer=tokenizer_name, created_at=created_at(conv),
            status=conv.status, reward=conv.reward.value,
            reward_raw=reward_raw(conv), token_source="retokenized", logprob_source="none", tokens=part.token_ids,
            action_logprobs=np.full(n_tok, np.nan, dtype=np.float32), spans=spans, metadata=meta,
            not_trainable_reason=not_trainable)
        out.append(traj)
    link_parts(out, [p.change for p in parts], base_id)
    return [validate_trajectory(t) for t in out]

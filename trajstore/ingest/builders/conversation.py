"""A parsed :class:`~trajstore.ingest.records.Conversation` -> validated trajectories: observations
capped, a deterministic id from what is stored, the render cut into spans (one trajectory per
context the model saw), and the ingest metadata.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trajstore.ingest.builders.render import render_conversation
from trajstore.ingest.builders.split_outputs import CONSECUTIVE_CALLS, join_split_outputs
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
from trajstore.ingest.formats.finish_reasons import stored_finish_reason
from trajstore.ingest.records import Conversation, Message
from trajstore.ingest.summary import NO_MODEL_CALL
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


def _calls_without_tools(conv: Conversation) -> bool:
    """The model made tool calls (function calling, not calls written in its text) but no tool
    definitions are logged, for the conversation or for any call's own context, nor written in
    its text."""
    if conv.tools or conv.tools_in_text or not any(m.tool_calls and not m.tool_calls_in_content
                                                   for m in conv.messages):
        return False
    return not any(m.context is not None and m.context.tools for m in conv.messages)


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


def no_model_call_reason(gaps: dict[str, str]) -> str | None:
    """Why a trajectory whose log shows no model call (fidelity flag
    :data:`~trajstore.ingest.summary.NO_MODEL_CALL`, any format) is never trainable: its actions
    are no model's output (a deterministic orchestrator's steps); None for any other."""
    return f"no evidence of a model call: {gaps[NO_MODEL_CALL]}" if NO_MODEL_CALL in gaps else None


TEMPLATE_DEFAULT_SYSTEM = "template_default_system"
"""Fidelity flag: the stored context holds the chat template's default system prompt, which the
log does not have (the template writes it where it cannot be left out)."""


def template_default_reason(gaps: dict[str, str]) -> str | None:
    """Why a trajectory whose context holds a template-inserted system prompt (flag
    :data:`TEMPLATE_DEFAULT_SYSTEM`) is not trainable: the model was never shown to have seen it."""
    if TEMPLATE_DEFAULT_SYSTEM not in gaps:
        return None
    return f"context holds text the log does not: {gaps[TEMPLATE_DEFAULT_SYSTEM]}"


def conversation_to_trajectories(conv: Conversation, tokenizer: Any, *, tokenizer_name: str, input_format: str,
                                 max_observation_chars: int | None = DEFAULT_MAX_OBSERVATION_CHARS,
                                 train_reconstructed_actions: bool = False) -> list[Trajectory]:
    """Tokenize a conversation with the tokenizer's chat template: one trajectory per context
    the model saw (usually one).

    Before rendering, every chat-like format gets the same rules: one output logged as a text
    message and a tool-call message is joined into one action
    (:mod:`~trajstore.ingest.builders.split_outputs`; metadata ``ingest.joined_outputs``; adjacent
    calls left apart are flagged ``observations``); every length stop's spelling is ``length``
    (:func:`~trajstore.ingest.formats.finish_reasons.stored_finish_reason`: the action then ends
    where the model was cut); tool calls with no tool definitions logged are flagged ``tools``.

    Spans: the first call's context is one prompt span; each assistant message is an action
    span (what the model generated, end-of-turn token included); every other message is an
    observation span, linked by ``cause_id``. When the conversation splits (see
    :func:`~trajstore.ingest.builders.render.render_conversation`), the parts are linked lineages of one
    episode (:func:`~trajstore.ingest.builders.stored_fields.link_parts`: each part the child of the one
    before, ``link_kind`` by the change), every part carries metadata ``episode`` =
    ``{"id", "part", "parts", "change"}`` and the same reward, prompt id and group id
    (``group_id`` keeps its meaning, a GRPO group of rollouts of one prompt: parts of one
    episode in one group would cancel each other's advantage).

    A log that shows no model call (:func:`no_model_call_reason`) is stored with ``trainable =
    false``. A conversation without a system message is rendered without the template's default
    system prompt (metadata ``ingest.default_system_omitted`` holds the text left out); where the
    template writes it so that it cannot be left out, the flag :data:`TEMPLATE_DEFAULT_SYSTEM`
    is raised and the trajectory is not trainable. Actions the log keeps only as a parsed or reformatted version of what the model wrote
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
    conv.messages, joined, apart = join_split_outputs(conv.messages)
    gaps = dict(conv.fidelity_gaps)
    if apart:
        gaps.setdefault("observations", CONSECUTIVE_CALLS)
    for m in conv.messages:
        if m.role == "assistant":
            m.finish_reason = stored_finish_reason(m.finish_reason)
    if _calls_without_tools(conv):
        gaps.setdefault("tools", "the model made tool calls but the log has no tool definitions: the tool list it "
                                 "was sent is not in the stored prompt")
    first_action = next((i for i, m in enumerate(conv.messages) if m.role == "assistant"), len(conv.messages))
    if first_action == len(conv.messages) and conv.status == "completed":
        # nothing the model generated is logged: the run cannot be known to have completed
        conv.status = "aborted"
        gaps.setdefault("status", "no model output in the log: stored as aborted, not completed")
    truncated = []
    for i, m in enumerate(conv.messages):
        if i >= first_action and m.role != "assistant":
            cap_text(m, max_observation_chars)
            if m.truncated:
                truncated.append({"message": i, "original_chars": m.original_chars})
    parts = render_conversation(tokenizer, conv.messages, tools=conv.tools)
    # The id hashes what is stored (messages after capping), not the cap option: a cap that cuts
    # nothing leaves the id unchanged, so re-ingesting with another cap stays idempotent. Render
    # choices that change the tokens of some conversations only (a template default left out, an
    # action cut at a length stop) join the hash only where they apply, so a store holding the
    # earlier render of such a conversation gets the corrected one beside it, not a duplicate skip.
    length_stops = [i for i, m in enumerate(conv.messages) if m.role == "assistant" and m.finish_reason == "length"]
    digest = content_hash({"source": conv.source, "key": conv.key, "reward": reward_raw(conv), **status_part(conv),
                           "messages": [m.canonical() for m in conv.messages], "tokenizer": tokenizer_name,
                           "tools": conv.tools, "contexts": _context_digest(conv),
                           **({"train_reconstructed": True} if train_reconstructed_actions
                              and "action_text" in conv.fidelity_gaps else {}),
                           **({"default_system_omitted": True} if any(p.default_omitted for p in parts) else {}),
                           **({"length_stops": length_stops} if length_stops else {})})
    features = template_features(tokenizer)
    base_id = trajectory_id(conv.source, conv.key, digest)
    if first_action < len(conv.messages) and conv.messages[first_action].context is None and not any(
            m.role in ("system", "user") for m in conv.messages[:first_action]):
        gaps.setdefault("prompt", "no system or user message before the first model call: the task the model was "
                                  "given is not in the log")
    kept = next((p.default_kept for p in parts if p.default_kept), None)
    if kept:
        gaps.setdefault(TEMPLATE_DEFAULT_SYSTEM, f"the chat template writes its default system prompt {kept!r}, which "
                                                 "the log does not have, where it cannot be left out")
    notes = [n for p in parts for n in p.notes]
    if notes:
        gaps.setdefault("render", "; ".join(notes))
    check_call_count(conv, sum(m.role == "assistant" for m in conv.messages), gaps)
    not_trainable = no_model_call_reason(gaps) or template_default_reason(gaps) or (
        None if train_reconstructed_actions else reconstructed_actions_reason(gaps))
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
        if joined:
            meta["ingest"]["joined_outputs"] = joined
        if part.default_omitted:
            meta["ingest"]["default_system_omitted"] = part.default_omitted
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

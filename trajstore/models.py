"""Pydantic models at the SDK boundary: what harness code hands to the writer.

Field names and types mirror :mod:`trajstore.schema` (a test checks they match). Per-token
arrays are held as numpy arrays so that long trajectories (64k tokens) cost no per-token
Python objects; lists are accepted and converted. Semantic rules (span coverage, logprob
ranges, ...) live in :mod:`trajstore.validate` so that every violation is reported at once.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from typing import Annotated, Any

import numpy as np
from pydantic import AliasChoices, BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, field_validator


def as_token_ids(v: Any, *, name: str = "tokens") -> np.ndarray:
    """`v` as int32 token ids, shape (T,), refusing anything int32 cannot hold exactly (a plain
    cast would wrap 2**32 + 5 to 5). No copy when `v` already is an int32 array.

    Args:
        v: a 1-D sequence or array of integers.
        name: what `v` is, for the error message (``tokens[5]``).

    Raises:
        ValueError: not 1-D, not integers, or an id outside int32 (naming the first one).
    """
    arr = np.asarray(v)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D sequence of token ids, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name}: token ids must be integers, got dtype {arr.dtype}")
    if arr.size and (arr.max() > np.iinfo(np.int32).max or arr.min() < np.iinfo(np.int32).min):
        bad = int(np.flatnonzero((arr > np.iinfo(np.int32).max) | (arr < np.iinfo(np.int32).min))[0])
        raise ValueError(f"token ids must fit in int32 ({name}[{bad}] = {arr[bad]})")
    return arr.astype(np.int32, copy=False)


def _as_float32_or_nan(v: Any) -> np.ndarray:
    if isinstance(v, np.ndarray):
        arr = v
    else:
        arr = np.asarray([math.nan if x is None else x for x in v], dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"expected a 1-D sequence of log-probs, got shape {arr.shape}")
    return arr.astype(np.float32, copy=False)


def _list_or_none(a: np.ndarray) -> list[Any]:
    if a.dtype.kind == "f":
        return [None if math.isnan(x) else float(x) for x in a.tolist()]
    return a.tolist()


TokenArray = Annotated[np.ndarray, BeforeValidator(as_token_ids), PlainSerializer(_list_or_none)]
"""int32 token ids, shape (T,)."""
LogprobArray = Annotated[np.ndarray, BeforeValidator(_as_float32_or_nan), PlainSerializer(_list_or_none)]
"""float32 log-probs in nats, shape (T,); NaN stands for null (unknown / not an action token)."""


class SamplingParams(BaseModel):
    """Sampling parameters of one model call. Unknown extra parameters are kept in `extra`."""

    model_config = ConfigDict(extra="forbid")
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    max_tokens: int | None = None
    extra: dict[str, Any] = Field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(self.model_dump(exclude_none=True), sort_keys=True, default=str)


def _utc_or_none(v: datetime | None) -> datetime | None:
    if v is None:
        return None
    return v.replace(tzinfo=timezone.utc) if v.tzinfo is None else v.astimezone(timezone.utc)


class CallTiming(BaseModel):
    """When one model call happened (UTC; naive datetimes are taken as UTC), stored on its action
    span(s) as ``started_at``, ``first_token_at``, ``ended_at``: the call took ``ended_at -
    started_at``, its time to first token ``first_token_at - started_at``. None = not measured."""

    model_config = ConfigDict(extra="forbid")
    started_at: datetime | None = None
    """The request reached the engine (or the recording proxy)."""
    first_token_at: datetime | None = None
    """The first generated token arrived (a streamed call; None for a call answered whole)."""
    ended_at: datetime | None = None
    """The answer was complete."""

    _utc = field_validator("started_at", "first_token_at", "ended_at")(classmethod(lambda cls, v: _utc_or_none(v)))


class CallUsage(BaseModel):
    """The engine's own token counts of one model call (OpenAI ``usage``), stored on its action
    span as ``usage_prompt_tokens``, ``usage_completion_tokens``, ``usage_cached_tokens``."""

    model_config = ConfigDict(extra="forbid")
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    """Prompt tokens served from the engine's prefix cache (``prompt_tokens_details.cached_tokens``)."""

    @classmethod
    def from_openai(cls, usage: Any) -> CallUsage | None:
        """The counts of an OpenAI-compatible response's ``usage`` object (None when it has none;
        a count that is not a non-negative integer is left out)."""
        if not isinstance(usage, dict):
            return None
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None

        def count(v: Any) -> int | None:
            return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None

        out = cls(prompt_tokens=count(usage.get("prompt_tokens")),
                  completion_tokens=count(usage.get("completion_tokens")), cached_tokens=count(cached))
        return None if out == cls() else out


class Span(BaseModel):
    """A contiguous piece of a trajectory's tokens: ``tokens[start:end]``.

    `kind` is ``prompt``, ``action`` (one model call) or ``observation`` (environment output).
    Action spans carry the `policy_version` that generated them and the call's metadata. A call
    whose tokens came from two versions without a reported boundary (weights reloaded
    mid-generation) is one span flagged with both: `policy_version` the oldest,
    `policy_version_max` the newest (see :mod:`trajstore.schema`).
    """

    model_config = ConfigDict(extra="forbid")
    kind: str
    start: int
    end: int
    role: str | None = None
    policy_version: int | None = None
    call_id: str | None = None
    cause_id: str | None = None
    tool_call_ids: list[str] | None = None
    finish_reason: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    max_tokens: int | None = None
    sampling_params: str | None = None
    truncated: bool | None = None
    policy_version_max: int | None = None
    logprob_mode: str | None = None
    """processed | tempered | raw (:data:`~trajstore.schema.LOGPROB_MODES`): which distribution the
    action's log-probs are the log-probs of; None = not recorded (trained as processed)."""
    started_at: datetime | None = None
    """When the model call's request reached the engine (or the recording proxy); None = not recorded."""
    first_token_at: datetime | None = None
    """When its first generated token arrived (streamed calls); None = not recorded."""
    ended_at: datetime | None = None
    """When its answer was complete; None = not recorded. Naive datetimes are taken as UTC."""
    usage_prompt_tokens: int | None = None
    """The engine's count of the call's prompt tokens (OpenAI ``usage.prompt_tokens``), when reported."""
    usage_completion_tokens: int | None = None
    """The engine's count of its generated tokens (``usage.completion_tokens``), when reported."""
    usage_cached_tokens: int | None = None
    """Prompt tokens served from the engine's prefix cache (``usage.prompt_tokens_details.cached_tokens``)."""

    _utc = field_validator("started_at", "first_token_at", "ended_at")(classmethod(lambda cls, v: _utc_or_none(v)))

    @property
    def num_tokens(self) -> int:
        return self.end - self.start


class Trajectory(BaseModel):
    """One rollout as stored: tokens, rollout log-probs, spans, reward and provenance.

    Derived columns (token counts, min/max policy version, `trainable`) are computed by the
    writer from `spans`, so they can never disagree with the data.
    """

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    trajectory_id: str
    prompt_id: str | None = None
    group_id: str | None = None
    episode_id: str | None = None
    """The episode (logical rollout) this trajectory is part of; None = its own (stored as
    metadata ``episode.id`` of a split episode's part when set, else `trajectory_id`)."""
    parent_trajectory_id: str | None = None
    """Trajectory this one branches from (in the same write or already stored); None = a root."""
    fork_point: int | None = None
    """Leading tokens shared with the parent (0 <= fork_point <= the parent's length); None without a parent."""
    link_kind: str | None = None
    """subagent | context_rewrite | fork | continuation (:data:`~trajstore.schema.LINK_KINDS`); None without a parent."""
    abandoned: bool | None = None
    """True = a branch the harness did not continue (a retry or resample replaced it: it earns no
    episode reward); False = known to be kept; None = not recorded (credited as kept)."""
    source: str = "sdk"
    model: str | None = None
    tokenizer: str | None = None
    created_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))
    status: str = "completed"
    reward: float | None = None
    reward_raw: str | None = None
    token_source: str = "engine"
    logprob_source: str = "engine"
    not_trainable_reason: str | None = None
    """Set by the producer when the trajectory must not be trained on although it has action
    tokens (e.g. engine token ids of an unknown tokenizer); stored as ``trainable = false``
    with this reason. None = trainable when it has action tokens."""
    tokens: TokenArray
    action_logprobs: LogprobArray = Field(validation_alias=AliasChoices("action_logprobs", "logprobs"))
    """Rollout log-prob of each token, as long as `tokens` (NaN outside action spans and where the
    engine gave none); stored cut to the action tokens (:data:`~trajstore.schema.ACTION_LOGPROBS_COLUMN`).
    ``logprobs=`` is accepted as input (the name before schema v3)."""
    spans: list[Span]
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("created_at")
    @classmethod
    def _utc(cls, v: datetime) -> datetime:
        try:
            return v.replace(tzinfo=timezone.utc) if v.tzinfo is None else v.astimezone(timezone.utc)
        except OverflowError:  # e.g. 0001-01-01T00:00:00+05:00 is before year 1 in UTC
            raise ValueError(f"{v.isoformat()} is outside the range of UTC timestamps "
                             "(year 1 to 9999 after conversion to UTC)") from None

    def action_spans(self) -> list[Span]:
        return [s for s in self.spans if s.kind == "action"]

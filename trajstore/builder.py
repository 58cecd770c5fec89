"""`TrajectoryBuilder`: what harness code calls while an episode runs.

    b = TrajectoryBuilder(prompt_id="task-7", model="my-policy", tokenizer="HuggingFaceTB/SmolLM2-135M-Instruct")
    b.add_prompt(prompt_ids)
    b.add_action(gen_ids, gen_logprobs, policy_version=12, finish_reason="stop")
    b.add_observation(tool_output_ids, cause_id="call_0")
    b.set_reward(1.0)
    writer.write(b.finish())
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

import numpy as np

from trajstore.adapters import ActionCall
from trajstore.models import CallTiming, CallUsage, SamplingParams, Span, Trajectory, as_token_ids
from trajstore.validate import validate_trajectory


def _json_default(v: Any) -> Any:
    """JSON for what ``json`` cannot encode itself: numpy scalars and arrays as numbers and lists
    (a float32 as the decimal numpy prints for it, ``np.float32(0.1)`` -> 0.1, not
    0.10000000149011612), anything else as its text."""
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(str(v)) if np.isfinite(v) else float(v)
    if isinstance(v, np.ndarray):  # json calls back here for each numpy element
        return list(v) if v.ndim else v[()]
    return str(v)


class TrajectoryBuilder:
    """Accumulates spans of one trajectory in order; :meth:`finish` validates and returns it.

    Args:
        trajectory_id: unique id (letters, digits, ``._:=+-``); a random UUID when omitted.
        prompt_id, group_id, source, model, tokenizer, metadata: stored as given.
    """

    def __init__(self, *, trajectory_id: str | None = None, prompt_id: str | None = None,
                 group_id: str | None = None, source: str = "sdk", model: str | None = None,
                 tokenizer: str | None = None, metadata: dict[str, Any] | None = None):
        self.trajectory_id = trajectory_id or uuid.uuid4().hex
        self._fields = dict(prompt_id=prompt_id, group_id=group_id, source=source, model=model,
                            tokenizer=tokenizer, metadata=dict(metadata or {}))
        self._tokens: list[np.ndarray] = []
        self._logprobs: list[np.ndarray] = []
        self._spans: list[Span] = []
        self._len = 0
        self._reward: float | None = None
        self._reward_raw: str | None = None
        self._any_action_logprobs = False
        self._finished = False

    @property
    def num_tokens(self) -> int:
        return self._len

    def _append(self, kind: str, ids: Sequence[int] | np.ndarray, lps: np.ndarray | None, **span: Any) -> Span:
        if self._finished:
            raise RuntimeError(f"trajectory {self.trajectory_id!r} is already finished")
        # A copy: the caller may reuse its buffer before finish().
        ids = as_token_ids(np.array(ids), name=f"{kind} token_ids")
        if len(ids) == 0:  # refused here, before any state changes, so the builder stays usable
            what = f"{kind} call {span.get('call_id')!r}" if kind == "action" else f"{kind} span"
            why = f" (finish_reason {span['finish_reason']!r})" if span.get("finish_reason") else ""
            raise ValueError(f"{what} has no tokens{why}: a span must hold at least one token, so it is not "
                             "added; leave it out (finish with status='truncated' if the episode was cut there)")
        if lps is None:
            lps = np.full(len(ids), np.nan, dtype=np.float32)
        s = Span(kind=kind, start=self._len, end=self._len + len(ids), **span)
        self._tokens.append(ids)
        self._logprobs.append(lps)
        self._spans.append(s)
        self._len += len(ids)
        return s

    def add_prompt(self, token_ids: Sequence[int] | np.ndarray, *, role: str | None = None) -> Span:
        """Append prompt tokens (system prompt, task statement). No log-probs."""
        return self._append("prompt", token_ids, None, role=role)

    def add_action(self, token_ids: Sequence[int] | np.ndarray, logprobs: Sequence[float | None] | np.ndarray | None,
                   *, policy_version: int | None, finish_reason: str | None = None,
                   sampling: SamplingParams | dict[str, Any] | None = None, call_id: str | None = None,
                   tool_call_ids: list[str] | None = None, policy_version_max: int | None = None,
                   logprob_mode: str | None = None, timing: CallTiming | None = None,
                   usage: CallUsage | None = None) -> Span:
        """Append one model call's generated tokens.

        Args:
            token_ids: sampled token ids, shape (N,).
            logprobs: the rollout engine's log-prob of each sampled token (nats), shape (N,),
                or None when the engine gave none (then the trajectory has ``logprob_source = none``).
            policy_version: version of the weights that generated this call (required with log-probs);
                the oldest one when `policy_version_max` is given.
            sampling: the call's sampling parameters (temperature, top_p, ...), stored with the span.
            policy_version_max: for a call whose tokens came from several versions without a known
                boundary (weights reloaded mid-generation): the newest; must be > `policy_version`.
            logprob_mode: which distribution `logprobs` are the log-probs of: ``processed``,
                ``tempered`` or ``raw`` (:data:`~trajstore.schema.LOGPROB_MODES`; the engine setting
                decides it, e.g. vLLM's ``--logprobs-mode``); None = not recorded.
            timing: when the call started, sent its first token and ended (UTC), stored on the span
                (``started_at``, ``first_token_at``, ``ended_at``); None = not measured.
            usage: the engine's token counts of the call (OpenAI ``usage``), stored on the span.

        Raises:
            ValueError: no token ids (a call cut at zero tokens), or a log-prob count that differs
                from the token count; nothing is added and the builder stays usable.
        """
        if logprobs is None:
            lps = None
        else:
            lps = np.asarray([np.nan if x is None else x for x in logprobs] if not isinstance(logprobs, np.ndarray)
                             else logprobs, dtype=np.float32)
            if len(lps) != len(token_ids):
                raise ValueError(f"action has {len(token_ids)} token ids but {len(lps)} log-probs")
            self._any_action_logprobs = True
        sp = SamplingParams(**sampling) if isinstance(sampling, dict) else sampling
        return self._append(
            "action", token_ids, lps, role="assistant", policy_version=policy_version,
            finish_reason=finish_reason, call_id=call_id, tool_call_ids=tool_call_ids or None,
            temperature=sp.temperature if sp else None, top_p=sp.top_p if sp else None,
            top_k=sp.top_k if sp else None, min_p=sp.min_p if sp else None,
            max_tokens=sp.max_tokens if sp else None, sampling_params=sp.to_json() if sp else None,
            policy_version_max=policy_version_max, logprob_mode=logprob_mode,
            started_at=timing.started_at if timing else None, first_token_at=timing.first_token_at if timing else None,
            ended_at=timing.ended_at if timing else None,
            usage_prompt_tokens=usage.prompt_tokens if usage else None,
            usage_completion_tokens=usage.completion_tokens if usage else None,
            usage_cached_tokens=usage.cached_tokens if usage else None,
        )

    def add_action_call(self, call: ActionCall, *, policy_version: int | None) -> Span:
        """Append an action from an engine-response adapter (see :mod:`trajstore.adapters`)."""
        has_lp = not np.isnan(call.logprobs).all() if len(call.logprobs) else True
        return self.add_action(call.token_ids, call.logprobs if has_lp else None, policy_version=policy_version,
                               finish_reason=call.finish_reason, sampling=call.sampling, call_id=call.call_id,
                               tool_call_ids=call.tool_call_ids, timing=call.timing, usage=call.usage)

    def add_observation(self, token_ids: Sequence[int] | np.ndarray, *, role: str | None = "tool",
                        cause_id: str | None = None, call_id: str | None = None,
                        truncated: bool | None = None) -> Span:
        """Append environment output (tool result, user feedback). `cause_id` links it to the
        action or tool call it answers."""
        return self._append("observation", token_ids, None, role=role, cause_id=cause_id, call_id=call_id,
                            truncated=truncated)

    def split_off(self, at: int, trajectory_id: str) -> TrajectoryBuilder:
        """Move the spans from token `at` on into a new builder (same fields, `trajectory_id`):
        a line of context that went on from `at` as a trajectory of its own. Its tokens are this
        builder's; everything before its first action is its prompt (one span, role ``user``).
        This builder keeps its first `at` tokens.

        Raises:
            ValueError: `at` is not a span boundary of this builder, or no action follows it
                (nothing changes).
        """
        cut = next((i for i, sp in enumerate(self._spans) if sp.start >= at), len(self._spans))
        first = next((i for i in range(cut, len(self._spans)) if self._spans[i].kind == "action"), None)
        if (cut < len(self._spans) and self._spans[cut].start != at) or (cut == len(self._spans) and at != self._len) \
                or first is None:
            raise ValueError(f"cannot split trajectory {self.trajectory_id!r} at token {at}: not a span boundary "
                             f"followed by an action")
        new = TrajectoryBuilder(trajectory_id=trajectory_id, **{k: v for k, v in self._fields.items()
                                                               if k != "metadata"},
                                metadata=self._fields["metadata"])
        new.add_prompt(np.concatenate(self._tokens[:first]), role="user")
        new._take(self._spans[first:], self._tokens[first:], self._logprobs[first:])
        del self._spans[cut:], self._tokens[cut:], self._logprobs[cut:]
        self._len = at
        self._any_action_logprobs = self._has_action_logprobs()
        return new

    def append_from(self, other: TrajectoryBuilder, *, role: str | None = "tool",
                    cause_id: str | None = None) -> None:
        """Go on with what `other` holds past this builder's end: `other` shares this builder's
        tokens (its first ``num_tokens``); its tokens from there to its first action become one
        observation span (`role`, `cause_id`), then its spans from that action on are appended.

        Raises:
            ValueError: `other` does not start with this builder's tokens, or has no action
                past them (nothing changes).
        """
        at = self._len
        first = next((i for i, sp in enumerate(other._spans) if sp.kind == "action" and sp.start >= at), None)
        mine = np.concatenate(self._tokens) if self._tokens else np.zeros(0, np.int32)
        theirs = np.concatenate(other._tokens) if other._tokens else np.zeros(0, np.int32)
        if first is None or not np.array_equal(theirs[:at], mine):
            raise ValueError(f"trajectory {other.trajectory_id!r} does not go on from the {at} tokens of "
                             f"{self.trajectory_id!r}")
        if other._spans[first].start > at:
            self.add_observation(theirs[at:other._spans[first].start], role=role, cause_id=cause_id)
        self._take(other._spans[first:], other._tokens[first:], other._logprobs[first:])

    def _take(self, spans: list[Span], tokens: list[np.ndarray], logprobs: list[np.ndarray]) -> None:
        """Append copies of whole spans (with their token and log-prob chunks), re-based to this end."""
        for sp, ids, lps in zip(spans, tokens, logprobs):
            self._spans.append(sp.model_copy(update={"start": self._len, "end": self._len + len(ids)}))
            self._tokens.append(ids)
            self._logprobs.append(lps)
            self._len += len(ids)
        self._any_action_logprobs = self._has_action_logprobs()

    def _has_action_logprobs(self) -> bool:
        return any(sp.kind == "action" and not np.isnan(lps).all() for sp, lps in zip(self._spans, self._logprobs))

    def set_reward(self, reward: float | None, *, raw: Any = None) -> None:
        """Set the scalar reward (credited at the last action token) and keep the raw value."""
        self._reward = None if reward is None else float(reward)
        self._reward_raw = json.dumps(raw if raw is not None else reward, default=_json_default) if (
            raw is not None or reward is not None) else None

    def finish(self, status: str = "completed", *, created_at: datetime | None = None) -> Trajectory:
        """Validate and return the trajectory.

        Raises:
            TrajectoryValidationError: listing every rule the trajectory breaks.
        """
        t = Trajectory(
            trajectory_id=self.trajectory_id,
            created_at=created_at or datetime.now(timezone.utc),
            status=status,
            reward=self._reward,
            reward_raw=self._reward_raw,
            token_source="engine",
            logprob_source="engine" if self._any_action_logprobs else "none",
            tokens=np.concatenate(self._tokens) if self._tokens else np.zeros(0, np.int32),
            action_logprobs=np.concatenate(self._logprobs) if self._logprobs else np.zeros(0, np.float32),
            spans=self._spans,
            **self._fields,
        )
        validate_trajectory(t)
        self._finished = True
        return t

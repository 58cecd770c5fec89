"""Sessions of ``traj proxy``: model calls grouped into trajectories, written through the SDK.

A session is one episode of one harness (its key comes from the URL prefix
``/s/<session>/v1`` or the ``X-Trajectory-Id`` header). Its calls are cut into lineages
(:mod:`trajstore.proxy.lineage`): each call's prompt token ids, as the server saw them, extend
the tokens of one lineage (its previous prompt plus its previous output); the rest of the prompt
is the observation span, and the call's sampled ids are the action span. A prompt that extends no
lineage (context condensed, a sub-agent's own history, a retry from an earlier turn, reasoning
dropped by the chat template) starts a new lineage of the same episode, linked to the lineage it
shares the longest prefix with; nothing is ever re-tokenised. Trajectories are written when the
episode ends (``/finish``, idle timeout, shutdown) with the episode's reward and status, every one
with ``episode_id`` = the session's episode id and its lineage link.

An episode split into several trajectories is also linked as ingest links one
(:func:`trajstore.ingest.builders.conversation.conversation_to_trajectories`): every part carries metadata
``episode = {"id", "part", "parts", "change"}`` (``part`` counts from 1 in the order the parts
opened; ``change`` is None for the first part, ``engine-prompt`` for a prompt that extended no
lineage, ingest's name for a new engine prompt after an action: the proxy sees the ids the server
got, not why the harness changed them, and ``new-lineage`` for an explicitly named lineage).

An episode may also be written in installments while it goes on: at an idle eviction, at a
``/finish`` that came while calls were still in flight, at the proxy's shutdown flush. The parts
written so far are immutable (the store keeps the first copy of an id), so the calls recorded
after an installment start a new part with a new id, the earlier context as its prompt, linked
to the part it continues (``link_kind`` ``continuation``), and ``change`` naming why
(:data:`AFTER_IDLE_EVICTION`, :data:`AFTER_FINISH`, :data:`AFTER_SHUTDOWN_FLUSH`). ``parts`` is
the count known when a part was written; an installment that may be continued carries
``episode`` even when it is a single part.
``group_id`` keeps its meaning, a GRPO group of rollouts of one prompt, and is set only when the
client names one (``X-Group-Id`` header on the session's first call, or ``group_id`` in
``/finish``): parts of one episode in one group would cancel each other's advantage.

A reply cut by ``max_tokens`` (finish reason ``length``) is stored as the ids the engine sampled,
without an end-of-turn token; the chat template appends its end-of-turn token after the cut
content, so the next prompt extends the stored tokens and that token opens the observation. A
template that renders the cut content with other ids (one that trims it, or a cut word that the
server re-tokenizes differently) puts the mismatch inside the last action's ids: a new lineage,
as for any prompt that does not extend, counted apart (``context_breaks_after_length``) since
nothing in the harness changed the context.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trajstore.builder import TrajectoryBuilder
from trajstore.errors import AdapterError
from trajstore.models import Trajectory
from trajstore.proxy.lineage import LineageSet, common_prefix
from trajstore.proxy.upstream import CallResult
from trajstore.writer import StoreWriter

log = logging.getLogger("trajstore.proxy")

PROXY_SOURCE = "trajstore/proxy"
"""The ``source`` column of trajectories the proxy writes."""

AFTER_IDLE_EVICTION = "after-idle-eviction"
"""``episode.change`` of the part a call opens after its episode was written as aborted for idling."""
AFTER_FINISH = "after-finish"
"""``episode.change`` of the part holding calls answered after ``/finish`` stopped waiting for them."""
AFTER_SHUTDOWN_FLUSH = "after-shutdown-flush"
"""``episode.change`` of the part holding calls answered after the proxy's shutdown flush."""

DEFAULT_FINISH_BATCH_MAX = 512
"""Trajectories waiting for a flush that end a group commit's window at once."""

@dataclass
class VersionedSlice:
    """A piece of one call's generated tokens produced under one version (or flagged).

    Attributes:
        start, end: token offsets within the call's output.
        version: the policy version recorded on the action span (the oldest when flagged).
        flagged: (min, max) versions when the piece may mix two versions (no boundary reported):
            the span is stored with ``policy_version`` = min and ``policy_version_max`` = max.
    """

    start: int
    end: int
    version: int
    flagged: tuple[int, int] | None = None


@dataclass
class Evicted:
    """An episode written as aborted after idling, kept so that a later call under its key
    continues it (:meth:`Recorder.open`) instead of starting an unlinked one."""

    episode: str
    parts_written: int
    trajectory_ids: list[str]
    """Its trajectories written at idle evictions (this one and any before)."""
    prompt_id: str | None
    group_id: str | None
    metadata: dict[str, Any]
    calls: int
    context_breaks: int
    reward: float | None
    reward_raw: Any
    lineages: LineageSet | None = None
    """Its lineages (their tokens), so that the later call attaches to the one it extends."""
    taint: str | None = None
    """The status its errors impose (:meth:`Session.mark`), kept for its continuation and ``/finish``."""
    written: asyncio.Future[None] | None = None
    """Done once its parts are written (the eviction registers it before it writes them)."""
    finishing: bool = False
    """A ``/finish`` is setting its outcome on the stored parts (another one waits its turn: 409)."""


@dataclass
class Session:
    """One episode in progress (see the module docstring)."""

    key: str
    episode: str
    prompt_id: str | None
    tokenizer: str | None
    extra_metadata: dict[str, Any]
    created: float = field(default_factory=time.monotonic)
    last_active: float = field(default_factory=time.monotonic)
    lineages: LineageSet = field(default_factory=LineageSet)
    """Its lineages and the trajectories recorded since the last installment."""
    calls: int = 0
    in_flight: int = 0
    context_breaks: int = 0
    context_breaks_after_length: int = 0
    """Of the context breaks, those inside the last action's ids right after a ``length`` finish."""
    errors: list[str] = field(default_factory=list)
    taint: str | None = None
    reward: float | None = None
    reward_raw: Any = None
    mixed_calls: list[dict[str, Any]] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    recording: asyncio.Task[None] | None = None
    """The call being recorded after its answer went out (each waits for the one before)."""
    _idle: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self._idle.set()

    def begin(self) -> None:
        """A call started (it counts until its recording is done)."""
        self.in_flight += 1
        self._idle.clear()
        self.last_active = time.monotonic()

    parts_written: int = 0
    """Parts of this episode already in the store (earlier installments)."""
    pending_calls: int = 0
    """Calls recorded since the last installment."""
    evicted_ids: list[str] = field(default_factory=list)
    """Trajectories of this episode written as aborted at idle evictions."""
    late: bool = False
    """``/finish`` ended the episode while calls were in flight: each one answered is a late call."""
    requested_status: str | None = None
    """The status the client asked for when that ``/finish`` ended it (late parts keep it)."""
    cut_calls: int = 0
    """Calls of this episode the shutdown cut at its deadline."""
    on_idle: Callable[[], None] | None = None
    """Called once when the last call in flight ends (the late calls' part is then written)."""
    finishing: bool = False
    """A ``/finish`` is ending it (waiting for its calls): idle eviction leaves it alone."""
    evicted_written: asyncio.Future[None] | None = None
    """The write of the idle-evicted parts this session continues, while it may still run."""

    def end(self) -> None:
        """A call is answered and recorded (or failed)."""
        self.in_flight = max(0, self.in_flight - 1)
        self.last_active = time.monotonic()
        if self.in_flight == 0:
            self._idle.set()
            if self.on_idle is not None:
                cb, self.on_idle = self.on_idle, None
                cb()

    async def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no call is in flight or being recorded; False after `timeout_s`."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except asyncio.TimeoutError:
            return False
        return True

    group_id: str | None = None
    """The GRPO group the client named (None: none)."""

    @property
    def episode_id(self) -> str:
        """``<session key>.<random>``: the trajectories' id prefix and metadata ``episode.id``."""
        return f"{self.key}.{self.episode}"

    def mark(self, taint: str, error: str) -> None:
        """Record an error; the episode can no longer end ``completed`` or ``truncated``
        (``failed`` for upstream errors wins over ``aborted`` for client disconnects)."""
        self.errors.append(error)
        if self.taint != "failed":
            self.taint = taint


RESERVED_METADATA_KEYS: frozenset[str] = frozenset({
    "session", "episode", "calls", "context_breaks", "context_breaks_after_length", "requested_status", "end_reason",
    "errors", "mixed_version_calls", "calls_in_flight", "calls_cut_at_shutdown",
    "finished_after_eviction"})
"""Metadata keys the proxy writes on each trajectory; a client's ``/finish`` metadata may not use them."""


STAT_COUNTERS: tuple[str, ...] = ("sessions", "calls_recorded", "trajectories_written", "lineages", "context_breaks",
                                   "context_breaks_after_length", "mixed_version_calls", "sessions_evicted",
                                   "late_calls", "calls_after_shutdown_flush", "calls_cut_at_shutdown")
"""Counters of ``/proxy/stats`` that are listed from the start, zeros included (``lineages``: lineages
opened, :mod:`trajstore.proxy.lineage`; ``lineages_per_episode`` beside them counts ended episodes by
their number of lineages)."""


def _mixed_calls(mixed: list[dict[str, Any]], t: Trajectory, part: int) -> list[dict[str, Any]]:
    """The calls of `mixed` stored in `t` (part `part`): by response id (a sub-agent's calls may
    have moved to another part, :mod:`trajstore.proxy.lineage`), else by the part recorded."""
    ids = {sp.call_id for sp in t.spans if sp.kind == "action"}
    return [{**m, "part": part} for m in mixed if (m["call_id"] in ids if m["call_id"] is not None
                                                   else m["part"] == part)]


class Recorder:
    """Open sessions and the writer; every method runs on the proxy's event loop.

    Args:
        writer: where trajectories go (flushed by :meth:`persist` before a finish returns).
        model_name, tokenizer: recorded in the ``model`` / ``tokenizer`` columns (tokenizer:
            None = the response's model name).
        run_metadata: merged into every trajectory's metadata (e.g. the followed run).
        on_written: called with each written trajectory (the staleness gate counts them).
        prepare: applied to each batch of trajectories before it is written (``traj proxy
            --redact``: the redactor, so a secret the harness sent is never stored).
        batch_s, batch_max: the group commit's window (s) and size (:meth:`persist`).
    """

    def __init__(self, writer: StoreWriter, *, tokenizer: str | None, run_metadata: dict[str, Any],
                 on_written: Callable[[Trajectory], None] | None = None,
                 prepare: Callable[[Sequence[Trajectory]], list[Trajectory]] | None = None, batch_s: float = 0.0,
                 batch_max: int = DEFAULT_FINISH_BATCH_MAX):
        self.writer = writer
        self.prepare = prepare
        self.tokenizer = tokenizer
        self.run_metadata = dict(run_metadata)
        self.on_written = on_written
        self.sessions: dict[str, Session] = {}
        self.stats: Counter[str] = Counter({k: 0 for k in STAT_COUNTERS})
        self._length_break_logged = False
        self.calls_by_version: Counter[int] = Counter()
        self.lineages_per_episode: Counter[int] = Counter()
        """Ended episodes by lineage count (an episode continued after an idle eviction counts once,
        at its latest end)."""
        self._flush_lock = asyncio.Lock()
        self._written_gen = 0
        self._flushed_gen = 0
        self.batch_s = batch_s
        """Longest wait of a finished episode for others to share its shard (s); see :meth:`persist`."""
        self.batch_max = batch_max
        """Trajectories that end the wait at once."""
        self._waiting = 0
        self._full = asyncio.Event()
        self.hold_write: Callable[[Sequence[Trajectory]], Awaitable[None]] | None = None
        """Awaited with the trajectories before each write when set: a test holds a write there
        to meet what may happen meanwhile (a call, a ``/finish``) without guessing at timings."""

    # -- sessions -------------------------------------------------------------------------------

    def open(self, key: str, *, prompt_id: str | None, group_id: str | None = None,
             metadata: dict[str, Any] | None = None, evicted: Evicted | None = None) -> Session:
        """The open session `key`, or a new episode for it (`group_id`: a GRPO group the client
        named), or the continuation of the `evicted` episode: same episode id, next part number."""
        s = self.sessions.get(key)
        if s is None:
            if evicted is None:
                s = Session(key=key, episode=uuid.uuid4().hex[:12], prompt_id=prompt_id, tokenizer=self.tokenizer,
                            extra_metadata=dict(metadata or {}), group_id=group_id)
                self.stats["sessions"] += 1
            else:
                s = Session(key=key, episode=evicted.episode, prompt_id=evicted.prompt_id or prompt_id,
                            tokenizer=self.tokenizer, extra_metadata={**evicted.metadata, **(metadata or {})},
                            group_id=evicted.group_id or group_id, parts_written=evicted.parts_written,
                            evicted_ids=list(evicted.trajectory_ids),
                            calls=evicted.calls, context_breaks=evicted.context_breaks,
                            reward=evicted.reward, reward_raw=evicted.reward_raw,
                            evicted_written=evicted.written, taint=evicted.taint)
                if evicted.lineages is not None:
                    s.lineages = evicted.lineages
                s.lineages.set_resume_change(AFTER_IDLE_EVICTION)
            self.sessions[key] = s
        return s

    def record(self, s: Session, call: CallResult, slices: Sequence[VersionedSlice], *, observation_role: str,
               observation_cause: str | None, lineage: str | None = None, logprob_mode: str | None = None) -> None:
        """Append one call to the lineage of its session it extends, or open one (see the module
        docstring and :mod:`trajstore.proxy.lineage`); `lineage`: the lineage the client named;
        `logprob_mode`: what the upstream's log-probs are (:mod:`trajstore.proxy.logprob_mode`; None = not known).

        Raises:
            AdapterError: the upstream gave no prompt token ids.
        """
        a = call.action
        if a.prompt_token_ids is None:
            raise AdapterError("the upstream returned no prompt_token_ids, so the observation between calls "
                               "cannot be cut from the ids it saw (vLLM: return_token_ids; see the README)")
        prompt = np.asarray(a.prompt_token_ids, dtype=np.int32)
        r = s.lineages.route(prompt, lineage)
        x = r.lineage
        if r.opens:
            b = TrajectoryBuilder(trajectory_id=f"{s.episode_id}.{s.lineages.parts}", prompt_id=s.prompt_id,
                                  group_id=s.group_id, source=PROXY_SOURCE, model=call.model,
                                  tokenizer=s.tokenizer or call.model)
            b.add_prompt(prompt, role="user")
            number = s.lineages.parts + 1
        else:
            assert x.part is not None
            b, number = x.part.builder, x.part.number
            if len(prompt) > len(x.tokens):
                b.add_observation(prompt[len(x.tokens):], role=observation_role, cause_id=observation_cause)
        ids = a.token_ids
        lps = a.logprobs
        has_lp = len(lps) == 0 or not all(v != v for v in lps.tolist())  # NaN != NaN
        for k, sl in enumerate(slices):
            newest = None
            if sl.flagged is not None:
                lo, newest = sl.flagged
                s.mixed_calls.append({"call_id": a.call_id, "min_version": lo, "max_version": newest, "part": number})
                self.stats["mixed_version_calls"] += 1
            else:
                self.calls_by_version[sl.version] += 1
            b.add_action(ids[sl.start:sl.end], lps[sl.start:sl.end] if has_lp else None,
                         policy_version=sl.version, policy_version_max=newest, finish_reason=a.finish_reason,
                         sampling=a.sampling, call_id=a.call_id, tool_call_ids=a.tool_call_ids or None,
                         logprob_mode=logprob_mode if has_lp else None,
                         timing=a.timing, usage=a.usage if k == 0 else None)  # the call's counts once
        if r.unmatched:
            s.context_breaks += 1
            self.stats["context_breaks"] += 1
            c = r.closest
            if c is not None and c.last_finish == "length":
                at = common_prefix(prompt, c.tokens)
                if at >= c.last_action_start:
                    self._count_length_break(s, c.tokens, c.last_action_start, at, prompt)
        if r.opens:
            self.stats["lineages"] += r.lineage not in s.lineages.lineages
            s.lineages.open(r, b).observation = (observation_role, observation_cause)
        s.lineages.extend(x, prompt, np.asarray(ids))
        x.last_finish = a.finish_reason
        s.calls += 1
        s.pending_calls += 1
        self.stats["calls_recorded"] += 1

    def _count_length_break(self, s: Session, tokens: np.ndarray, action_start: int, at: int,
                            prompt: np.ndarray) -> None:
        """A prompt after a ``length`` finish that differs inside the cut reply's own ids."""
        s.context_breaks_after_length += 1
        self.stats["context_breaks_after_length"] += 1
        if self._length_break_logged:
            return
        self._length_break_logged = True
        k = at - action_start
        log.warning("session %s: the prompt after a reply cut by max_tokens (finish_reason length) renders that "
                    "reply with other ids from its token %d on (sampled %s, prompt %s): the chat template trims "
                    "or re-tokenizes cut content; a new trajectory of the episode starts (counted in "
                    "context_breaks_after_length; logged once)", s.key, k, tokens[at:at + 4].tolist(),
                    prompt[at:at + 4].tolist())

    def set_reward(self, s: Session, reward: float | None, raw: Any = None) -> None:
        s.reward, s.reward_raw = reward, raw

    def close(self, key: str, status: str, *, reason: str | None = None, metadata: dict[str, Any] | None = None,
              requested_status: str | None = None, notes: dict[str, Any] | None = None,
              provisional: bool = False, resume_change: str | None = None) -> tuple[list[Trajectory], str]:
        """End the episode `key`: :meth:`take` its last installment and forget the session (calls
        still in flight may be recorded into it later: `resume_change` names their part)."""
        s = self.sessions.pop(key)
        out, final = self.take(s, status, reason=reason, metadata=metadata, requested_status=requested_status,
                               notes=notes, provisional=provisional, resume_change=resume_change)
        self.stats[f"episodes_{final}"] += 1
        ls = s.lineages
        if ls.lineages:
            if ls.counted:  # ended before (idle eviction), now with its new count
                self.lineages_per_episode[ls.counted] -= 1
            ls.counted = len(ls.lineages)
            self.lineages_per_episode[ls.counted] += 1
        return out, final

    def take(self, s: Session, status: str, *, reason: str | None = None, metadata: dict[str, Any] | None = None,
             requested_status: str | None = None, notes: dict[str, Any] | None = None, provisional: bool = False,
             resume_change: str | None = None) -> tuple[list[Trajectory], str]:
        """One installment of session `s`: the trajectories recorded since the last one (not yet
        persisted) and their final status; the session goes on, its next call opening a new part
        whose ``episode.change`` is `resume_change`.

        `status` is what the harness asked for (or `requested_status`, kept in the metadata); a
        session that saw an upstream error ends ``failed`` and one whose client went away mid-call
        ends ``aborted`` instead of ``completed`` / ``truncated``.

        Args:
            notes: the proxy's own metadata (reserved keys) for these parts.
            provisional: more parts may follow: ``episode`` is written even on a single part.
        """
        final = status
        if s.taint is not None and status in ("completed", "truncated"):
            final = s.taint
        s.lineages.settle()  # a sub-agent that inherited its parent's context trades places with it
        pending = s.lineages.pending
        parts = s.lineages.parts
        linked = parts > 1 or provisional
        out = []
        abandoned = s.lineages.abandoned()
        for p in pending:
            part = p.number
            p.builder.set_reward(s.reward, raw=s.reward_raw)
            t = p.builder.finish(final)
            t.prompt_id = s.prompt_id
            t.group_id = s.group_id
            t.episode_id = s.episode_id
            kind = p.link_kind()
            if kind is not None:
                t.parent_trajectory_id, t.fork_point, t.link_kind = p.parent_id, p.fork_point, kind
            t.abandoned = t.trajectory_id in abandoned
            t.metadata.update({
                **self.run_metadata, **s.extra_metadata, **(metadata or {}),
                "session": s.key,
                **({"episode": {"id": s.episode_id, "part": part, "parts": parts,
                                "change": p.change}} if linked else {}),
                "calls": s.calls, "context_breaks": s.context_breaks,
                **({"context_breaks_after_length": s.context_breaks_after_length}
                   if s.context_breaks_after_length else {}),
                "requested_status": requested_status or status,
                **({"end_reason": reason} if reason else {}), **({"errors": s.errors[:20]} if s.errors else {}),
                **({"mixed_version_calls": _mixed_calls(s.mixed_calls, t, part)} if s.mixed_calls else {}),
                **(notes or {}),
            })
            out.append(t)
        s.parts_written = parts
        s.lineages.written(resume_change)
        s.pending_calls = 0
        return out, final

    def idle(self, timeout_s: float) -> list[str]:
        """Keys of sessions without a call in flight nor a ``/finish`` ending them, idle for
        `timeout_s` seconds."""
        now = time.monotonic()
        return [k for k, s in self.sessions.items()
                if s.in_flight == 0 and not s.finishing and now - s.last_active >= timeout_s]

    # -- persistence ----------------------------------------------------------------------------

    async def persist(self, trajectories: Sequence[Trajectory]) -> None:
        """Write and flush, so that the episodes are durable when this returns (and ``/finish``
        answers). Group commit with a bounded delay: the first caller of a window waits up to
        :attr:`batch_s` seconds (or until :attr:`batch_max` trajectories are waiting) for others,
        then one flush writes them all as one shard; callers arriving meanwhile return with it.
        ``batch_s = 0``: flush at once (concurrent callers still share the shard)."""
        if not trajectories:
            return
        if self.hold_write is not None:
            await self.hold_write(trajectories)
        if self.prepare is not None:
            trajectories = await asyncio.to_thread(self.prepare, trajectories)
        await asyncio.to_thread(self.writer.write_many, trajectories)
        self._written_gen += 1
        self._waiting += len(trajectories)
        mine = self._written_gen
        if self._waiting >= self.batch_max:
            self._full.set()
        async with self._flush_lock:
            if self._flushed_gen < mine:
                if self.batch_s > 0 and not self._full.is_set():
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self._full.wait(), self.batch_s)
                gen, self._waiting = self._written_gen, 0
                self._full.clear()
                await asyncio.to_thread(self.writer.flush)
                self._flushed_gen = gen
        self.stats["trajectories_written"] += len(trajectories)
        if self.on_written is not None:
            for t in trajectories:
                self.on_written(t)

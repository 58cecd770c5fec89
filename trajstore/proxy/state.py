"""The state of one ``traj proxy`` server (:class:`ProxyState`, at ``app.state.proxy``): open
sessions and their recording, the calls in flight, error counters, the staleness gate, weight
sync, the upstream client, and the episode lifecycle: idle eviction (continued by a later call),
``end_session`` (with late calls after ``/finish``) and shutdown (:mod:`~trajstore.proxy.shutdown`)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import httpx
import numpy as np

from trajstore.errors import AdapterError, TrajstoreError
from trajstore.models import CallTiming, Trajectory
from trajstore.proxy.config import ProxyConfig
from trajstore.proxy.inflight import InFlightCall
from trajstore.proxy.logprob_mode import LogprobMode
from trajstore.proxy.recorder import AFTER_FINISH, Evicted, Recorder, Session
from trajstore.proxy.staleness import GATE_POLL_S, StalenessGate
from trajstore.proxy.sync import ModelPathWatch, Ticket, Versioning, WeightSync
from trajstore.proxy.upstream import parse_version, read_call
from trajstore.proxy.version_labels import label_versions
from trajstore.reader import read_trajectories_by_id
from trajstore.redact import Redactor
from trajstore.redact.lineage import redact_linked
from trajstore.run_config import RunConfigError, run_batch_size
from trajstore.store import Store, open_store
from trajstore.writer import StoreWriter

log = logging.getLogger("trajstore.proxy")

EVICTED_KEYS_MAX = 10_000
"""Session keys of idle-evicted episodes remembered for a later call to continue (oldest dropped)."""
EVICTED_TOKENS_MAX = 1 << 24
"""Token ids of idle-evicted episodes' lineages kept for a later call to attach to (4 bytes each:
64 MiB); beyond it the oldest evicted episodes are forgotten as beyond :data:`EVICTED_KEYS_MAX`
(a later call under such a key starts a new episode)."""


def redactor_for(cfg: ProxyConfig, store: Store | None = None
                 ) -> Callable[[Sequence[Trajectory]], list[Trajectory]] | None:
    """``--redact``: what scrubs each batch of trajectories before it is stored (traj redact's
    default rules, each child's ``fork_point`` recomputed when its shared prefix changed:
    :func:`~trajstore.redact.lineage.redact_linked`, a parent written earlier read from `store`),
    its tokenizer loaded now so a proxy that cannot redact never starts; None without ``--redact``.

    Raises:
        TrajstoreError: no ``--tokenizer``, or it cannot be loaded.
    """
    if not cfg.redact:
        return None
    if cfg.tokenizer is None:
        raise TrajstoreError("--redact needs --tokenizer NAME: secrets are found in the text the recorded token ids "
                             "decode to")
    redactor = Redactor()
    loaded = redactor.token_bytes(cfg.tokenizer)
    if isinstance(loaded, str):
        raise TrajstoreError(f"--redact: {loaded}")
    where = store if store is not None else open_store(cfg.store)

    def stored_tokens(ids: list[str]) -> dict[str, np.ndarray]:
        table = read_trajectories_by_id(where, ids, columns=["trajectory_id", "tokens"])
        return {i: np.asarray(t) for i, t in zip(table.column("trajectory_id").to_pylist(),
                                                  table.column("tokens").to_pylist())}

    return lambda batch: redact_linked(redactor.redact_or_same, batch, stored_tokens)


UPSTREAM_KEEPALIVE_S = 2.0
"""An idle connection to the upstream is reused for this long at most (s): shorter than the keep-alive
of the servers in front of which the proxy runs (uvicorn's default, vLLM's and ``traj serve``'s: 5 s).
With httpx's default of 5 s too, a call sent on a connection the server was closing at that moment
failed with ``upstream unreachable: ReadError`` (502) and ended its episode (seen under load after a
5 s pause between calls)."""


async def _evicted_written(s: Session) -> None:
    """Wait until the parts of the idle eviction that `s` continues are written (their write
    failed: raise its :class:`TrajstoreError`, the new parts would link to missing parents)."""
    if s.evicted_written is not None:
        await asyncio.shield(s.evicted_written)
        s.evicted_written = None


class ProxyState:
    """Everything the routes share; built in the app's lifespan, read by the routes from
    ``request.app.state.proxy``.

    Sessions (open episodes) live in ``recorder.sessions``; ``calls`` are the model calls in
    flight (until recorded); ``errors`` counts failures by kind; ``gate`` is the staleness gate
    (None without ``--max-staleness``), ``sync`` the weight sync (None without ``--run``);
    ``recordings`` are answered calls still being recorded; ``evicted`` the recently idle-evicted
    episodes by session key; ``closing`` is set once a shutdown began (no new calls).
    """

    def __init__(self, cfg: ProxyConfig):
        self.cfg = cfg
        self.max_request_bytes = int(cfg.max_request_mb * 2**20)
        self.store = open_store(cfg.store, storage_options=cfg.storage_options)
        self.policy_store = (open_store(cfg.policy_store, storage_options=cfg.storage_options) if cfg.policy_store
                             else self.store)
        key = os.environ.get(cfg.upstream_key_env)
        self.upstream_headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.client_token = cfg.client_token()
        self.client = httpx.AsyncClient(base_url=cfg.upstream, timeout=httpx.Timeout(cfg.upstream_timeout_s),
                                        limits=httpx.Limits(max_connections=1024, max_keepalive_connections=256,
                                                            keepalive_expiry=UPSTREAM_KEEPALIVE_S))
        self.writer = StoreWriter(self.store, flush_rows=1 << 30, flush_mb=1 << 20, flush_seconds=None)
        self.gate: StalenessGate | None = None
        if cfg.max_staleness is not None:
            if not cfg.follow_run:
                raise TrajstoreError("--max-staleness needs --run RUN (the run whose consumption it tracks)")
            self.gate = StalenessGate(self.policy_store, cfg.follow_run, max_staleness=cfg.max_staleness,
                                      batch_size=cfg.batch_size or self._run_batch_size(),
                                      hold_timeout_s=cfg.hold_timeout_s,
                                      poll_s=min(GATE_POLL_S, cfg.poll_s))
        self.recorder = Recorder(self.writer, tokenizer=cfg.tokenizer,
                                 run_metadata={"run_id": cfg.follow_run} if cfg.follow_run else {},
                                 on_written=self.gate.on_written if self.gate else None,
                                 prepare=redactor_for(cfg, self.store), batch_s=cfg.finish_batch_s)
        self.versioning = Versioning(None if cfg.follow_run else cfg.policy_version, mode=cfg.reload_mode)
        self.sync: WeightSync | None = None
        if cfg.follow_run:
            self.sync = WeightSync(self.client, self.policy_store, cfg.follow_run, self.versioning,
                                   headers=self.upstream_headers, poll_s=cfg.poll_s,
                                   drain_timeout_s=cfg.drain_timeout_s, cache_dir=cfg.weights_cache,
                                   extra_body={"mode": "retract"} if cfg.reload_mode == "tag" and cfg.engine == "vllm"
                                   else None, engine=cfg.engine)
        self.model_path = None if self.sync else ModelPathWatch(self.client, self.versioning,
                                                                headers=self.upstream_headers, poll_s=cfg.poll_s)
        self._version_warned = False
        self.tasks: list[asyncio.Task[Any]] = []
        self.recordings: set[asyncio.Task[None]] = set()  # calls answered, being recorded
        self.calls: set[InFlightCall] = set()
        self.evicted: OrderedDict[str, Evicted] = OrderedDict()
        self.eviction_last_run: float | None = None
        """When the eviction task last ended a pass (epoch s; None: not yet)."""
        self._evicted_tokens = 0
        self.started = time.time()
        self.errors: dict[str, int] = {}
        self.logprobs = LogprobMode(cfg.logprob_mode, cfg.engine)
        """What the upstream's log-probs are (recorded on every action span)."""
        self.upstream_reports_version = False
        """Whether an answer carried the upstream's own weight version (traj serve, SGLang): it labels
        the calls, before a version set by hand (POST /proxy/policy_version)."""
        self.closing = False
        self.flushed = False
        """The shutdown flush took the open episodes' calls (its write may still run): calls
        recorded from now on go into later parts and are counted as after it."""
        self.shutdown: asyncio.Task[None] | None = None
        """The shutdown's drain once a stop signal began it (:mod:`~trajstore.proxy.shutdown`)."""
        self.cut_now = asyncio.Event()
        """Set by a second stop signal: the drain cuts the calls in flight at once."""
        self._background: set[asyncio.Task[Any]] = set()
        self.hold_evict: Callable[[Session], Awaitable[None]] | None = None
        """Awaited with each session an eviction pass chose, before its task looks at it again;
        a test holds an eviction there to meet a ``/finish`` or a call landing meanwhile."""
        self.hold_finish: Callable[[Session], Awaitable[None]] | None = None
        """Awaited by ``/finish`` once its session's calls are done, right before it ends the
        episode; a test holds a ``/finish`` there (it has claimed the session, not yet closed it)."""

    def _run_batch_size(self) -> int:
        try:
            return run_batch_size(self.policy_store, self.cfg.follow_run or "")
        except RunConfigError as e:
            raise TrajstoreError(f"--max-staleness needs the trainer's batch size: pass --batch-size, or start "
                                 f"the trainer first ({e})") from None

    def upstream_auth(self, request_headers: Mapping[str, str]) -> dict[str, str]:
        """The Authorization header for the upstream: the configured upstream key; without one, a
        client's own Authorization header goes upstream (unless it is the proxy's token)."""
        if self.upstream_headers:
            return self.upstream_headers
        got = request_headers.get("authorization")
        return {"Authorization": got} if got and not self.client_token else {}

    def count_error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1

    # -- lifecycle: start, idle eviction, ending an episode, recording, shutdown --

    async def start(self) -> None:
        """Learn what the upstream's log-probs are (and say it), load the staleness gate's
        counts, start weight sync or the model-path watch and the idle reaper.

        Raises:
            TrajstoreError: ``--logprob-mode`` contradicts what the upstream reports.
        """
        await self.logprobs.ask(self.client, self.upstream_headers, timeout_s=2.0)
        self.logprobs.announce()
        if self.gate is not None:
            await asyncio.to_thread(self.gate.load_written)
        if self.sync is not None:
            await self.sync.poll_once()  # the upstream serves the latest published version first
            self.tasks.append(asyncio.create_task(self.sync.run()))
        if self.model_path is not None:
            await self.model_path.poll_once(timeout_s=2.0)  # an upstream started on a published version
            self.tasks.append(asyncio.create_task(self.model_path.run()))
        self.tasks.append(asyncio.create_task(self._reaper()))

    async def release(self, call: InFlightCall) -> None:
        """A call (:class:`InFlightCall`, registered in :attr:`calls`) that will not be recorded (it
        failed, was cut, or its client left) ends here;
        an answered one is ended by its recording. A call without a session ends its episode."""
        if call.answered:
            return
        call.end()
        if call.ephemeral:
            await self.end_session(call.session.key, "completed")

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _reaper(self) -> None:
        """Session eviction: an episode without a call for ``session_timeout_s`` is written as
        aborted, and remembered so that a later call under its key continues it. Nothing but the
        shutdown's cancel stops it: a pass that fails is logged and counted (``errors.eviction``)
        and the next tick tries again; ``/proxy/stats`` says when a pass last ended."""
        while True:
            await asyncio.sleep(min(1.0, self.cfg.session_timeout_s / 4))
            try:
                await self.evict_idle()
            except Exception:  # any fault of one pass; the task must outlive it (asyncio.CancelledError is not one)
                self.count_error("eviction")
                log.exception("idle eviction: a pass failed; the next one runs in a second")
            self.eviction_last_run = time.time()

    async def evict_idle(self) -> int:
        """One eviction pass: each session idle for ``session_timeout_s`` is ended and written as
        aborted in a task of its own (the writes share a group commit, and the next pass does not
        wait for them: a slow flush never delays the next evictions); returns how many tasks.
        Each task looks at its session again right before it ends it: a call or a ``/finish``
        may have come meanwhile."""
        timeout = self.cfg.session_timeout_s
        due = [s for key in self.recorder.idle(timeout) if (s := self.recorder.sessions.get(key)) is not None]
        for s in due:
            task = asyncio.get_running_loop().create_task(self._evict(s, timeout))
            self._background.add(task)
            task.add_done_callback(self._evict_done)
        return len(due)

    def _evict_done(self, task: asyncio.Task[bool]) -> None:
        self._background.discard(task)
        if task.cancelled():
            return
        e = task.exception()
        if e is not None:  # a fault of one eviction: counted and logged, the others and the task go on
            self.count_error("eviction")
            log.error("idle eviction failed: %s: %s", type(e).__name__, e, exc_info=e)

    async def _evict(self, s: Session, timeout: float) -> bool:
        """Write idle session `s` as aborted (False: it is not idle any more). Its continuation is
        registered before the write starts: a call under its key during the write (the group
        commit's window, the flush) joins the episode as a later part; that part's own write
        waits for this one. No await comes between that look and the session's close."""
        if self.hold_evict is not None:
            await self.hold_evict(s)
        if self.recorder.sessions.get(s.key) is not s or s.in_flight or s.finishing \
                or time.monotonic() - s.last_active < timeout:
            return False
        calls = s.pending_calls
        written: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def register(trajs: list[Trajectory]) -> None:
            if trajs:
                self._evicted(s, trajs, calls, written)

        try:
            await self.end_session(s.key, "aborted", reason=f"idle for {timeout:g}s", provisional=True,
                                   before_write=register)
        except TrajstoreError as e:  # the parts stay remembered: a later /finish or call still finds them
            self.count_error("eviction_write")
            log.error("session %s: the idle episode could not be written: %s", s.key, e)
            written.set_exception(e)
            written.exception()  # retrieved: whoever waits on it logs its own failure
        else:
            written.set_result(None)
        return True

    def _evicted(self, s: Session, trajs: list[Any], calls: int, written: asyncio.Future[None]) -> None:
        ids = [*s.evicted_ids, *(t.trajectory_id for t in trajs)]
        self.evicted[s.key] = Evicted(episode=s.episode, parts_written=s.parts_written, trajectory_ids=ids,
                                      prompt_id=s.prompt_id, group_id=s.group_id, metadata=dict(s.extra_metadata),
                                      calls=s.calls, context_breaks=s.context_breaks, reward=s.reward,
                                      reward_raw=s.reward_raw, lineages=s.lineages, written=written,
                                      taint=s.taint)
        self.evicted.move_to_end(s.key)
        self._evicted_tokens += s.lineages.token_count
        while len(self.evicted) > EVICTED_KEYS_MAX or (self._evicted_tokens > EVICTED_TOKENS_MAX
                                                       and len(self.evicted) > 1):
            self._forget_evicted(next(iter(self.evicted)))
        self.recorder.stats["sessions_evicted"] += 1
        log.warning("session %s: evicted after %g s without a call (--session-timeout): %d trajectory(ies) with %d "
                    "call(s) written as aborted (episode %s); a later call under this key continues the episode as "
                    "a new part", s.key, self.cfg.session_timeout_s, len(trajs), calls, s.episode_id)

    def take_evicted(self, key: str) -> Evicted | None:
        """The idle-evicted episode of session `key`, forgotten here (its next call continues it)."""
        ev = self.evicted.get(key)
        if ev is not None:
            self._forget_evicted(key)
        return ev

    def forget_evicted(self, key: str, ev: Evicted) -> None:
        """Forget idle-evicted episode `ev` of session `key` (its ``/finish`` set its outcome),
        unless a call took it meanwhile (that call continues the episode)."""
        if self.evicted.get(key) is ev:
            self._forget_evicted(key)

    def _forget_evicted(self, key: str) -> None:
        ev = self.evicted.pop(key)
        if ev.lineages is not None:
            self._evicted_tokens -= ev.lineages.token_count

    async def end_session(self, key: str, status: str, *, reason: str | None = None,
                          metadata: dict[str, Any] | None = None, prompt_id: str | None = None,
                          requested_status: str | None = None, notes: dict[str, Any] | None = None,
                          provisional: bool = False, late: bool = False,
                          before_write: Callable[[list[Trajectory]], None] | None = None
                          ) -> tuple[list[Any], str | None]:
        """End episode `key`: write its trajectories; return them and the final status.

        Args:
            requested_status: what the client asked for, when `status` overrides it.
            notes: the proxy's own metadata (reserved keys) for the trajectories.
            provisional: a later call may continue the episode (idle eviction).
            late: calls are still in flight (``/finish`` stopped waiting): each one answered is
                recorded into a continuation part (``after-finish``), written once they all ended.
            before_write: called with the trajectories once the session is closed, before they
                are written (idle eviction registers the continuation there).

        An episode continued after an idle eviction is written only once that eviction's parts
        are (its first new part links to them: the writer wants a parent written first).
        """
        s = self.recorder.sessions.get(key)
        if s is None:
            return [], None
        if prompt_id is not None:
            s.prompt_id = prompt_id
        if late:
            s.late = True
            s.requested_status = requested_status or status
            s.extra_metadata.update(metadata or {})
            s.on_idle = lambda: self._spawn(self._write_late(s))
        trajs, final = self.recorder.close(key, status, reason=reason, metadata=metadata,
                                           requested_status=requested_status, notes=notes,
                                           provisional=provisional or late,
                                           resume_change=AFTER_FINISH if late else None)
        if before_write is not None:
            before_write(trajs)
        try:
            await _evicted_written(s)
            await self.recorder.persist(trajs)
        finally:
            if self.gate is not None:
                self.gate.release()  # one episode, however many trajectories it was stored as
        return trajs, final

    async def _write_late(self, s: Session) -> None:
        """The calls answered after ``/finish`` stopped waiting, as a continuation part (aborted)."""
        calls = s.pending_calls
        trajs, _ = self.recorder.take(s, "aborted", reason="answered after /finish",
                                      requested_status=s.requested_status)
        try:
            await self.recorder.persist(trajs)
        except TrajstoreError as e:
            log.error("session %s: %d call(s) answered after /finish could not be written: %s", s.key, calls, e)
            return
        if trajs:
            log.warning("session %s: %d call(s) answered after /finish (which waits --finish-wait %g s) stored as "
                        "part(s) %s of episode %s, aborted (late_calls)", s.key, calls, self.cfg.finish_wait_s,
                        ", ".join(str(t.metadata["episode"]["part"]) for t in trajs),
                        s.episode_id)

    def record_later(self, call: InFlightCall, data: dict[str, Any]) -> asyncio.Task[None]:
        """Record answered `call` (`data`: the upstream's answer, a stream accumulated) in a task of
        its own, off the client's path (parsing the ids and log-probs takes about a millisecond
        per call); a session's calls are recorded in order, and the call counts as in flight
        (``/finish`` waits) until it is recorded. A call without a session is its own episode:
        the caller awaits the task, so that the trajectory is durable when the answer goes out."""
        s = call.session
        call.answered = True
        call.ended_at = datetime.now(timezone.utc)
        end = Ticket(self.versioning.version, self.versioning.epoch)
        prev = s.recording

        async def run() -> None:
            try:
                if prev is not None:
                    await asyncio.wait([prev])
                # recorded once the flush took its episodes: stored in a part after it (a call
                # answered before but recorded after counts too; one cut by the shutdown is counted as cut)
                if await self._record(call, data, end) and self.flushed and not call.cut:
                    self.recorder.stats["calls_after_shutdown_flush"] += 1
            finally:
                call.end()
                if call.ephemeral:
                    await self.end_session(s.key, "completed")

        task = asyncio.create_task(run())
        s.recording = task
        self.recordings.add(task)
        task.add_done_callback(self.recordings.discard)
        return task

    async def _record(self, call: InFlightCall, data: dict[str, Any], end: Ticket) -> bool:
        """Append answered `call` to its session (True), to the lineage the client named or the
        one its prompt extends, its actions labelled with the versions between its start and
        `end`; a call that cannot be recorded fails the episode (False)."""
        s = call.session
        try:
            if not self.logprobs.asked:  # the upstream was not reachable at start-up
                await self.logprobs.ask(self.client, self.upstream_headers)
                if self.logprobs.asked:
                    self.logprobs.announce()
            result = read_call(data, call.body)
            result.action.timing = CallTiming(started_at=call.started_at, first_token_at=call.first_token_at,
                                              ended_at=call.ended_at)
            if result.reported_version is not None or result.version_spans:
                self.upstream_reports_version = True
            assert call.ticket is not None  # answered calls went through the versioning
            slices = label_versions(result, call.ticket, end, self.cfg.policy_version)
            if not self._version_warned and parse_version(result.reported_version) is None \
                    and not result.version_spans:
                self._warn_unknown_version(slices[0].version)
            role, cause = call.observation
            async with s.lock:
                self.recorder.record(s, result, slices, observation_role=role or "tool", observation_cause=cause,
                                     lineage=call.lineage, logprob_mode=self.logprobs.mode)
            if s.late:
                self.recorder.stats["late_calls"] += 1
        except (AdapterError, TrajstoreError, ValueError) as e:
            s.mark("failed", f"not recorded: {e}")
            self.count_error("record_failed")
            log.warning("session %s: call not recorded: %s", s.key, e)
            return False
        return True

    def _warn_unknown_version(self, version: int) -> None:
        """Once: a call whose version nothing told the proxy (no report, no load, no path, no POST)."""
        if self.sync is not None or self.versioning.source != "default":
            return
        self._version_warned = True
        log.warning("every call is recorded as version %d (--policy-version): the upstream reports no weight "
                    "version (metadata.weight_version) and the model path it serves (GET /v1/models) names no "
                    "published version (.../policies/<run>/v<N>); after reloading it by hand, POST "
                    "/proxy/policy_version {\"version\": N}, or let the proxy reload it (--run RUN)", version)

    async def close(self) -> None:
        """At the lifespan's end, after the shutdown's drain: the background writes, then the
        writer and the upstream client."""
        if self._background:
            await asyncio.wait(list(self._background), timeout=5)
        await asyncio.to_thread(self.writer.close)
        await self.client.aclose()

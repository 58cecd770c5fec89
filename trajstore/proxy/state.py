"""The state of one ``traj proxy`` server (:class:`ProxyState`, at ``app.state.proxy``): open
sessions and their recording, error counters, the staleness gate, weight sync, the upstream
client, and the episode lifecycle: idle eviction, ``end_session`` and shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from typing import Any

import httpx

from trajstore.errors import AdapterError, TrajstoreError
from trajstore.proxy.config import ProxyConfig
from trajstore.proxy.recorder import Recorder, Session
from trajstore.proxy.staleness import StalenessGate
from trajstore.proxy.sync import ModelPathWatch, Ticket, Versioning, WeightSync
from trajstore.proxy.upstream import parse_version, read_call
from trajstore.proxy.version_labels import label_versions
from trajstore.store import RUN_CONFIG_FILE, RUNS_DIR, open_store
from trajstore.writer import StoreWriter

log = logging.getLogger("trajstore.proxy")


class ProxyState:
    """Everything the routes share; built in the app's lifespan, read by the routes from
    ``request.app.state.proxy``.

    Sessions (open episodes) live in ``recorder.sessions``; ``errors`` counts failures by kind;
    ``gate`` is the staleness gate (None without ``--max-staleness``), ``sync`` the weight sync
    (None without ``--follow-run``); ``recordings`` are answered calls still being recorded.
    """

    def __init__(self, cfg: ProxyConfig):
        self.cfg = cfg
        self.max_request_bytes = int(cfg.max_request_mb * 2**20)
        self.store = open_store(cfg.store)
        self.policy_store = open_store(cfg.policy_store) if cfg.policy_store else self.store
        key = os.environ.get(cfg.upstream_key_env)
        self.upstream_headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.client_token = os.environ.get(cfg.client_token_env) or None
        self.client = httpx.AsyncClient(base_url=cfg.upstream, timeout=httpx.Timeout(cfg.upstream_timeout_s),
                                        limits=httpx.Limits(max_connections=1024, max_keepalive_connections=256))
        self.writer = StoreWriter(self.store, flush_rows=1 << 30, flush_mb=1 << 20, flush_seconds=None)
        self.gate: StalenessGate | None = None
        if cfg.max_staleness is not None:
            if not cfg.follow_run:
                raise TrajstoreError("--max-staleness needs --follow-run RUN (the run whose consumption it tracks)")
            self.gate = StalenessGate(self.policy_store, cfg.follow_run, max_staleness=cfg.max_staleness,
                                      batch_size=cfg.batch_size or self._run_batch_size(),
                                      hold_timeout_s=cfg.hold_timeout_s)
        self.recorder = Recorder(self.writer, tokenizer=cfg.tokenizer,
                                 run_metadata={"run_id": cfg.follow_run} if cfg.follow_run else {},
                                 on_written=self.gate.on_written if self.gate else None)
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
        self.started = time.time()
        self.errors: dict[str, int] = {}

    def _run_batch_size(self) -> int:
        try:
            cfg = json.loads(self.policy_store.fs.cat_file(
                self.policy_store.path(RUNS_DIR, self.cfg.follow_run or "", RUN_CONFIG_FILE)))
            return int(cfg["data"]["batch_size"])
        except (FileNotFoundError, KeyError, ValueError, TypeError) as e:
            raise TrajstoreError(f"--max-staleness needs the trainer's batch size: pass --batch-size, or start "
                                 f"the trainer first so that runs/{self.cfg.follow_run}/{RUN_CONFIG_FILE} exists "
                                 f"({type(e).__name__})") from None

    def count_error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1

    # -- lifecycle: start, idle eviction, ending an episode, recording, shutdown --

    async def start(self) -> None:
        if self.gate is not None:
            await asyncio.to_thread(self.gate.load_written)
        if self.sync is not None:
            await self.sync.poll_once()  # the upstream serves the latest published version first
            self.tasks.append(asyncio.create_task(self.sync.run()))
        if self.model_path is not None:
            await self.model_path.poll_once(timeout_s=2.0)  # an upstream started on a published version
            self.tasks.append(asyncio.create_task(self.model_path.run()))
        self.tasks.append(asyncio.create_task(self._reaper()))

    async def _reaper(self) -> None:
        """Session eviction: an episode without a call for ``session_timeout_s`` ends as aborted."""
        tick = min(1.0, self.cfg.session_timeout_s / 4)
        while True:
            await asyncio.sleep(tick)
            for key in self.recorder.idle(self.cfg.session_timeout_s):
                await self.end_session(key, "aborted", reason=f"idle for {self.cfg.session_timeout_s:g}s")

    async def end_session(self, key: str, status: str, *, reason: str | None = None,
                          metadata: dict[str, Any] | None = None, prompt_id: str | None = None
                          ) -> tuple[list[Any], str | None]:
        """End episode `key`: write its trajectories; return them and the final status."""
        s = self.recorder.sessions.get(key)
        if s is None:
            return [], None
        if prompt_id is not None:
            s.prompt_id = prompt_id
        trajs, final = self.recorder.close(key, status, reason=reason, metadata=metadata)
        try:
            await self.recorder.persist(trajs)
        finally:
            if self.gate is not None:
                self.gate.release()  # one episode, however many trajectories it was stored as
        return trajs, final

    def record_later(self, s: Session, data: dict[str, Any], body: dict[str, Any], chat: bool, ticket: Ticket,
                     obs: tuple[str | None, str | None], ephemeral: bool) -> asyncio.Task[None]:
        """Record an answered call in a task of its own, off the client's path (parsing the ids
        and log-probs takes about a millisecond per call); a session's calls are recorded in
        order, and the call counts as in flight (``/finish`` waits) until it is recorded. A call
        without a session is its own episode: the caller awaits the task, so that the
        trajectory is durable when the answer goes out."""
        end = Ticket(self.versioning.version, self.versioning.epoch)
        prev = s.recording

        async def run() -> None:
            try:
                if prev is not None:
                    await asyncio.wait([prev])
                await self.record(s, data, body, chat, ticket, end, obs)
            finally:
                s.end()
                if ephemeral:
                    await self.end_session(s.key, "completed")

        task = asyncio.create_task(run())
        s.recording = task
        self.recordings.add(task)
        task.add_done_callback(self.recordings.discard)
        return task

    async def record(self, s: Session, data: dict[str, Any], body: dict[str, Any], chat: bool, ticket: Ticket,
                     end: Ticket, obs: tuple[str | None, str | None]) -> None:
        """Append one answered call to its session; a call that cannot be recorded fails the episode."""
        try:
            call = read_call(data, body)
            slices = label_versions(call, ticket, end, self.cfg.policy_version)
            if not self._version_warned and parse_version(call.reported_version) is None and not call.version_spans:
                self._warn_unknown_version(slices[0].version)
            async with s.lock:
                self.recorder.record(s, call, slices, observation_role=obs[0] or "tool", observation_cause=obs[1])
        except (AdapterError, TrajstoreError, ValueError) as e:
            s.mark("failed", f"not recorded: {e}")
            self.count_error("record_failed")
            log.warning("session %s: call not recorded: %s", s.key, e)

    def _warn_unknown_version(self, version: int) -> None:
        """Once: a call whose version nothing told the proxy (no report, no load, no path, no POST)."""
        if self.sync is not None or self.versioning.source != "default":
            return
        self._version_warned = True
        log.warning("every call is recorded as version %d (--policy-version): the upstream reports no weight "
                    "version (metadata.weight_version) and the model path it serves (GET /v1/models) names no "
                    "published version (.../policies/<run>/v<N>); after reloading it by hand, POST "
                    "/proxy/policy_version {\"version\": N}, or let the proxy reload it (--follow-run RUN)", version)

    def begin_shutdown(self) -> None:
        """SIGINT / SIGTERM arrived: episodes held by the staleness gate are refused (503) at once,
        so they do not keep uvicorn's graceful shutdown, and the writing of open episodes in
        :meth:`stop`, waiting for its whole timeout."""
        if self.gate is not None:
            self.gate.closing = True

    async def stop(self) -> None:
        """At shutdown (the lifespan's end): stop the background tasks, let answered calls be
        recorded, write every open episode as ``aborted``, close the writer and the client."""
        for t in self.tasks:
            t.cancel()
        for t in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        if self.recordings:  # answered calls are recorded before their sessions are closed
            await asyncio.wait(list(self.recordings))
        for key in list(self.recorder.sessions):
            try:
                await self.end_session(key, "aborted", reason="proxy shut down")
            except Exception as e:  # noqa: BLE001 - keep closing the others
                log.error("could not write session %s at shutdown: %s", key, e)
        await asyncio.to_thread(self.writer.close)
        await self.client.aclose()

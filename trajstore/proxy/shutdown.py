"""How ``traj proxy`` stops (SIGTERM, SIGINT): it takes no new calls (503), makes every open
episode's recorded calls durable at once (written as ``aborted``), then lets the calls in flight
finish for up to ``--shutdown-grace`` seconds, storing those answered after the flush as
continuation parts, and cuts the rest itself with an error the client sees (:func:`drain`).
:class:`InFlightCall` is one call between its start and the end of its recording."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from trajstore.proxy.recorder import AFTER_SHUTDOWN_FLUSH, Session

if TYPE_CHECKING:
    from trajstore.proxy.state import ProxyState

log = logging.getLogger("trajstore.proxy")

SHUTDOWN_REASON = "proxy shutting down"
"""``end_reason`` of every episode the shutdown writes."""

CUT_WAIT_S = 5.0
"""Seconds the calls cut at the deadline get to send their error to the client (s)."""

RECORDING_WAIT_S = 1.0
"""Seconds the flush waits for answered calls still being parsed (s): they belong in it."""


def cut_message(grace_s: float, *, partial: bool = False) -> str:
    """What a client whose call the shutdown cut is told (503 body, or SSE error event);
    `partial`: the tokens it got before the cut are stored (finish reason ``abort``)."""
    return (f"traj proxy is shutting down and cut this call at the end of its {grace_s:g} s grace (--shutdown-grace) "
            "before the upstream finished answering; " + ("the tokens sent before the cut are stored (finish_reason "
                                                          "abort)" if partial else "nothing of it is stored"))


class InFlightCall:
    """One model call from its start to the end of its recording (or failure).

    Attributes:
        session: its episode (the call counts in ``session.in_flight`` while it is registered).
        task: the request's task, cancelled to cut a call that waits for the upstream.
        waiting: True while it waits for the upstream's answer (or for a drain-mode reload).
        stop_relay: while a stream is relayed: stops reading the upstream (the relay then sends
            the client an error event).
        answered: the upstream's answer is complete (its recording is under way: never cut).
        cut: the shutdown cut it.
        lineage: the lineage the client named for it (``X-Lineage-Id`` or the URL), or None.
    """

    __slots__ = ("session", "task", "waiting", "stop_relay", "answered", "cut", "lineage", "_registry", "_ended")

    def __init__(self, session: Session, registry: set[InFlightCall]):
        self.session = session
        self.task = asyncio.current_task()
        self.waiting = False
        self.stop_relay: Callable[[], object] | None = None
        self.answered = False
        self.cut = False
        self.lineage: str | None = None
        self._registry = registry
        self._ended = False
        registry.add(self)
        session.begin()

    def end(self) -> None:
        """The call is answered and recorded, or failed (idempotent)."""
        if not self._ended:
            self._ended = True
            self._registry.discard(self)
            self.session.end()

    def cut_now(self) -> bool:
        """Cut the call if it can be (it waits for the upstream, or its stream is being relayed);
        the client then gets an error from the proxy. True when cut."""
        if self.cut or self.answered:
            return False
        if self.stop_relay is not None:
            self.cut = True
            self.stop_relay()
            return True
        if self.waiting and self.task is not None:
            self.cut = True
            self.task.cancel(msg="cut at the shutdown deadline")
            return True
        return False


async def drain(st: ProxyState, grace_s: float, cut_now: asyncio.Event) -> None:
    """The shutdown after the signal (:meth:`ProxyState.begin_shutdown` has refused new calls):
    flush, wait for the calls in flight, cut the rest, write what they left. Its two log lines
    (``shutdown: flushed ...`` once the flush is durable, ``shutdown complete: ...`` at the end)
    are what a supervisor may wait for before it kills the proxy."""
    loop = asyncio.get_running_loop()
    if st.recordings:  # answered calls being parsed belong in the flush
        await asyncio.wait(list(st.recordings), timeout=RECORDING_WAIT_S)
    episodes, calls = await _flush(st)
    log.info("shutdown: flushed %d open episode(s) (%d recorded call(s)) as aborted; waiting up to %g s for %d "
             "call(s) in flight", episodes, calls, grace_s, len(st.calls))
    deadline = loop.time() + grace_s
    while st.calls and not cut_now.is_set() and loop.time() < deadline:
        await _write_idle(st)
        try:
            await asyncio.wait_for(cut_now.wait(), min(0.05, max(0.0, deadline - loop.time())))
        except asyncio.TimeoutError:
            pass
    cut = 0
    until = loop.time() + CUT_WAIT_S
    while st.calls and loop.time() < until:
        for c in list(st.calls):
            if c.cut_now():
                cut += 1
                c.session.cut_calls += 1
                c.session.errors.append("call cut at the shutdown deadline")
        await _write_idle(st)
        await asyncio.sleep(0.02)
    st.recorder.stats["calls_cut_at_shutdown"] += cut
    if st.recordings:
        await asyncio.wait(list(st.recordings), timeout=RECORDING_WAIT_S)
    if st.calls:
        log.warning("shutdown: %d call(s) still running after the cut (a client not reading its stream?); "
                    "what they answer from now on is not stored", len(st.calls))
    for key in list(st.recorder.sessions):
        await _end(st, key)
    log.info("shutdown complete: %d call(s) answered after the flush were stored, %d call(s) cut at the deadline",
             st.recorder.stats["calls_after_shutdown_flush"], cut)


async def _flush(st: ProxyState) -> tuple[int, int]:
    """Write every open episode's recorded calls as ``aborted``, in one shard; return (episodes,
    calls) written. An episode with calls in flight stays open: what they answer goes into a
    continuation part (``episode.change`` = ``after-shutdown-flush``)."""
    out = []
    episodes = calls = 0
    for key, s in list(st.recorder.sessions.items()):
        n = s.pending_calls
        if s.in_flight == 0:
            trajs, _ = st.recorder.close(key, "aborted", reason=SHUTDOWN_REASON, notes={"calls_in_flight": 0})
            if st.gate is not None:
                st.gate.release()
        elif n:
            trajs, _ = st.recorder.take(s, "aborted", reason=SHUTDOWN_REASON, notes={"calls_in_flight": s.in_flight},
                                        provisional=True, resume_change=AFTER_SHUTDOWN_FLUSH)
        else:
            continue  # only calls in flight: nothing recorded yet
        if trajs:
            episodes += 1
            calls += n
            out += trajs
    try:
        await st.recorder.persist(out)
    except Exception as e:  # noqa: BLE001 - keep shutting down (the writer retries at close); say so
        log.error("shutdown: could not write %d open episode(s) (%d recorded call(s)): %s", episodes, calls, e)
        episodes = calls = 0  # the flush line counts what is durable
    st.flushed = True
    return episodes, calls


async def _write_idle(st: ProxyState) -> None:
    """End the open episodes whose calls in flight have all ended (their continuation parts)."""
    for key, s in list(st.recorder.sessions.items()):
        if s.in_flight == 0:
            await _end(st, key)


async def _end(st: ProxyState, key: str) -> None:
    s = st.recorder.sessions.get(key)
    if s is None:
        return
    try:
        await st.end_session(key, "aborted", reason=SHUTDOWN_REASON,
                             notes={"calls_cut_at_shutdown": s.cut_calls} if s.cut_calls else None)
    except Exception as e:  # noqa: BLE001 - keep closing the others
        log.error("could not write session %s at shutdown: %s", key, e)

"""How ``traj proxy`` stops (SIGTERM, SIGINT): it takes no new calls (503), makes every open
episode's recorded calls durable at once (written as ``aborted``), then lets the calls in flight
finish for up to ``--shutdown-grace`` seconds, storing those answered after the flush as
continuation parts, and cuts the rest itself with an error the client sees: :func:`begin_shutdown`
runs :func:`drain`, :func:`shut_down` ends the server's state (its lifespan's end)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from trajstore.proxy.recorder import AFTER_SHUTDOWN_FLUSH
from trajstore.proxy.state import ProxyState

log = logging.getLogger("trajstore.proxy")

SHUTTING_DOWN = ("traj proxy is shutting down (SIGTERM / SIGINT): it takes no new calls; its open episodes are "
                 "stored as aborted")
"""What a call, a reward or a /finish that comes after the stop signal is told (503)."""

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


def begin_shutdown(st: ProxyState, on_drained: Callable[[], None] | None = None) -> None:
    """SIGINT / SIGTERM arrived (call it on the event loop): new calls are refused (503) from
    now on, episodes held by the staleness gate too, and :func:`drain` runs; `on_drained` is
    called when it is done (the server may then stop). A second call cuts the calls in flight at
    once instead of at the end of ``--shutdown-grace``."""
    if st.shutdown is not None:
        st.cut_now.set()
        return
    st.closing = True
    if st.gate is not None:
        st.gate.closing = True

    async def run() -> None:
        try:
            for t in st.tasks:  # no eviction, no reload, no polling during the drain
                t.cancel()
            for t in st.tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
            await drain(st, st.cfg.shutdown_grace_s, st.cut_now)
        finally:
            if on_drained is not None:
                on_drained()

    st.shutdown = asyncio.get_running_loop().create_task(run())


async def shut_down(st: ProxyState) -> None:
    """At the lifespan's end: the drain if no signal began it (an in-process server), then the
    state closes (:meth:`ProxyState.close`)."""
    if st.shutdown is None:
        begin_shutdown(st)
    assert st.shutdown is not None
    with contextlib.suppress(Exception):
        await st.shutdown
    await st.close()


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

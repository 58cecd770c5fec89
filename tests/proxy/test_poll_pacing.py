"""``traj proxy --poll-interval`` paces the proxy's version poll (weight sync) and, with ``--max-staleness``,
the gate's re-reads of the trainer's consumed records while an episode is held (at most
``GATE_POLL_S``). The polls are counted on a fake clock that only the proxy's sleeps advance: no
wall-clock timing, so a count is exact, and a proxy that ignored ``--poll-interval`` (the 1.0 s default
version poll, the old fixed 0.5 s gate re-read, or a busy loop) gives another count."""

from __future__ import annotations

import asyncio
import math
import types

import pytest

from trajstore.proxy import staleness
from trajstore.proxy.config import ProxyConfig
from trajstore.proxy.staleness import GATE_POLL_S, StalenessOverflow
from trajstore.proxy.state import ProxyState

HOLD_S = 3.0
"""Simulated seconds an episode is held before the gate refuses it (and the length of the version-poll runs)."""
RUN = "r"


class FakeClock:
    """Simulated time: ``monotonic()`` reads it, ``sleep(s)`` advances it by `s` (and yields once)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self._yield = asyncio.sleep  # the real one, before the test patches it

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await self._yield(0)


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    c = FakeClock()
    monkeypatch.setattr(asyncio, "sleep", c.sleep)  # the proxy's pauses (the event loop's own clock is untouched)
    monkeypatch.setattr(staleness, "time", types.SimpleNamespace(monotonic=c.monotonic))  # the gate's clock
    return c


def _state(tmp_path, poll_s: float, **kw) -> ProxyState:
    """The proxy's state as ``traj proxy --poll-interval poll_s`` builds it (nothing is started or bound)."""
    cfg = ProxyConfig(upstream="http://127.0.0.1:9", store=str(tmp_path / "store"), follow_run=RUN, poll_s=poll_s,
                      **kw)
    return ProxyState(cfg)


def _held_reads(state: ProxyState, clock: FakeClock, monkeypatch) -> list[float]:
    """Fill the gate, hold one more episode until it is refused; the simulated times of the
    consumed-record re-reads made while it was held."""
    gate = state.gate
    assert gate is not None
    reads: list[float] = []
    refresh = gate._refresh

    def counted() -> None:
        reads.append(clock.now)
        if len(reads) > 1000:  # re-reads without a pause: the simulated hold would never end
            raise AssertionError(f"{len(reads)} re-reads by t = {clock.now - 1000.0:g} s: not paced")
        refresh()

    async def hold() -> None:
        gate.load_written()  # at start: the store holds nothing yet
        for _ in range(gate.capacity):
            assert await gate.admit() == 0.0
        monkeypatch.setattr(gate, "_refresh", counted)
        with pytest.raises(StalenessOverflow):
            await gate.admit()

    asyncio.run(hold())
    return reads


@pytest.mark.parametrize(("poll_s", "paced_s"), [(0.1, 0.1), (0.05, 0.05), (2.0, GATE_POLL_S)])
def test_a_held_episode_rereads_the_consumed_records_every_poll(tmp_path, clock, monkeypatch, poll_s, paced_s):
    # the gate re-reads every min(--poll-interval, GATE_POLL_S) s: --poll-interval 0.1 (traj bench throughput's)
    # gives 3.0 / 0.1 = 30 reads in a 3 s hold; the old fixed 0.5 s gave 6 (a held episode then
    # started up to 0.5 s after the step that made room); a --poll-interval above the cap stays at 0.5
    state = _state(tmp_path, poll_s, max_staleness=1, batch_size=2, hold_timeout_s=HOLD_S)
    reads = _held_reads(state, clock, monkeypatch)
    # the waits are slices of paced_s / 4, so a read comes at most one slice after it is due
    # (0.1 s: 4 slices of 0.025 add up to a hair under 0.1 in floating point, so a 5th is slept)
    gaps = [b - a for a, b in zip(reads, reads[1:])]
    assert gaps and all(paced_s - 1e-9 <= g <= paced_s * 1.25 + 1e-9 for g in gaps), (paced_s, gaps)
    # and they go on for the whole hold: 3 s / 0.125 - 1 = 23 .. 3 s / 0.1 + 1 = 31 reads at 0.1
    assert HOLD_S / (1.25 * paced_s) - 1 <= len(reads) <= HOLD_S / paced_s + 1, (len(reads), paced_s)


def _counted_version_polls(poller, clock: FakeClock, monkeypatch, duration_s: float) -> int:
    """Run `poller`'s follow loop for `duration_s` simulated seconds; how many version polls it made."""
    polls = 0

    async def poll_once(*a, **kw) -> None:
        nonlocal polls
        polls += 1

    monkeypatch.setattr(poller, "poll_once", poll_once)

    async def follow() -> None:
        task = asyncio.create_task(poller.run())
        while clock.now < 1000.0 + duration_s - 1e-9:
            await clock._yield(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(follow())
    return polls


@pytest.mark.parametrize("poll_s", [0.1, 0.25])
def test_weight_sync_polls_for_a_new_version_every_poll(tmp_path, clock, monkeypatch, poll_s):
    # --run: one look for a newly published version per --poll-interval seconds (3 s at 0.1 s: 30,
    # where the 1.0 s default would make 3), so the next batch's barrier opens within --poll-interval of
    # the trainer's publish
    state = _state(tmp_path, poll_s)
    assert state.sync is not None
    polls = _counted_version_polls(state.sync, clock, monkeypatch, HOLD_S)
    assert abs(polls - HOLD_S / poll_s) <= 1, (polls, HOLD_S / poll_s)


def test_without_weight_sync_the_served_model_path_is_polled_every_poll(tmp_path, clock, monkeypatch):
    # no --run: the upstream's model path (GET /v1/models) is what is polled, at the same pace
    cfg = ProxyConfig(upstream="http://127.0.0.1:9", store=str(tmp_path / "store"), poll_s=0.2)
    state = ProxyState(cfg)
    assert state.sync is None and state.model_path is not None
    polls = _counted_version_polls(state.model_path, clock, monkeypatch, HOLD_S)
    assert abs(polls - math.floor(HOLD_S / 0.2)) <= 1, polls

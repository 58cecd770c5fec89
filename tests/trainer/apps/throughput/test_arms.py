"""trainer/apps/throughput/arms.py: the barrier arms wait for a version by asking the proxy every
``poll_s / 2`` seconds, so a barrier opens within half a poll of the proxy reporting the load. The
asks are counted on a fake clock that only the barrier's sleeps advance (no wall-clock timing)."""

from __future__ import annotations

import asyncio

import pytest

from trajstore.trainer.apps.throughput.arms import _Player
from trajstore.trainer.apps.throughput.config import ThroughputConfig


class _Proxy:
    """``GET /health`` of a proxy whose server loads `version` at simulated time `at_s`."""

    def __init__(self, clock: list[float], version: int, at_s: float) -> None:
        self.clock, self.version, self.at_s = clock, version, at_s
        self.asks: list[float] = []

    async def get(self, url: str):
        import httpx

        assert url.endswith("/health")
        self.asks.append(self.clock[0])
        v = self.version if self.clock[0] >= self.at_s else self.version - 1
        return httpx.Response(200, json={"policy_version": v})


@pytest.mark.parametrize("poll_s", [0.1, 0.4])
def test_the_barrier_asks_for_the_version_every_half_poll(tmp_path, monkeypatch, poll_s: float) -> None:
    clock = [0.0]
    real_sleep = asyncio.sleep

    async def sleep(s: float) -> None:
        clock[0] += s
        if len(proxy.asks) > 1000:
            raise AssertionError("the barrier asks without pausing")
        await real_sleep(0)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    cfg = ThroughputConfig(poll_s=poll_s, scratch=str(tmp_path))
    proxy = _Proxy(clock, version=3, at_s=2.0)
    player = _Player(proxy, cfg, None, None, "http://proxy", "run", alive=lambda: None)  # type: ignore[arg-type]
    asyncio.run(player.wait_version(3))
    gaps = {round(b - a, 9) for a, b in zip(proxy.asks, proxy.asks[1:])}
    assert gaps == {round(poll_s / 2, 9)}, gaps
    # asks at 0, p/2, 2 p/2, ... until the first at or after 2.0 s: it opens within half a poll
    assert 2.0 - 1e-9 <= proxy.asks[-1] < 2.0 + poll_s / 2 + 1e-9
    assert len(proxy.asks) == pytest.approx(2.0 / (poll_s / 2) + 1, abs=1)

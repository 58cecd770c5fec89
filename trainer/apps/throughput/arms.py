"""The rollout side of one arm: which episode of the trace each slot plays and when it may start.

- ``sync``: batch k (episodes kB..kB+B-1, one slot each) starts once the proxy reports that the
  server has loaded version k, i.e. the weights of step k-1 (a batch barrier);
- ``one-step``: batch k starts once batch k-1 has finished and version k-1 is loaded, so it is
  generated while batch k-1 trains, one version behind;
- ``async-eta``: each of the W slots starts the trace's next episode as soon as its last one ends;
  the proxy's ``--max-staleness eta`` gate holds new episodes while running + finished but
  unconsumed episodes reach (eta + 1) x B; ``async-eta-cC`` the same with C slots (C = B: the
  barrier arms' concurrency).

Every arm plays the trace's episodes in index order, so the arms are paired: the same episodes,
with the same latencies, in the same order."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from trajstore.trainer.apps.throughput.agent import EpisodeRecord, TokenChat, play_episode
from trajstore.trainer.apps.throughput.config import Arm, ThroughputConfig, ThroughputError
from trajstore.trainer.apps.throughput.trace import LatencyTrace


@dataclass
class Rollouts:
    """What the rollout side of an arm did (times from ``time.time()``).

    Attributes:
        episodes: every episode started, in start order.
        batch_starts: sync / one-step: when each batch started (after its barrier).
        batch_ends: sync / one-step: when the last episode of each batch finished.
        producing_end: when the episodes the trainer needs had all finished.
    """

    episodes: list[EpisodeRecord] = field(default_factory=list)
    batch_starts: list[float] = field(default_factory=list)
    batch_ends: list[float] = field(default_factory=list)
    producing_end: float = 0.0

    @property
    def t0(self) -> float:
        """When the first episode started."""
        return min(e.start for e in self.episodes)


class _Player:
    """Starts episodes of the trace in index order and keeps their records."""

    def __init__(self, client: object, cfg: ThroughputConfig, trace: LatencyTrace, chat: TokenChat, proxy_url: str,
                 run_id: str, alive: Callable[[], str | None]):
        self.client, self.cfg, self.trace, self.chat = client, cfg, trace, chat
        self.proxy_url, self.run_id, self.alive = proxy_url, run_id, alive
        self.out = Rollouts()
        self.next_index = 0
        self.completed = 0
        self.failed = 0
        self.tasks: list[asyncio.Task[None]] = []
        """The async arm's slot loops (cancelled once the trainer has its steps)."""

    async def play(self, slot: int) -> EpisodeRecord:
        """The trace's next episode on `slot`, to its end.

        Raises:
            ThroughputError: a child process exited, or episodes keep failing.
        """
        self.check()
        draw = self.trace.episode(self.next_index)
        self.next_index += 1
        rec = EpisodeRecord(draw.index, slot)
        self.out.episodes.append(rec)
        await play_episode(self.client, self.proxy_url, draw, rec, chat=self.chat,
                           session=f"{self.run_id}-ep{draw.index}", model=self.cfg.model,
                           max_tokens=self.cfg.max_tokens)
        if rec.done:
            self.completed += 1
        else:
            self.failed += 1
            if self.failed > self.cfg.workers:
                raise ThroughputError(f"{self.failed} episodes failed (the last: {rec.error})")
        return rec

    def check(self) -> None:
        gone = self.alive()
        if gone is not None:
            raise ThroughputError(gone)

    async def wait_version(self, version: int) -> None:
        """Until the proxy reports that the server holds `version` (or a newer one)."""

        while True:
            self.check()
            try:
                r = await self.client.get(f"{self.proxy_url}/health")  # type: ignore[attr-defined]
                v = r.json().get("policy_version")
                if v is not None and int(v) >= version:
                    return
            except (httpx.HTTPError, ValueError):
                pass
            await asyncio.sleep(self.cfg.poll_s / 2)


async def _batches(p: _Player, arm: Arm) -> None:
    cfg = p.cfg
    for k in range(cfg.steps):
        if arm.kind == "sync" and k > 0:
            await p.wait_version(k)
        elif arm.kind == "one-step" and k > 1:
            await p.wait_version(k - 1)
        p.out.batch_starts.append(time.time())
        recs = await asyncio.gather(*(p.play(j) for j in range(cfg.batch_size)))
        if not all(r.done for r in recs):
            bad = next(r for r in recs if not r.done)
            raise ThroughputError(f"episode {bad.index} of batch {k} did not finish: {bad.error}")
        p.out.batch_ends.append(max(r.end for r in recs))


async def _slots(p: _Player, slots: int) -> None:
    """Each of `slots` slots plays episodes back to back until the trainer's N x B have finished."""
    need = p.cfg.steps * p.cfg.batch_size
    enough = asyncio.Event()

    async def slot(s: int) -> None:
        while p.completed < need:
            await p.play(s)
        enough.set()

    p.tasks = [asyncio.create_task(slot(s)) for s in range(slots)]
    waiter = asyncio.create_task(enough.wait())
    try:
        finished, _ = await asyncio.wait([waiter, *p.tasks], return_when=asyncio.FIRST_COMPLETED)
        for t in finished:
            if t is not waiter and not t.cancelled() and t.exception() is not None:
                raise t.exception()  # type: ignore[misc]
    finally:
        waiter.cancel()


async def run_rollouts(arm: Arm, cfg: ThroughputConfig, trace: LatencyTrace, chat: TokenChat, *, proxy_url: str,
                       run_id: str, alive: Callable[[], str | None]) -> Rollouts:
    """Play the arm's episodes through the proxy until the server holds version N (the trainer has
    made its N steps), then cut the episodes still running (not needed: the proxy stores them as
    aborted when it is stopped).

    Args:
        chat: renders the conversations as token ids.
        alive: returns why the run cannot go on (a child process exited or failed), or None.

    Raises:
        ThroughputError: a child exited, an episode of a batch failed, or episodes keep failing.
    """

    limits = httpx.Limits(max_connections=cfg.workers + 8, max_keepalive_connections=cfg.workers + 8)
    async with httpx.AsyncClient(timeout=httpx.Timeout(cfg.arm_timeout_s), limits=limits) as client:
        p = _Player(client, cfg, trace, chat, proxy_url, run_id, alive)
        try:
            if arm.kind == "async":
                await _slots(p, arm.slots(cfg))
            else:
                await _batches(p, arm)
            p.out.producing_end = time.time()
            await p.wait_version(cfg.steps)
        finally:
            for t in p.tasks:
                t.cancel()
            await asyncio.gather(*p.tasks, return_exceptions=True)
    return p.out

"""The benchmark's agent: one episode of the trace played through ``traj proxy`` with asyncio.
Each turn is a model call followed by a tool call, an ``asyncio.sleep`` of the trace's latency;
``/finish`` ends the episode with the trace's reward.

The agent keeps its conversation as token ids (:class:`TokenChat`) and calls ``/v1/completions``
with them: a random tiny model's text would not re-tokenize to the ids it sampled, so a chat call
would break the context at every turn (a new trajectory part each time). With ids every episode is
one trajectory, and the tokens are sampled from the model's whole distribution, which is what the
trainer's importance ratios compare against."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from trajstore.proxy.calls import HELD_HEADER
from trajstore.trainer.apps.throughput.trace import EpisodeDraw

BENCH_TAG = "throughput"
"""Metadata ``bench`` of every trajectory the benchmark writes."""


@dataclass
class EpisodeRecord:
    """What one episode did, in wall-clock seconds (``time.time()``, the clock the trainer's records
    use).

    Attributes:
        index: the trace's episode. slot: the rollout slot that played it.
        start: when its first call was sent. end: when ``/finish`` returned (or it failed, or was
            cancelled).
        held_s: seconds the staleness gate held its first call (the proxy's ``X-Trajstore-Held``).
        call_s: seconds of each model call (the hold left out).
        tool_s: seconds slept in tool calls.
        versions: policy version of each call, as the proxy recorded them.
        done: it finished (``/finish`` answered).
        error: why a call failed (None = none failed; an episode cut when the arm ended has
            neither ``done`` nor ``error``).
    """

    index: int
    slot: int
    start: float = 0.0
    end: float = 0.0
    held_s: float = 0.0
    call_s: list[float] = field(default_factory=list)
    tool_s: float = 0.0
    versions: list[int] = field(default_factory=list)
    done: bool = False
    error: str | None = None

    @property
    def busy(self) -> tuple[float, float]:
        """(from, to) of the episode's work: after the gate let it in, until it finished."""
        return self.start + self.held_s, self.end


class TokenChat:
    """The benchmark's conversations as token ids of `tokenizer`: a task line, then per turn the
    action the model sampled and a short tool reply. No chat template: a random model's
    conversation has no meaning to keep, and the trainer's cost grows with every token (the
    template's role headers tripled them), while the environment's latency should dominate."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self._replies: dict[int, list[int]] = {}

    def _ids(self, text: str) -> list[int]:
        return [int(t) for t in self.tokenizer(text, add_special_tokens=False)["input_ids"]]

    def prompt_ids(self, index: int) -> list[int]:
        """The opening of episode `index`."""
        return self._ids(f"Task {index}:")

    def reply_ids(self, turn: int) -> list[int]:
        """The tool's answer after the action of `turn` (0-based)."""
        if turn not in self._replies:
            self._replies[turn] = self._ids(f"\nok {turn + 1}\n")
        return self._replies[turn]


async def play_episode(client: Any, proxy_url: str, draw: EpisodeDraw, rec: EpisodeRecord, *, chat: TokenChat,
                       session: str, model: str, max_tokens: int) -> None:
    """Play `draw` as session `session` of the proxy at `proxy_url` with `client` (an
    ``httpx.AsyncClient``), filling `rec` as it goes (a caller that cancels the episode keeps what
    it did so far). A failed call ends the episode with ``rec.error`` set; it never raises one."""

    rec.start = time.time()
    base = f"{proxy_url}/s/{session}"
    ids = chat.prompt_ids(draw.index)
    try:
        for turn, latency in enumerate(draw.latencies_s):
            t0 = time.time()
            r = await client.post(f"{base}/v1/completions", json={
                "model": model, "prompt": ids, "max_tokens": max_tokens, "temperature": 1.0,
                "return_token_ids": True})
            r.raise_for_status()
            if turn == 0:
                rec.held_s = float(r.headers.get(HELD_HEADER, "0") or 0)
            rec.call_s.append(time.time() - t0 - (rec.held_s if turn == 0 else 0.0))
            action = [int(t) for t in r.json()["choices"][0]["token_ids"]]
            t1 = time.time()
            await asyncio.sleep(latency)
            rec.tool_s += time.time() - t1
            ids = ids + action + chat.reply_ids(turn)
        r = await client.post(f"{base}/finish", json={
            "status": "completed", "reward": draw.reward, "prompt_id": f"task-{draw.index}",
            "metadata": {"bench": BENCH_TAG, "trace_episode": draw.index}})
        r.raise_for_status()
        rec.versions = [int(v) for v in r.json().get("policy_versions") or []]
        rec.done = True
    except httpx.HTTPStatusError as e:
        rec.error = f"HTTP {e.response.status_code} from {e.request.url.path}: {e.response.text[:300]}"
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as e:
        rec.error = f"{type(e).__name__}: {e}"
    finally:
        rec.end = time.time()

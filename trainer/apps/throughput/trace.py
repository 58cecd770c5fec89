"""The environment of ``traj bench throughput``: each episode is a geometric number of turns, each
turn one model call followed by one tool call that takes a lognormal time. Every draw is made once
from the seed (:class:`LatencyTrace`), so every arm replays the same episodes with the same
latencies, indexed by (episode, turn): the arms are paired."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field


class EnvSpec(BaseModel):
    """The latency distribution of the environment's tool calls.

    A tool call takes ``median_s * exp(sigma * Z)`` seconds, Z standard normal (lognormal with that
    median). An episode has ``K = min(G, max_turns)`` turns, G geometric on {1, 2, ...} with mean
    ``mean_turns`` (success probability ``1 / mean_turns``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    median_s: float = Field(0.2, gt=0, description="median tool-call latency (s)")
    sigma: float = Field(1.0, gt=0, description="sigma of the log of the tool-call latency")
    mean_turns: float = Field(3.0, ge=1, description="mean of the untruncated geometric number of turns")
    max_turns: int = Field(12, ge=1, description="turns of an episode at most (the geometric draw is cut here)")

    @property
    def turn_p(self) -> float:
        """Success probability of the geometric number of turns."""
        return 1.0 / self.mean_turns


@dataclass(frozen=True)
class EpisodeDraw:
    """One episode of the trace.

    Attributes:
        index: its position in the trace (episodes are started in this order in every arm).
        latencies_s: tool-call latency of each turn (s), shape (turns,).
        reward: the reward its ``/finish`` reports (0 or 1, a fair coin of the trace).
    """

    index: int
    latencies_s: tuple[float, ...]
    reward: float

    @property
    def turns(self) -> int:
        return len(self.latencies_s)


class LatencyTrace:
    """Every episode's turns, tool-call latencies and reward, drawn once from `seed`.

    Episode i draws from its own generator (``numpy.random.default_rng([seed, i])``): its turn count
    G, then ``max_turns`` standard normals Z, then the reward. The latency of turn t is
    ``median_s * exp(sigma * Z[t])``, so one seed gives the same turn counts and the same Z under
    every sigma (the sigmas are paired too), and a longer trace starts with the shorter one.

    Args:
        seed: the trace's seed.
        episodes: episodes in the trace (an arm that needs more fails, naming this).
        spec: the latency distribution.

    Attributes:
        turns: int64 (episodes,), turns per episode, in 1..max_turns.
        latencies_s: float64 (episodes, max_turns); row i's first ``turns[i]`` entries are its
            tool-call latencies (s); the rest are drawn but never slept.
        rewards: float64 (episodes,), 0.0 or 1.0.
    """

    def __init__(self, seed: int, episodes: int, spec: EnvSpec):
        if episodes < 1:
            raise ValueError(f"a trace needs at least one episode, got {episodes}")
        self.seed, self.spec = seed, spec
        turns, z, rewards = [], [], []
        for i in range(episodes):
            rng = np.random.default_rng([seed, i])
            turns.append(min(int(rng.geometric(spec.turn_p)), spec.max_turns))
            z.append(rng.standard_normal(spec.max_turns))
            rewards.append(float(rng.random() < 0.5))
        self.turns = np.asarray(turns, dtype=np.int64)
        self.latencies_s = spec.median_s * np.exp(spec.sigma * np.asarray(z).reshape(episodes, spec.max_turns))
        self.rewards = np.asarray(rewards)

    def __len__(self) -> int:
        return len(self.turns)

    def latency(self, episode: int, turn: int) -> float:
        """Tool-call latency (s) of `turn` (0-based) of `episode`.

        Raises:
            IndexError: no such episode in the trace, or the episode has fewer turns.
        """
        if not 0 <= turn < self.turns[self._check(episode)]:
            raise IndexError(f"episode {episode} of the trace has {self.turns[episode]} turns, not turn {turn}")
        return float(self.latencies_s[episode, turn])

    def episode(self, index: int) -> EpisodeDraw:
        """Episode `index` of the trace (IndexError past its end, naming its length)."""
        i = self._check(index)
        return EpisodeDraw(i, tuple(float(x) for x in self.latencies_s[i, : self.turns[i]]), float(self.rewards[i]))

    def env_seconds(self, indices: range | list[int]) -> np.ndarray:
        """Summed tool-call latency (s) of each of the given episodes, shape (len(indices),)."""
        idx = np.asarray(list(indices), dtype=np.int64)
        mask = np.arange(self.spec.max_turns)[None, :] < self.turns[idx][:, None]
        return (self.latencies_s[idx] * mask).sum(axis=1)

    def _check(self, index: int) -> int:
        if not 0 <= index < len(self):
            raise IndexError(f"the latency trace (seed {self.seed}) holds {len(self)} episodes; episode {index} "
                             "was asked for (a larger trace is needed: more episodes than the arm was sized for)")
        return index

"""What a ``traj demo`` run produced, as data: the episodes played, the versions the server loaded
and the audits read back from the store (:class:`DemoResult`); ``traj demo`` renders it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from trajstore.store.layout import run_log_file
from trajstore.trainer.apps.demo.config import PROXY_LOG, SERVE_LOG, TRAINER_LOG
from trajstore.trainer.apps.demo.proxy_shutdown import ProxyShutdown
from trajstore.trainer.apps.envs.guess_chat import EpisodeSummary

StopKind = Literal["time_limit", "trainer_failed", "child_failed", "agents_done"]
"""Why a demo stopped before the trainer made its steps: ``time_limit`` (``--time-limit`` reached),
``trainer_failed`` (the trainer exited with an error), ``child_failed`` (``traj serve`` or
``traj proxy`` exited, or failed to start), ``agents_done`` (the agents played every episode
allowed before the trainer had enough completed ones)."""


@dataclass(frozen=True)
class DemoStop:
    """Why a demo stopped early, and what to try.

    Attributes:
        kind: which kind of stop (:data:`StopKind`).
        reason: one sentence: what happened, naming the log file that explains it.
        hint: what to try next.
    """

    kind: StopKind
    reason: str
    hint: str


@dataclass
class DemoResult:
    """What a demo produced (everything is also in the store).

    Attributes:
        store: absolute path of the store.
        run_id: the training run.
        episodes: one summary per episode the worker played, in order.
        versions_loaded: policy versions the rollout server loaded (weight sync), in order.
        calls_by_version: model calls the proxy recorded per policy version, counted in the store
            (action spans of the run's trajectories, aborted ones included) once the proxy has
            stopped: its live /proxy/stats, read once a second, missed the last calls.
        reward_by_version: rows {policy_version, trajectories, mean_reward, solved, consumed}.
        staleness: rows of the staleness audit for the run (``staleness_report(...).by_run``).
        clip: rows of the clip audit per step (``clip_report(...).by_step``).
        explained_variance: rows {step, explained_variance} of the critic before each update, one per
            iteration the run recorded (none when it stopped before its first; step -1 = critic warm-up)
            (1 - Var(R - V) / Var(R); above 0 means the critic predicts returns better than their mean).
        freed_bytes: bytes of superseded policy versions and checkpoints removed at the end.
        seconds: wall time (s).
        steps_asked: policy steps the trainer was asked for (``DemoConfig.steps``).
        steps_done: policy steps it made (from the run's ``steps`` records); fewer than asked
            when the demo stopped early (:attr:`stop`): see :attr:`shortfall`.
        stop: why the demo stopped before the trainer made its steps (None = it did not).
        proxy_shutdown: what ``traj proxy`` reported when the demo stopped it (None = never started).
        episodes_cut: the agents' episodes in flight when the demo stopped the proxy.
    """

    store: str
    run_id: str
    episodes: list[EpisodeSummary]
    versions_loaded: list[int]
    calls_by_version: dict[int, int] = field(default_factory=dict)
    reward_by_version: list[dict[str, Any]] = field(default_factory=list)
    staleness: list[dict[str, Any]] = field(default_factory=list)
    staleness_histogram: list[dict[str, Any]] = field(default_factory=list)
    clip: list[dict[str, Any]] = field(default_factory=list)
    explained_variance: list[dict[str, Any]] = field(default_factory=list)
    freed_bytes: int = 0
    seconds: float = 0.0
    steps_asked: int = 0
    steps_done: int = 0
    stop: DemoStop | None = None
    proxy_shutdown: ProxyShutdown | None = None
    episodes_cut: int = 0

    @property
    def shortfall(self) -> str | None:
        """A plain sentence when the trainer made fewer policy steps than asked, or when the
        rollout server never loaded a version the trainer published (weight sync failed), else None.
        Why it made fewer is :attr:`stop`."""
        if self.steps_done < self.steps_asked:
            return (f"the trainer made {self.steps_done} of the {self.steps_asked} policy steps asked for "
                    f"(see {self.store}/{run_log_file(self.run_id, TRAINER_LOG)}); the audits cover only what was trained")
        if self.steps_done >= 2 and not any(v >= 1 for v in self.versions_loaded):
            return (f"the rollout server never loaded a policy version the trainer published (see "
                    f"{self.store}/{run_log_file(self.run_id, PROXY_LOG)} and {self.store}/{run_log_file(self.run_id, SERVE_LOG)}): every episode ran on v0, so the staleness "
                    "below comes from the trainer moving ahead alone")
        return None

    @property
    def policy_versions_seen(self) -> list[int]:
        """Distinct policy versions that generated actions in this demo."""
        return sorted({v for e in self.episodes for v in e.policy_versions})


def result_to_dict(result: DemoResult) -> dict[str, Any]:
    """The result as plain JSON-able data (what ``traj demo --format json`` prints)."""
    d = asdict(result)
    d["policy_versions_seen"] = result.policy_versions_seen
    d["shortfall"] = result.shortfall
    d["proxy_shutdown_note"] = (None if result.proxy_shutdown is None
                                else result.proxy_shutdown.describe(episodes_cut=result.episodes_cut))
    return json.loads(json.dumps(d, default=str))

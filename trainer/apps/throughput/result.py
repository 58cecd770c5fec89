"""What one arm's run returns (:class:`ArmResult`), as data: the suite saves it as JSON and the
report aggregates it over seeds."""

from __future__ import annotations

from pydantic import BaseModel, Field

from trajstore.trainer.apps.throughput.measure import StalenessCheck, StalenessSummary


class Phases(BaseModel):
    """Where a batch-barrier arm's time goes, mean seconds per batch (sync and one-step arms).

    Attributes:
        rollout_s: a batch's start to its last episode's end (the fork-join).
        env_max_s: the tool-call seconds of the batch's longest episode (from the trace).
        pickup_s: the batch's last episode stored to the trainer having the batch (its store poll;
            in one-step also the previous step still training).
        train_s: the trainer's compute for the step (``perf/step_s`` less its wait).
        publish_load_s: the step recorded to the next batch's start: publishing the version, the
            proxy seeing it, the server loading it, the barrier noticing (sync only; else None).
        barrier_s: the batch's end to the next batch's start (rollout slots idle).
    """

    rollout_s: float
    env_max_s: float
    pickup_s: float
    train_s: float
    publish_load_s: float | None
    barrier_s: float | None


class ArmResult(BaseModel):
    """One arm at one sigma and seed. Times in seconds, fractions in [0, 1]; the window is from the
    first episode's start to the end of the N-th policy step (its step record).

    Attributes:
        wall_s: wall time to N policy steps (the window).
        trajectories, action_tokens: consumed by the N steps.
        trajectories_per_s, action_tokens_per_s: those over the window.
        episodes_started, episodes_completed: by the rollout side (some never trained: cut at the end).
        trainer_idle: share of the window the trainer waited for data.
        rollout_idle: share of the W slots x window not spent in an episode (not started, at a
            barrier, or held by the staleness gate).
        call_s: mean seconds of a model call through the proxy (a gate's hold left out).
        hold_s: mean seconds the staleness gate held an episode (0 without a gate).
        episode_s: mean seconds of a completed episode (hold left out).
        train_s: the trainer's busy seconds per step in the window (window - its waits, over N).
        train_compute_s: its compute per step alone (``perf/step_s`` - wait), records and
            publishing left out.
        staleness: per token and per trajectory, from the store's audit.
        check: the audit against the trainer's metric.
        dis_masked: share of consumed action tokens DIS masked (clip audit).
        predicted_step_s: the fork-join model's seconds per step for this arm with this run's
            measured ``call_s`` and ``train_s``.
        phases: sync and one-step arms: where a batch's time goes.
    """

    arm: str
    sigma: float
    seed: int
    run_id: str
    store: str
    startup_s: float
    wall_s: float
    steps: int
    trajectories: int
    action_tokens: int
    trajectories_per_s: float
    action_tokens_per_s: float
    episodes_started: int
    episodes_completed: int
    trainer_idle: float
    rollout_idle: float
    call_s: float
    hold_s: float
    episode_s: float
    train_s: float
    train_compute_s: float
    staleness: StalenessSummary
    check: StalenessCheck
    dis_masked: float | None
    predicted_step_s: float
    phases: Phases | None = None
    cpu_s_per_step: dict[str, float] = Field(default_factory=dict, description="CPU seconds per policy step of "
                                             "each process (agents = the rollout side, proxy, serve, trainer) while "
                                             "the arm ran")
    cpu_share: float | None = Field(None, description="their CPU seconds over wall seconds x the machine's CPUs")
    load_average: list[float] = Field(default_factory=list, description="1, 5, 15 min load average at the end")

    @property
    def step_s(self) -> float:
        """Measured seconds per policy step."""
        return self.wall_s / self.steps

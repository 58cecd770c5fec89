"""What a ``traj demo`` run is asked to do: its sizes (:class:`DemoConfig`), the files it keeps in
``runs/<run_id>/``, and the trainer's config derived from them."""

from __future__ import annotations

from datetime import datetime, timezone

from pydantic import BaseModel, ConfigDict, Field, field_validator

from trajstore.hub import SMOLLM2_ALIAS, load_tokenizer, resolve_model
from trajstore.trainer.apps.demo.audits import demo_filter
from trajstore.trainer.config import (
    AlgoConfig,
    DataConfig,
    ModelConfig,
    OptimConfig,
    RunConfig,
    TrainConfig,
    check_training_run_id,
)

DEFAULT_STORE = "demo-store"
TRAINER_LOG = "trainer"
"""The trainer child's stdout and stderr, kept at ``runs/<run_id>/trainer.log`` in the store
(:func:`trajstore.store.layout.run_log_file`)."""
SERVE_LOG = "serve"
"""``traj serve``'s output, at ``runs/<run_id>/serve.log``."""
PROXY_LOG = "proxy"
"""``traj proxy``'s output, at ``runs/<run_id>/proxy.log``."""
DEMO_CONFIG = "demo"
"""The resolved :class:`DemoConfig`, saved at ``runs/<run_id>/demo-config.json``
(:func:`trajstore.store.layout.run_app_config_file`)."""
DEMO_TRAIN_CONFIG = "demo-train"
"""The :class:`~trajstore.trainer.config.TrainConfig` handed to the trainer child, at
``runs/<run_id>/demo-train-config.json`` (the trainer also saves its own resolved copy as
``runs/<run_id>/config.json``)."""


TRAINER_STOP_S = 300.0
"""At the time limit the trainer is sent SIGTERM and gets this long (s) to finish its step in
progress, checkpoint and publish, before a second SIGTERM (then SIGKILL)."""
PROXY_HOLD_S = 3600
"""The demo's ``traj proxy --hold-timeout`` and ``--session-timeout`` (s): an episode waits this long
for the staleness gate (the trainer's step) or between two calls before it ends. Not a limit on the
demo: ``--time-limit`` is."""


class DemoConfig(BaseModel):
    """Sizes of the demo; the defaults finish in a few minutes on 2 CPU cores with SmolLM2-135M."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("run_id")
    @classmethod
    def _run_id(cls, v: str | None) -> str | None:  # refused before anything starts, as traj train does
        return v if v is None else check_training_run_id(v)

    store: str = Field(DEFAULT_STORE, description="local store directory (created; reused across demos)")
    model: str = Field(SMOLLM2_ALIAS, description="policy: 'smollm2-135m', a local HF directory, a .gguf file, "
                                                  "or 'tiny-llama' (random weights, for tests)")
    tokenizer: str = Field(SMOLLM2_ALIAS, description="tokenizer that renders the chats (the model's own for "
                                                      "real models; SmolLM2's for the tiny test model)")
    run_id: str | None = Field(None, description="training run id (default demo-<UTC time>)")
    steps: int = Field(4, ge=1, description="policy updates the trainer makes")
    critic_warmup_steps: int = Field(1, ge=0, description="critic-only batches before the policy updates")
    batch_size: int = Field(4, ge=1, description="trajectories per training step")
    micro_batch_size: int = Field(2, ge=1, description="trajectories per forward/backward pass")
    episodes: int | None = Field(None, ge=1, description="episodes the agents play at most (default: until the "
                                                         "trainer finishes, at most 3x what it consumes)")
    max_ahead_batches: int = Field(2, ge=1, description="the proxy holds new episodes while this many step "
                                                        "batches are running or waiting for the trainer "
                                                        "(its --max-staleness is this minus 1, AReaL's eta)")
    max_new_tokens: int = Field(24, ge=1, description="tokens per action at most")
    max_turns: int = Field(4, ge=3, description="guesses per episode (turns)")
    high: int = Field(20, ge=2, description="the hidden number is in [1, high]")
    policy_lr: float = Field(1e-5, gt=0, description="policy learning rate (10x SAO's 1e-6: over a few "
                                                     "steps SAO's rate leaves every ratio at 1.000)")
    critic_lr: float = Field(5e-5, gt=0, description="critic learning rate")
    keep_weights: bool = Field(False, description="keep every published policy version and the trainer's "
                                                  "checkpoint (about 0.5 GB per SmolLM2 version, 2 GB per "
                                                  "checkpoint); by default only the final version is kept")
    seed: int = Field(0, description="seeds tasks, sampling and (tiny models) initial weights")
    verbose: bool = Field(False, description="also show the trainer's poll lines (waiting for new trajectories); "
                          "by default the episode lines show the progress")
    time_limit_s: float | None = Field(None, gt=0, description="after this many seconds no new episode starts, the "
                                       "proxy stops (its open episodes stored as aborted) and the trainer "
                                       "finishes its step in progress (at most 5 more minutes); the demo then "
                                       "reports what it has and exits 1. None (default): no limit, the demo "
                                       "runs until the trainer has made its steps")

    def resolved_run_id(self) -> str:
        return self.run_id or "demo-" + datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def model_identity(cfg: DemoConfig) -> str:
    """The policy's model identity (the name the proxy's tokenizer lookup knows)."""
    return resolve_model(cfg.model).name


def train_config(cfg: DemoConfig, run_id: str, store: str) -> TrainConfig:
    """The trainer's config for a demo: follow the store, stop after `cfg.steps` policy steps,
    publish every step, read only this demo's trajectories, and record every trained token's
    annotations (trainer log-prob, ratio, DIS band, advantage, value, return: about 25 bytes a
    token, a few MB for a demo) so that ``traj view`` shows them on the demo's store."""
    tiny = cfg.model.startswith("tiny-")
    return TrainConfig(
        store=store,
        model=ModelConfig(name=cfg.model, tokenizer=tokenizer_identity(cfg) if tiny else None,
                          tiny_vocab_size=_vocab_size(cfg) if tiny else 256, seed=cfg.seed),
        # no idle timeout: the trainer waits as long as the demo's agents play (an episode batch
        # took 165 s on a loaded 2-core machine); the demo tells it when they are done
        # (:func:`stop_waiting_when_closed`)
        data=DataConfig(batch_size=cfg.batch_size, micro_batch_size=cfg.micro_batch_size, max_seq_len=4096,
                        where=f"{demo_filter(run_id)} AND status = 'completed'", follow=True, poll_interval_s=0.5,
                        idle_timeout_s=None),
        optim=OptimConfig(policy_lr=cfg.policy_lr, critic_lr=cfg.critic_lr),
        algo=AlgoConfig(critic_warmup_steps=cfg.critic_warmup_steps),
        run=RunConfig(run_id=run_id, max_steps=cfg.steps, publish_every=1, checkpoint_every=10**6,
                      progress=False, record_tokens=1.0),
    )


def tokenizer_identity(cfg: DemoConfig) -> str:
    """The tokenizer's model identity (for the tiny test models, which have none of their own)."""
    return resolve_model(cfg.tokenizer).name


def _vocab_size(cfg: DemoConfig) -> int:
    return len(load_tokenizer(cfg.tokenizer))

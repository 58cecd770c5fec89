"""The typed configuration of `traj train`, nested by concern: the one config that the data
stream, the models and the training loop all read, and that generates `traj train`'s flags
(:mod:`trajstore.cli.config_options`).

Every field has a one-line doc with its unit. The resolved config is saved as
``runs/<run_id>/config.json`` in the store and inside every checkpoint; ``--resume`` reloads it.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

CRITIC_TRAINABLE_PATTERN = (r"^value_head\.|\.mlp\.(?:experts\.|shared_experts?\.)?"
                            r"(?:gate_up_proj|gate_proj|up_proj|down_proj)(?:\.|$)")
"""Default trainable set of the critic (docs/sao.md, mechanism 3, "frozen attention"): the value head
and the MLP projections (dense ``mlp.{gate,up,down}_proj``) or MoE expert projections
(``mlp.experts.{gate_up,down}_proj``, shared experts likewise). Everything else stays frozen at
the policy's weights: token embeddings, every norm, attention (q/k/v/o and q/k norms), and the MoE
router (``mlp.gate``, not an expert projection). The paper trains only "the MLP / MoE expert
projections (and the value head)"; it showed frozen attention on MoE critics, and on dense models
we freeze attention and train the MLP blocks (docs/sao.md, "What the paper leaves open")."""

AdvantageEstimator = Literal["sao-gae", "grpo", "running-mean"]
"""How advantages are computed: ``sao-gae`` = critic + skip-observation GAE (SAO); ``grpo`` =
group-normalised rewards (needs ``group_id``); ``running-mean`` = reward minus a running mean."""

PolicyLossName = Literal["dis", "ppo-clip"]
"""``dis`` = SAO's direct double-sided importance sampling (out-of-band tokens masked);
``ppo-clip`` = vanilla PPO clipped surrogate with the rollout log-probs as pi_old."""

BehaviourLogprobs = Literal["engine", "initial-policy"]
"""Where the behaviour policy's log-probs come from: ``engine`` = the rollout engine's, stored
with the trajectory (required by default); ``initial-policy`` = opt-in for text-only data:
computed once per trajectory with the frozen initial weights (ratios then measure drift from
the start of training, not from the real sampler)."""


class _Section(BaseModel):
    # allow_inf_nan=False: `--policy-lr inf` used to publish an all-NaN policy and exit 0
    model_config = ConfigDict(extra="forbid", frozen=False, allow_inf_nan=False)


class ModelConfig(_Section):
    """Which network is trained and how the critic is built from it."""

    name: str = Field(description="local HF directory, .gguf file, 'smollm2-135m', or a tiny random "
                                  "model 'tiny-llama' / 'tiny-qwen3-moe' (tests)")
    tokenizer: str | None = Field(None, description="tokenizer name the store's token ids must belong to; "
                                                    "default: the model's canonical name")
    tiny_vocab_size: int = Field(256, ge=8, description="vocabulary size of the tiny random models (tokens)")
    critic_trainable_pattern: str | None = Field(
        CRITIC_TRAINABLE_PATTERN, description="regex over critic parameter names; only matches train (default: "
        "MLP / MoE expert projections + value head; embeddings, norms, attention and router frozen, docs/sao.md "
        "mechanism 3); None or '' = full-parameter critic (ablation)")
    seed: int = Field(0, description="seed for tiny-model initialisation, the value head and torch RNG")

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        if isinstance(data, dict) and "critic_frozen_pattern" in data:
            raise ValueError("model.critic_frozen_pattern was replaced by critic_trainable_pattern (a regex of "
                             "the critic parameters that train; the default trains MLP / MoE projections and the "
                             "value head only)")
        return data

    @field_validator("critic_trainable_pattern")
    @classmethod
    def _regex(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            re.compile(v)
        except re.error as e:
            raise ValueError(f"critic_trainable_pattern {v!r} is not a valid regex: {e}") from e
        return v


def replay_slots(batch_size: int, fraction: float) -> int:
    """Replay slots of a step (``data.replay_fraction``): ``floor(fraction x batch_size)``, at most
    ``batch_size - 1`` (the stream always reads at least one trajectory, so the run advances
    through the store)."""
    return min(int(math.floor(fraction * batch_size + 1e-9)), batch_size - 1)


class DataConfig(_Section):
    """What is read from the store and how it is batched."""

    batch_size: int = Field(128, ge=1, description="trajectories per policy step, all ranks together "
                                                   "(SAO default: 128 single rollouts)")
    max_batch_tokens: int = Field(1 << 21, ge=1, description="token budget of one step, all ranks together "
                                                             "(tokens); a step closes early when the next "
                                                             "trajectory would exceed it")
    micro_batch_size: int = Field(8, ge=1, description="trajectories per forward/backward pass on one rank; "
                                                       "the rest is gradient accumulation")
    micro_batch_tokens: int | None = Field(None, ge=1, description="most tokens packed into one forward/backward "
                                           "pass (tokens; a longer trajectory goes alone, never split); None = "
                                           "auto (the memory plan, printed at the start): `max_seq_len` "
                                           "on CPU, where the memory is planned; `micro_batch_size` x "
                                           "`max_seq_len` on CUDA")
    max_seq_len: int = Field(8192, ge=2, description="longest trajectory trained (tokens); longer ones follow "
                                                     "`overlong`")
    overlong: Literal["skip", "error"] = Field("skip", description="trajectories longer than `max_seq_len`: skip "
                                               "them (counted in data/skipped_overlong) or stop with an error. "
                                               "Never truncated: that would drop the reward token")
    unreproducible: Literal["error", "skip"] = Field(
        "error", description="trajectories with an action span whose log-probs the trainer cannot reproduce "
                             "(raw-mode log-probs of a tempered or truncated call, penalties, logit bias, "
                             "grammars, ...: docs/sampling.md): stop before training with one line naming them "
                             "and the engine setting to change, or skip them (counted in "
                             "data/skipped_unreproducible_<reason>) and train the rest")
    where: str | None = Field(None, description="SQL predicate (DuckDB) over the scalar columns; rows that fail "
                                                "it are skipped")
    follow: bool = Field(False, description="keep polling for new shards when the store is exhausted")
    skip_unreadable: bool = Field(False, description="train on a store some of whose shards cannot be read "
                                  "(truncated, not Parquet), without their rows; by default the run is refused "
                                  "before anything is written, naming them")
    poll_interval_s: float = Field(2.0, gt=0, description="seconds between listings with `follow`")
    idle_timeout_s: float | None = Field(None, gt=0, description="with `follow`: stop after this many seconds "
                                                                 "without new data (None = wait forever)")
    behaviour_logprobs: BehaviourLogprobs = Field("engine", description="source of behaviour log-probs; "
                                                  "'initial-policy' is the explicit opt-in for text-only data")
    replay_fraction: float = Field(0.0, ge=0, lt=1, description="share of each step's `batch_size` filled from the "
                                   "replay buffer (0 = off: every trajectory trained once). floor(fraction x "
                                   "batch_size) slots are drawn as whole row groups, uniformly among the buffered "
                                   "row groups with an eligible trajectory; the stream reads the rest. The buffer "
                                   "holds trajectories already trained in this run and is emptied at each "
                                   "checkpoint, so a resumed run and `--replay-step` draw what the uninterrupted run "
                                   "drew. Reused trajectories are importance-corrected by the policy loss (DIS / "
                                   "PPO-clip) against their stored rollout log-probs and recorded again in "
                                   "runs/<run_id>/consumed with their reuse count (column reuse; docs/design.md, replay buffer)")
    replay_max_reuse: int = Field(1, ge=1, description="most times a trajectory is trained again after its first "
                                  "use (reuses; with `replay_fraction` > 0)")
    replay_max_staleness: int = Field(2, ge=0, description="a buffered trajectory is drawn only while trainer version "
                                      "- its newest action policy version is at most this (policy versions); "
                                      "trajectories without a policy version are never replayed")
    replay_budget_tokens: int = Field(1 << 22, ge=1, description="most tokens the replay buffer holds (tokens); the "
                                      "oldest row groups are dropped first")

    @model_validator(mode="after")
    def _replay_slots(self) -> DataConfig:
        if self.replay_fraction > 0 and replay_slots(self.batch_size, self.replay_fraction) == 0:
            raise ValueError(f"replay_fraction {self.replay_fraction:g} of batch_size {self.batch_size} gives no replay "
                             f"slot (floor(fraction x batch_size), leaving at least one trajectory read); raise one of "
                             f"them or set replay_fraction 0")
        return self


class OptimConfig(_Section):
    """Two optimisers (AdamW), one per network, with separate learning rates."""

    policy_lr: float = Field(1e-6, gt=0, description="policy learning rate (SAO: 1e-6)")
    critic_lr: float = Field(5e-6, gt=0, description="critic learning rate (SAO: 5e-6)")
    weight_decay: float = Field(0.0, ge=0, description="AdamW decoupled weight decay (both networks)")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas, each in [0, 1)")
    max_grad_norm: float = Field(1.0, gt=0, description="global L2 gradient-norm clip per update")

    @field_validator("betas")
    @classmethod
    def _betas(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not all(0.0 <= b < 1.0 for b in v):
            raise ValueError(f"AdamW betas must each be in [0, 1), got {v}")
        return v


class AlgoConfig(_Section):
    """The SAO update (docs/sao.md) and the baselines it is compared with."""

    advantage: AdvantageEstimator = Field("sao-gae", description="advantage estimator")
    policy_loss: PolicyLossName = Field("dis", description="policy loss")
    eps_low: float = Field(0.3, gt=0, lt=1, description="lower band: ratios <= 1 - eps_low are masked "
                                                        "(SAO reasoning: 0.3, coding: 0.8)")
    eps_high: float = Field(5.0, gt=0, description="upper band: ratios >= 1 + eps_high are masked "
                                                   "(SAO reasoning: 5.0, coding: 3.0)")
    loss_agg: Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"] = Field(
        "token-mean", description="loss normalisation: token-mean = sum over the "
                                  "step's action tokens (all ranks) / their count, DIS-masked tokens counted; "
                                  "seq-* = averaged over the step's trajectories")
    gamma: float = Field(1.0, gt=0, le=1, description="discount per action token (SAO: 1)")
    lambda_alpha: float = Field(1.5, gt=0, description="alpha of lambda_policy = 1 - 1/(alpha * l), "
                                                       "l = action tokens of the trajectory")
    critic_updates: int = Field(2, ge=1, description="K critic updates per policy update (SAO: 2)")
    critic_warmup_steps: int = Field(10, ge=0, description="budget of batches that only train the critic before "
                                                           "policy updates start (SAO: a 10-step warm-up)")
    critic_warmup_until: Literal["explained-variance", "budget"] = Field(
        "explained-variance", description="when the warm-up ends: 'explained-variance' = after the first batch on "
        "which the critic's explained variance (values before that batch's update, i.e. on unseen data) is above "
        "0, or when the budget runs out; 'budget' = always after `critic_warmup_steps` batches")
    value_clip: float | None = Field(None, gt=0, description="clip of the new value around the step's old value "
                                                       "(reward units); None = plain squared error")
    running_mean_window: int = Field(128, ge=1, description="running-mean baseline: trajectories in the "
                                                            "window of past rewards")


def check_training_run_id(run_id: str) -> str:
    """``run_id`` unchanged if it is one path component of letters, digits and ``._=+-`` (not
    starting with punctuation); else ValueError naming it."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._=+-]*", run_id):
        raise ValueError(f"run_id {run_id!r} must be letters, digits and ._=+- (one path component)")
    return run_id


class RunConfig(_Section):
    """Steps, publishing, checkpoints, logging and hardware."""

    run_id: str = Field(description="training run id; records go to runs/<run_id>/, weights to "
                                    "policies/<run_id>/")
    max_steps: int | None = Field(None, ge=1, description="stop after this many policy steps "
                                                          "(None = until the data ends)")
    publish_every: int = Field(1, ge=0, description="publish the policy every N policy steps (0 = only v0 "
                                                    "and the final version)")
    checkpoint_every: int = Field(10, ge=1, description="checkpoint every N steps (warm-up steps count)")
    keep_checkpoints: int = Field(2, ge=1, description="committed checkpoints kept (older ones are deleted "
                                                      "once a newer one is committed)")
    keep_versions: int = Field(3, ge=0, description="published policy versions kept (0 = all); the latest and "
                                                    "the one before are always kept, so at least 2")
    device: str = Field("auto", description="'auto' (cuda if available), 'cpu', 'cuda', 'cuda:N'")
    bf16: bool = Field(True, description="bf16 compute on CUDA (ddp: autocast over float32 weights; fsdp: bf16 "
                                         "parameters with float32 gradient reduction and optimiser state); "
                                         "ignored on CPU: float32 there")
    strategy: Literal["ddp", "fsdp"] = Field("ddp", description="ddp = every rank holds whole models (small models); "
                                             "fsdp = FSDP2 shards parameters, gradients and optimiser state over "
                                             "the ranks (when policy + critic do not fit one device)")
    activation_checkpointing: bool | None = Field(None, description="recompute each decoder layer's activations in "
                                                  "the backward pass (less memory, ~1 more forward pass); None = auto: "
                                                  "when a trajectory of `max_seq_len` tokens would not fit the memory "
                                                  "available without it, for the micro-batches that would raise the "
                                                  "peak (the memory plan)")
    publish_dtype: Literal["auto", "bfloat16", "float32"] = Field(
        "auto", description="dtype of published weights; auto = bfloat16 when the run computes in bf16 (CUDA), "
                            "else float32")
    tensorboard: bool = Field(False, description="also write TensorBoard events to runs/<run_id>/tensorboard "
                                                 "(local stores only)")
    record_tokens: float = Field(0.0, ge=0, le=1, description="share of the trained trajectories whose per-token "
                                 "trainer annotations (trainer log-prob, importance ratio, DIS band, advantage, "
                                 "value, return of every trained action token) are written to runs/<run_id>/tokens/ "
                                 "(0 = off, 1 = every trajectory; picked by trajectory id hash; about 22-27 bytes per "
                                 "token, policy steps only)")
    progress: bool = Field(True, description="rich progress bar on stderr (traj train draws it only with "
                                             "--format table: json and csv are for programs)")

    @field_validator("keep_versions")
    @classmethod
    def _keep_versions(cls, v: int) -> int:
        if v == 1:
            raise ValueError("must be 0 (keep all) or at least 2: a rollout server may still be loading the "
                             "version before the latest")
        return v

    @field_validator("run_id")
    @classmethod
    def _run_id(cls, v: str) -> str:
        return check_training_run_id(v)

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        """The spelling only; whether the machine has that device is checked when the run starts."""
        if not re.fullmatch(r"auto|cpu|cuda(:[0-9]+)?", v):
            raise ValueError("expected auto, cpu, cuda or cuda:N")
        return v


class TrainConfig(_Section):
    """Everything `traj train` needs; `store` is a local path or an fsspec URI."""

    store: str = Field(description="store URI (local path or s3://bucket/prefix)")
    storage_options: dict[str, Any] = Field(default_factory=dict, description="fsspec options (endpoint, keys); "
                                            "never written to config.json")
    model: ModelConfig
    data: DataConfig = Field(default_factory=DataConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    algo: AlgoConfig = Field(default_factory=AlgoConfig)
    run: RunConfig

    @model_validator(mode="after")
    def _consistent(self) -> TrainConfig:
        if self.algo.advantage != "sao-gae" and self.algo.critic_warmup_steps:
            # baselines without a critic have nothing to warm up
            self.algo.critic_warmup_steps = 0
        return self

    def to_json(self) -> str:
        """The resolved config as JSON (storage options left out: they may hold secrets)."""
        return json.dumps(self.model_dump(mode="json", exclude={"storage_options"}), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, *, storage_options: dict[str, Any] | None = None) -> TrainConfig:
        """Parse a saved config (e.g. from a checkpoint), re-attaching `storage_options`."""
        data = json.loads(text)
        data["storage_options"] = dict(storage_options or {})
        return cls.model_validate(data)

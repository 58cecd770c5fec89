"""Memory plan of `traj train`: estimate the peak memory of one process before any heavy work,
bound the tokens of a micro-batch, switch activation checkpointing on when long trajectories
need it, and refuse (one line naming the options) a run that cannot fit.

Why: a new user trained SmolLM2-135M on the ingested harness logs (trajectories of up to 8,192
tokens with the default ``--max-seq-len``, micro-batches of 2 of them) and the process was
OOM-killed at 24 GB after 15 silent minutes. Activations, not weights, dominate long sequences:
measured on CPU in float32, one SmolLM2-135M policy forward + backward keeps about 2.1 MiB per
token (30 layers x ~17.7k floats per layer and token), i.e. ~24 GiB for the 11,500 tokens of two
such trajectories, on top of ~4 GiB of weights, gradients and AdamW states.

The estimate (bytes, one process, float32 on CPU):

* static = runtime + 16 B per trainable parameter (weight, gradient, two AdamW moments) of the
  policy and of the critic + 4 B per frozen critic parameter + 4 B per parameter of the frozen
  initial policy (``--behaviour-logprobs initial-policy``);
* activations(T) for a micro-batch of T tokens (the largest of the policy's and critic's passes:
  the policy's, which also has the LM head) = T x layers x (4 I + 20 H) x 4 B without activation
  checkpointing, T x layers x H x 4 B + 3 x T x (4 I + 20 H) x 4 B with it (layer inputs kept;
  one layer recomputed at a time, with its gradients and attention buffers), plus the chunked
  log-prob buffers (3 x min(T, chunk) x V x 4 B) and the packed-sequence attention mask (~5 B per
  token pair).

The per-layer coefficient ``4 I + 20 H`` (H hidden size, I MLP width) was fitted to the measured
slope of SmolLM2-135M (bench figures in docs/train.md, "Running traj train for real"); it is an upper
bound for Llama-like layers, which keep the MLP's four I-wide tensors and about twenty H-wide
ones (norms, q/k/v/o, RoPE, residuals) for the backward pass. Checked end to end on SmolLM2-135M
with the initial policy held: 4,574 tokens without checkpointing, estimated 14.0 GiB, measured
13.1 GiB; micro-batches of up to 6,759 tokens with checkpointing, estimated 6.9 GiB, measured
6.5 GiB.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trajstore.errors import TrajstoreError
from trajstore.trainer.models import backbone_of

GIB = 1 << 30
RUNTIME_BYTES = int(0.44 * GIB)
"""Python, torch and transformers imported (measured, docs/train.md "Memory")."""
HEADROOM = 0.9
"""Share of the available memory the plan may use (the rest: allocator slack, other processes)."""
LOGPROB_CHUNK = 1024
"""Tokens per chunk of the log-prob kernel (trainer.logprobs.DEFAULT_CHUNK_TOKENS)."""


class TrainMemoryError(TrajstoreError):
    """The run cannot fit the memory available (raised before anything is written)."""


@dataclass(frozen=True)
class ModelShape:
    """What the estimate needs of a model: parameter counts and layer dimensions."""

    policy_params: int
    critic_trainable: int
    critic_frozen: int
    layers: int
    hidden: int
    intermediate: int
    vocab: int


def model_shape(model, critic_trainable_pattern: str | None, *, with_critic: bool) -> ModelShape:  # noqa: ANN001
    """:class:`ModelShape` of a loaded causal LM (``model.config`` as transformers has it) and the
    critic that :func:`trajstore.trainer.models.build_critic` would build from it (the backbone
    copied, names prefixed ``backbone.``, plus a value head of H + 1 parameters)."""
    c = model.config
    hidden = int(c.hidden_size)
    inter = int(getattr(c, "intermediate_size", None) or 4 * hidden)
    if getattr(c, "num_experts_per_tok", None) and getattr(c, "moe_intermediate_size", None):
        inter = max(inter, int(c.moe_intermediate_size) * int(c.num_experts_per_tok))
    policy = sum(p.numel() for p in model.parameters())
    trainable = frozen = 0
    if with_critic:
        rx = re.compile(critic_trainable_pattern) if critic_trainable_pattern is not None else None
        for name, p in backbone_of(model).named_parameters():
            if rx is None or rx.search("backbone." + name):
                trainable += p.numel()
            else:
                frozen += p.numel()
        trainable += hidden + 1  # the value head
    vocab = int(model.get_output_embeddings().weight.shape[0])
    return ModelShape(policy, trainable, frozen, int(c.num_hidden_layers), hidden, inter, vocab)


def static_bytes(shape: ModelShape, *, behaviour_copy: bool) -> int:
    """Runtime + weights, gradients and AdamW moments (see the module doc)."""
    return (RUNTIME_BYTES + 16 * shape.policy_params + 16 * shape.critic_trainable + 4 * shape.critic_frozen
            + (4 * shape.policy_params if behaviour_copy else 0))


def activation_bytes(shape: ModelShape, tokens: int, *, checkpointing: bool) -> int:
    """Peak activation memory of one forward + backward pass over a packed micro-batch of
    `tokens` tokens (see the module doc)."""
    per_layer = (4 * shape.intermediate + 20 * shape.hidden) * 4
    if checkpointing:
        # the layers' inputs, plus the layer being recomputed: its activations, their gradients
        # and the attention backward's buffers (3 x one layer: fitted to a measured end-to-end peak)
        layers = tokens * (shape.layers * shape.hidden * 4 + 3 * per_layer)
    else:
        layers = tokens * shape.layers * per_layer
    logits = 3 * min(tokens, LOGPROB_CHUNK) * shape.vocab * 4
    mask = 5 * tokens * tokens
    return layers + logits + mask


def available_memory_bytes() -> int | None:
    """Memory this process may still use: the smaller of the kernel's MemAvailable and the room
    left under a cgroup (v2 or v1) limit; None where neither can be read (not Linux)."""
    out: list[int] = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    out.append(int(line.split()[1]) * 1024)
                    break
    except OSError:
        pass
    for limit_path, usage_path in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            with open(limit_path) as f:
                raw = f.read().strip()
            if raw == "max" or int(raw) >= 1 << 60:
                continue
            with open(usage_path) as f:
                out.append(max(int(raw) - int(f.read().strip()), 0))
            break
        except (OSError, ValueError):
            continue
    return min(out) if out else None


@dataclass(frozen=True)
class MemoryPlan:
    """What :func:`plan_memory` decided.

    Attributes:
        micro_batch_tokens: most tokens packed into one micro-batch (a single trajectory longer
            than that still goes alone: it is never split).
        activation_checkpointing: whether decoder layers are recomputed in the backward pass.
        checkpoint_above_tokens: with checkpointing, only micro-batches of more tokens than this
            are checkpointed (auto: the shorter ones stay under `peak_bytes` without it, so the
            peak is that of checkpointing every micro-batch); 0 = every micro-batch.
        peak_bytes: estimated peak of one process for the largest micro-batch the plan allows
            (``max(micro_batch_tokens, max_seq_len)`` tokens).
        available_bytes: the memory it was planned against (None: unknown, nothing checked).
        static_bytes: weights, gradients, AdamW and runtime.
        reason: one phrase on why (shown to the user).
    """

    micro_batch_tokens: int
    activation_checkpointing: bool
    checkpoint_above_tokens: int
    peak_bytes: int
    available_bytes: int | None
    static_bytes: int
    reason: str

    def describe(self) -> str:
        ac = "off"
        if self.activation_checkpointing:
            ac = (f"on for micro-batches of more than {self.checkpoint_above_tokens:,} tokens"
                  if self.checkpoint_above_tokens else "on")
        avail = f"{self.available_bytes / GIB:.1f} GiB available; " if self.available_bytes is not None else ""
        # the peak is that of a full micro-batch: the demo's 300-token trajectories under its
        # --max-seq-len 4096 read "estimated peak 12.6 GiB" and peaked at 4-6 GiB (all processes)
        return (f"memory plan: micro-batches of at most {self.micro_batch_tokens:,} tokens, activation "
                f"checkpointing {ac}; {avail}estimated peak {self.peak_bytes / GIB:.1f} GiB when a micro-batch "
                f"holds {self.micro_batch_tokens:,} tokens, less for shorter ones ({self.reason})")


def _max_tokens(shape: ModelShape, budget: int, *, checkpointing: bool) -> int:
    """Largest T with activation_bytes(T) <= budget (0 when none)."""
    lo, hi = 0, 1 << 24
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if activation_bytes(shape, mid, checkpointing=checkpointing) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def plan_memory(shape: ModelShape, *, max_seq_len: int, micro_batch_size: int, micro_batch_tokens: int | None,
                activation_checkpointing: bool | None, behaviour_copy: bool, available: int | None,
                processes: int = 1) -> MemoryPlan:
    """Decide the micro-batch token bound and activation checkpointing for one process.

    Args:
        shape: the model (:func:`model_shape`).
        max_seq_len: longest trajectory trained (``--max-seq-len``): the smallest micro-batch that
            must fit.
        micro_batch_size: trajectories per micro-batch (``--micro-batch-size``).
        micro_batch_tokens: the user's bound (``--micro-batch-tokens``), None = auto: `max_seq_len`
            where the memory is known (the peak is then that of one longest trajectory), else
            ``micro_batch_size x max_seq_len``.
        activation_checkpointing: the user's choice, None = auto (off unless a micro-batch of
            ``max_seq_len`` tokens would not fit without it).
        behaviour_copy: a frozen initial policy is held too (``--behaviour-logprobs initial-policy``).
        available: bytes free for this machine's processes (:func:`available_memory_bytes`);
            None = unknown (nothing is refused; auto bound = ``micro_batch_size x max_seq_len``).
        processes: processes of this job on the machine, each holding whole models (DDP).

    Raises:
        TrainMemoryError: the largest micro-batch cannot fit; the line names the options to lower.
    """
    static = static_bytes(shape, behaviour_copy=behaviour_copy)
    full = micro_batch_size * max_seq_len  # more tokens than that never meet in one micro-batch
    candidates = [False, True] if activation_checkpointing is None else [activation_checkpointing]
    if available is None:
        ac = bool(activation_checkpointing)
        tokens = micro_batch_tokens or full
        peak = static + activation_bytes(shape, max(tokens, max_seq_len), checkpointing=ac)
        return MemoryPlan(tokens, ac, 0, peak, None, static, "available memory unknown: not checked")
    budget = int(available * HEADROOM) // max(processes, 1)
    # auto: one longest trajectory's worth of tokens. A larger pass is no faster on CPU (and its
    # attention grows with the square of its tokens), a smaller one could not hold that trajectory.
    tokens = micro_batch_tokens or max_seq_len
    need = max(tokens, max_seq_len)
    for ac in candidates:
        peak = static + activation_bytes(shape, need, checkpointing=ac)
        if peak > budget:
            continue
        why = "--micro-batch-tokens" if micro_batch_tokens is not None else "auto: one --max-seq-len trajectory"
        above = 0
        if ac and activation_checkpointing is None:
            # auto: micro-batches short enough to stay under the checkpointed peak run without it
            above = _max_tokens(shape, peak - static, checkpointing=False)
            no_ac = static + activation_bytes(shape, need, checkpointing=False)
            why += f"; checkpointing because {need:,} tokens would need {no_ac / GIB:.1f} GiB without it"
        return MemoryPlan(tokens, ac, above, peak, available, static, why)
    ac = candidates[-1]
    tokens = max(micro_batch_tokens or 0, max_seq_len)
    peak = static + activation_bytes(shape, tokens, checkpointing=ac)
    if micro_batch_tokens and micro_batch_tokens > max_seq_len:
        what, lower = f"--micro-batch-tokens {micro_batch_tokens:,}", "lower --micro-batch-tokens or --max-seq-len"
    else:
        what, lower = f"one trajectory of --max-seq-len {max_seq_len:,}", "lower --max-seq-len (longer trajectories " \
            "are skipped)"
    if not ac:
        lower += ", or drop --no-activation-checkpointing"
    per = f" per process ({processes} processes)" if processes > 1 else ""
    raise TrainMemoryError(
        f"not enough memory: a micro-batch of {tokens:,} tokens ({what}) needs about {peak / GIB:.1f} GiB{per} "
        f"({static / GIB:.1f} GiB of weights, gradients and AdamW states, "
        f"{(peak - static) / GIB:.1f} GiB of activations{' with activation checkpointing' if ac else ''}), but "
        f"{available / GIB:.1f} GiB is available (at most {HEADROOM:.0%} of it is planned); {lower}, or use a "
        "machine with more memory; nothing was written")


__all__ = ["GIB", "MemoryPlan", "ModelShape", "TrainMemoryError", "activation_bytes", "available_memory_bytes",
           "model_shape", "plan_memory", "static_bytes"]

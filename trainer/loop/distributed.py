"""Data parallelism for `traj train` under ``torchrun``: process group setup (gloo on CPU, NCCL on
CUDA), the two strategies, and the few collectives the loop needs.

Every rank reads the same step batch (shard listings come from rank 0) and trains on its own
disjoint share of it (:func:`trajstore.trainer.data.split_for_rank`); gradients are averaged
over ranks, so every rank applies the same update. Strategies (``--strategy``):

- ``ddp`` (small models): every rank holds the whole model, gradients and optimiser state;
  DDP all-reduces gradients. A single process (no ``WORLD_SIZE``) runs the same code with the
  collectives turned into no-ops.
- ``fsdp`` (models whose weights, gradients and optimiser states do not fit one device):
  PyTorch FSDP2 (``torch.distributed.fsdp.fully_shard``) shards parameters, gradients and
  optimiser state over the ranks, one group per decoder layer plus a root group (embeddings,
  final norm, LM / value head). Mixed precision on CUDA: bf16 parameters and compute, float32
  gradient reduction and optimiser state (:data:`MIXED_PRECISION`). With one process a
  single-rank process group is created, so the same code runs (useful to test it on one GPU).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import torch
import torch.distributed as dist
from torch import nn

T = TypeVar("T")


@dataclass(frozen=True)
class DistEnv:
    """This process's place in the job: rank in [0, world_size), and its device."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def resolve_device(device: str, local_rank: int = 0) -> torch.device:
    """'auto' -> ``cuda:<local_rank>`` when CUDA is available, else CPU; other strings as given."""
    if device == "auto":
        return torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    try:
        d = torch.device(device)
    except RuntimeError as e:
        raise ValueError(f"--device {device!r} is not a device (auto, cpu, cuda or cuda:N): {e}") from None
    if d.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {device!r}: CUDA is not available on this machine (use auto or cpu)")
    if d.type == "cuda" and d.index is None:
        d = torch.device(f"cuda:{local_rank}")
    if d.type == "cuda" and d.index >= torch.cuda.device_count():
        raise ValueError(f"--device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return d


Strategy = Literal["ddp", "fsdp"]
"""How models are spread over the ranks (see the module docstring)."""


def init_distributed(device: str = "auto", *, strategy: Strategy = "ddp") -> DistEnv:
    """Join the torchrun process group when ``WORLD_SIZE`` > 1 (backend: NCCL on CUDA, gloo on
    CPU); otherwise describe a single process (with ``fsdp``: in a one-rank process group, which
    FSDP2's device mesh needs). Idempotent."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev = resolve_device(device, local_rank)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    backend = "nccl" if dev.type == "cuda" else "gloo"
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend=backend)
    elif strategy == "fsdp" and not dist.is_initialized():
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
    return DistEnv(rank, world, local_rank, dev)


def mixed_precision(env: DistEnv, bf16: bool, *, cast_inputs: bool = True) -> Any:
    """FSDP2's mixed-precision policy: on CUDA with `bf16`, bf16 parameters and compute with
    float32 gradient reduce-scatter (the sharded float32 parameters and optimiser state stay
    float32); otherwise float32 throughout (CPU: bf16 matmuls are slow there and the tests
    compare against float32 references). `cast_inputs` False leaves the module's floating-point
    inputs as they are (the root's are the per-token sampling parameters)."""
    # torch.distributed: loaded only by distributed (DDP / FSDP) runs
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if env.device.type == "cuda" and bf16:
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32,
                                    cast_forward_inputs=cast_inputs)
    return MixedPrecisionPolicy()


def shard(module: nn.Module, layers: list[nn.Module], env: DistEnv, *, bf16: bool,
          activation_checkpointing: bool = False) -> nn.Module:
    """Shard `module` in place with FSDP2: each of `layers` (the decoder layers) is its own
    group, `module` the root group holding everything else (embeddings, norm, heads; tied
    weights stay in one group). Parameters become DTensors sharded on dim 0 over all ranks.

    Args:
        module: the root (e.g. ``PolicyLogprobs`` or ``Critic``), on its device.
        layers: submodules to shard separately, in execution order.
        activation_checkpointing: recompute each layer's activations in the backward pass
            instead of keeping them (less memory, about one more forward pass of compute).

    Returns:
        `module` (now also an ``FSDPModule``).
    """
    # torch.distributed: loaded only by distributed (DDP / FSDP) runs
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(env.device.type, (env.world_size,))
    mp = mixed_precision(env, bf16)
    for layer in layers:
        if activation_checkpointing:
            checkpoint_activations(layer)
        fully_shard(layer, mesh=mesh, mp_policy=mp)
    # the root's float inputs are sampling parameters: in bf16 a temperature of 0.7 or a top_p of
    # 0.8 would be another one (0.69921875, 0.80078125) than the engine sampled with
    fully_shard(module, mesh=mesh, mp_policy=mixed_precision(env, bf16, cast_inputs=False))
    return module


def checkpoint_activations(layer: nn.Module, enabled: Callable[[], bool] | None = None) -> None:
    """Recompute `layer`'s forward in the backward pass (non-reentrant activation checkpointing):
    only the layer's input is kept between the passes. `enabled` (called at each forward; None =
    always) lets the trainer checkpoint only the micro-batches that need it."""
    # loaded only when activations are checkpointed
    from torch.utils.checkpoint import checkpoint

    forward = layer.forward

    def checkpointed(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled() or (enabled is not None and not enabled()):
            return forward(*args, **kwargs)
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)

    layer.forward = checkpointed  # type: ignore[method-assign]


def full_state_dict(module: nn.Module, env: DistEnv, *, prefix: str = "") -> dict[str, torch.Tensor]:
    """The whole (unsharded) state dict of an FSDP-sharded `module`, on rank 0's CPU (other
    ranks get an empty dict); a collective: every rank must call it. Keys starting with
    `prefix` have it removed (e.g. ``lm.`` of :class:`~trajstore.trainer.models.PolicyLogprobs`),
    others are dropped."""
    # torch.distributed: loaded only by distributed (DDP / FSDP) runs
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    sd = get_model_state_dict(module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if not env.is_main:
        return {}
    return {k[len(prefix):]: v for k, v in sd.items() if k.startswith(prefix)}


def is_sharded(module: nn.Module | None) -> bool:
    """Whether `module` is sharded by FSDP2."""
    if module is None:
        return False
    # torch.distributed: loaded only by distributed (DDP / FSDP) runs
    from torch.distributed.fsdp import FSDPModule

    return isinstance(module, FSDPModule)


def shutdown(env: DistEnv) -> None:
    """Leave the torchrun process group (every rank, after its last collective); nothing for
    one process. PyTorch asks for it before exit: see ``torch.distributed.destroy_process_group``."""
    if env.distributed and dist.is_initialized():
        dist.destroy_process_group()


def wrap(module: nn.Module, env: DistEnv) -> nn.Module:
    """DDP around `module` in a multi-process job (parameters are broadcast from rank 0)."""
    if not env.distributed:
        return module
    # torch.distributed: loaded only by distributed (DDP / FSDP) runs
    from torch.nn.parallel import DistributedDataParallel as DDP

    ids = [env.device.index] if env.device.type == "cuda" else None
    return DDP(module, device_ids=ids)


def unwrap(module: nn.Module) -> nn.Module:
    return module.module if hasattr(module, "no_sync") and hasattr(module, "module") else module


@contextlib.contextmanager
def maybe_no_sync(module: nn.Module, skip_sync: bool) -> Iterator[None]:
    """Inside: backward passes accumulate locally without the gradient all-reduce (DDP's
    ``no_sync``) when `skip_sync`; a plain context otherwise."""
    if skip_sync and hasattr(module, "no_sync"):
        with module.no_sync():
            yield
    else:
        yield


def all_reduce_sum(t: torch.Tensor, env: DistEnv) -> torch.Tensor:
    """Sum of `t` over ranks (in place; returned for chaining)."""
    if env.distributed:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def all_reduce_max(t: torch.Tensor, env: DistEnv) -> torch.Tensor:
    if env.distributed:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t


def broadcast_object(obj: T, env: DistEnv) -> T:
    """Rank 0's `obj` on every rank (picklable objects)."""
    if not env.distributed:
        return obj
    box = [obj if env.is_main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]  # type: ignore[return-value]


def gather_objects(obj: Any, env: DistEnv) -> list[Any]:
    """Every rank's `obj`, in rank order (on every rank)."""
    if not env.distributed:
        return [obj]
    out: list[Any] = [None] * env.world_size
    dist.all_gather_object(out, obj)
    return out


def full(t: torch.Tensor) -> torch.Tensor:
    """The whole value of a tensor that may be a DTensor (FSDP2's sharded parameters, and the
    norms computed from them); a plain tensor as it is."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def barrier(env: DistEnv) -> None:
    if env.distributed:
        dist.barrier()

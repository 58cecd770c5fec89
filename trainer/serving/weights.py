"""Loading published weights into the model ``traj serve`` serves: a Hugging Face folder's
safetensors checked against the served model and only then copied in place (all or nothing), the
folder's weight version, and the SGLang-style result of a reload.
The engine (engine.py) decides when a reload runs; ``POST /update_weights_from_disk`` (routes.py) asks."""

from __future__ import annotations

import glob
import json
import os
import time
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn

from trajstore.errors import TrajstoreError
from trajstore.store.layout import VERSION_META_FILE
from trajstore.trainer.loop.publish import tied_groups


class WeightLoadError(TrajstoreError):
    """The weights at a model path cannot be loaded into the served model."""


MAX_NAMED = 10
"""Tensors named at most per kind of problem in a :class:`WeightLoadError` message."""


def _named(names: list[str]) -> str:
    more = f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else ""
    return ", ".join(names[:MAX_NAMED]) + more


def read_weights_dir(path: str) -> dict[str, torch.Tensor]:
    """Every tensor of the ``*.safetensors`` files of folder `path`, on the CPU, by name.

    Raises:
        WeightLoadError: no safetensors file, or one that cannot be read.
    """
    files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    if not files:
        raise WeightLoadError(f"no *.safetensors weights in {path}")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        try:
            state.update(load_file(f, device="cpu"))
        except Exception as e:  # safetensors raises its own error types for a bad header
            raise WeightLoadError(f"{f} is not a readable safetensors file: {e}") from e
    return state


def plan_weight_copy(model: nn.Module, state: dict[str, torch.Tensor], *,
                     source: str = "the weights") -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Match every tensor of `model`'s state dict to one in `state`, checking name, shape and
    dtype, without changing `model`.

    A tied tensor (e.g. an LM head tied to the input embeddings) is matched once, under any one
    of its names. A floating-point tensor takes any floating-point dtype (it is cast when copied:
    published float32 into a bfloat16 server); any other dtype must be equal.

    Args:
        model: the served model.
        state: tensors by state-dict name (:func:`read_weights_dir`).
        source: what `state` is, for the error message (e.g. its folder).

    Returns:
        ``(live tensor, new tensor)`` pairs, one per distinct tensor of `model`.

    Raises:
        WeightLoadError: naming every missing, unexpected, wrong-shape and wrong-dtype tensor.
    """
    live = model.state_dict(keep_vars=True)
    plan: list[tuple[torch.Tensor, torch.Tensor]] = []
    missing: list[str] = []
    shapes: list[str] = []
    dtypes: list[str] = []
    for names in tied_groups(model):
        found = [n for n in names if n in state]
        if not found:
            missing.append(" = ".join(names))
            continue
        dst, src = live[names[0]], state[found[0]]
        if tuple(src.shape) != tuple(dst.shape):
            shapes.append(f"{found[0]} {tuple(src.shape)} (served {tuple(dst.shape)})")
        elif (src.is_floating_point() != dst.is_floating_point()
              or (not dst.is_floating_point() and src.dtype != dst.dtype)):
            dtypes.append(f"{found[0]} {str(src.dtype).removeprefix('torch.')} "
                          f"(served {str(dst.dtype).removeprefix('torch.')})")
        else:
            plan.append((dst, src))
    unexpected = sorted(set(state) - set(live))
    problems = [f"{label} {len(names)}: {_named(sorted(names))}" for label, names in (
        ("missing", missing), ("wrong shape", shapes), ("wrong dtype", dtypes), ("unexpected", unexpected)) if names]
    if problems:
        raise WeightLoadError(f"{source} does not match {type(model).__name__}, nothing was loaded: "
                              + "; ".join(problems))
    return plan


def load_weights_from_dir(model: nn.Module, path: str) -> None:
    """Copy the ``*.safetensors`` weights of a Hugging Face folder into `model` in place, all or
    nothing: every tensor is read and checked (:func:`plan_weight_copy`) before the first copy,
    so a folder that does not match leaves `model` bit-identical.

    Raises:
        WeightLoadError: no or unreadable safetensors file; missing, unexpected, wrong-shape or
            wrong-dtype tensors (all named). `model` is then unchanged.
    """
    plan = plan_weight_copy(model, read_weights_dir(path), source=path)
    with torch.no_grad():
        for dst, src in plan:
            dst.copy_(src)


def version_of_dir(path: str) -> str | None:
    """The ``version`` in a published folder's meta file (:mod:`trajstore.store.layout`), if any."""
    try:
        with open(os.path.join(path, VERSION_META_FILE)) as fh:
            v = json.load(fh).get("version")
    except (OSError, ValueError, AttributeError):
        return None
    return None if v is None else str(v)


def reload_weights(model: nn.Module, path: str, *, version: str | None, current_version: str, mode: str,
                   in_flight: int) -> dict[str, Any]:
    """Load the weights of folder `path` into `model` and report it as SGLang's
    ``/update_weights_from_disk`` does.

    Args:
        version: the version the caller named (None = the folder's meta.json, else `current_version`).
        current_version: the version served until now (reported again when loading fails).
        mode: the reload mode, named in the message.
        in_flight: requests being generated when the reload ran (``num_paused_requests``).

    Returns:
        ``{"success", "message", "weight_version", "num_paused_requests"}``; on failure the
        message is the :class:`WeightLoadError` (naming the tensors at fault), `model` is
        unchanged and ``weight_version`` is `current_version`.
    """
    t0 = time.perf_counter()
    try:
        with torch.no_grad():
            load_weights_from_dir(model, path)
    except WeightLoadError as e:
        return {"success": False, "message": str(e), "weight_version": current_version, "num_paused_requests": 0}
    new = version if version is not None else (version_of_dir(path) or current_version)
    return {"success": True, "weight_version": new, "num_paused_requests": in_flight,
            "message": f"loaded {path} as weight version {new} in "
                       f"{time.perf_counter() - t0:.2f}s ({mode}; no prefix cache is kept)"}

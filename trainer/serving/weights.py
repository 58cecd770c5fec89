"""Loading published weights into the model ``traj serve`` serves: a Hugging Face folder's
safetensors copied in place, the folder's weight version, and the SGLang-style result of a reload.
The engine (engine.py) decides when a reload runs; ``POST /update_weights_from_disk`` (routes.py) asks."""

from __future__ import annotations

import glob
import json
import os
import time
from typing import Any

import torch
from torch import nn

from trajstore.errors import TrajstoreError


class WeightLoadError(TrajstoreError):
    """The weights at a model path cannot be loaded into the served model."""


def load_weights_from_dir(model: nn.Module, path: str) -> None:
    """Copy the ``*.safetensors`` weights of a Hugging Face folder into `model` in place.

    A tied tensor (e.g. an LM head tied to the input embeddings) may be stored under any one of
    its names.

    Raises:
        WeightLoadError: no safetensors file, unknown or missing tensors, or wrong shapes.
    """
    from safetensors.torch import load_file

    files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    if not files:
        raise WeightLoadError(f"no *.safetensors weights in {path}")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        try:
            state.update(load_file(f, device="cpu"))
        except Exception as e:  # safetensors raises its own error types for a bad header
            raise WeightLoadError(f"{f} is not a readable safetensors file: {e}") from e
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as e:
        raise WeightLoadError(f"cannot load {path} into {type(model).__name__}: {str(e).splitlines()[0]}") from e
    # A tied tensor is stored once under one of its names (trajstore's publish keeps the
    # alphabetically first, e.g. SmolLM2's lm_head.weight; from_pretrained's save keeps
    # model.embed_tokens.weight): a name is not missing when another name of its tensor was loaded.
    from trajstore.trainer.loop.publish import tied_groups

    group = {n: names for names in tied_groups(model) for n in names}
    missing = [k for k in missing if not any(n in state for n in group[k])]
    if missing or unexpected:
        raise WeightLoadError(f"{path} does not match {type(model).__name__}: missing {sorted(missing)[:5]}, "
                              f"unexpected {sorted(unexpected)[:5]}")


def version_of_dir(path: str) -> str | None:
    """The ``version`` in a published folder's meta.json (trajstore.policies layout), if any."""
    try:
        with open(os.path.join(path, "meta.json")) as fh:
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
        message is the :class:`WeightLoadError`.
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

"""trajstore: a trajectory store and SAO trainer for asynchronous agentic RL.

The SDK, store, reader and audits import without torch; the trainer lives in
:mod:`trajstore.trainer` and needs the ``train`` extra.

The names below are exported lazily (PEP 562 module ``__getattr__``): ``import trajstore`` costs
nothing beyond this file, and ``trajstore.Store`` imports :mod:`trajstore.store` on first use. A
command-line tool that needs only the reader (``traj stats``) then never pays for pydantic models
or the adapters, which is most of a command's start-up time.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "trajstore.adapters": ("ActionCall", "action_from_openai_completion", "action_from_sglang_generate"),
    "trajstore.builder": ("TrajectoryBuilder",),
    "trajstore.errors": ("AdapterError", "CorruptShardError", "NewerSchemaError", "StoreError",
                         "TrajectoryValidationError", "TrajstoreError", "Violation"),
    "trajstore.models": ("CallTiming", "CallUsage", "SamplingParams", "Span", "Trajectory"),
    "trajstore.reader": ("TrajectoryBatch", "count_duplicates", "iter_batches", "read_trajectories",
                         "read_trajectories_by_id", "scan_trajectories"),
    "trajstore.schema": ("SCHEMA_VERSION", "TRAJECTORY_SCHEMA"),
    "trajstore.store": ("Store", "open_store"),
    "trajstore.writer": ("StoreWriter", "write_trajectories"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = [
    "ActionCall", "AdapterError", "CallTiming", "CallUsage", "CorruptShardError", "NewerSchemaError", "SCHEMA_VERSION",
    "SamplingParams", "Span", "Store", "StoreError", "StoreWriter", "TRAJECTORY_SCHEMA", "Trajectory",
    "TrajectoryBatch", "TrajectoryBuilder", "TrajectoryValidationError", "TrajstoreError", "Violation",
    "action_from_openai_completion", "action_from_sglang_generate", "count_duplicates", "iter_batches",
    "open_store", "read_trajectories", "read_trajectories_by_id", "scan_trajectories", "write_trajectories",
    "__version__",
]
"""The public names, each imported on first use (``_EXPORTS`` says from where)."""


def __getattr__(name: str) -> Any:
    """Import the module that defines ``name`` on first access (PEP 562); ``__version__`` is the
    installed distribution's (read from its metadata on first access)."""
    if name == "__version__":
        globals()[name] = _installed_version()
        return globals()[name]
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'trajstore' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def _installed_version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # 50 ms: only when asked

    try:
        return version("trajstore")
    except PackageNotFoundError:  # a source tree used without installing it
        return "0.0.0+unknown"


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULE_OF))


if TYPE_CHECKING:  # static analysers and IDEs see the eager imports
    from trajstore.adapters import ActionCall, action_from_openai_completion, action_from_sglang_generate
    from trajstore.builder import TrajectoryBuilder
    from trajstore.errors import (
        AdapterError,
        CorruptShardError,
        NewerSchemaError,
        StoreError,
        TrajectoryValidationError,
        TrajstoreError,
        Violation,
    )
    from trajstore.models import CallTiming, CallUsage, SamplingParams, Span, Trajectory
    from trajstore.reader import (
        TrajectoryBatch,
        count_duplicates,
        iter_batches,
        read_trajectories,
        read_trajectories_by_id,
        scan_trajectories,
    )
    from trajstore.schema import SCHEMA_VERSION, TRAJECTORY_SCHEMA
    from trajstore.store import Store, open_store
    from trajstore.writer import StoreWriter, write_trajectories

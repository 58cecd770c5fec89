"""trajstore: a trajectory store and SAO trainer for asynchronous agentic RL.

The SDK, store, reader and audits import without torch; the trainer lives in
:mod:`trajstore.trainer` and needs the ``train`` extra.
"""

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

__version__ = "0.1.0"

__all__ = [
    "ActionCall", "AdapterError", "CallTiming", "CallUsage", "CorruptShardError", "NewerSchemaError", "SCHEMA_VERSION",
    "SamplingParams", "Span",
    "Store", "StoreError", "StoreWriter", "TRAJECTORY_SCHEMA", "Trajectory", "TrajectoryBatch", "TrajectoryBuilder",
    "TrajectoryValidationError", "TrajstoreError", "Violation", "action_from_openai_completion",
    "action_from_sglang_generate", "count_duplicates", "iter_batches", "open_store", "read_trajectories",
    "read_trajectories_by_id", "scan_trajectories", "write_trajectories",
]

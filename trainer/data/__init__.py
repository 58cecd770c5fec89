"""The trainer's data path: trajectories streamed from a store in arrival order, admitted by one
rule, grouped into step batches under a token budget, and packed into micro-batches (pure torch).
This facade re-exports the public API; each concept lives in its own module."""

from trajstore.trainer.data.admission import SKIP_REASONS, Admission, AdmissionRule, decide_rows
from trajstore.trainer.data.batching import micro_batches, split_for_rank, token_micro_batches
from trajstore.trainer.data.census import StoreCensus
from trajstore.trainer.data.columns import read_scalar_columns, with_missing_nullable_columns
from trajstore.trainer.data.cursor import DataCursor
from trajstore.trainer.data.episodes import CHAIN_LINKS, episode_chains
from trajstore.trainer.data.errors import StreamClosed, TrainDataError
from trajstore.trainer.data.packing import (
    ChainedRows,
    GAEInputs,
    PackedMicroBatch,
    gae_inputs,
    join_chains,
    pack,
    split_chains,
    to_packed,
    to_rows,
)
from trajstore.trainer.data.replay_buffer import (
    ReplayBuffer,
    replay_buffer_for,
    replay_slots,
    stream_config,
    with_replay,
)
from trajstore.trainer.data.samples import StepBatch, TrainSample
from trajstore.trainer.data.stream import ListShards, TrajectoryStream
from trajstore.trainer.data.vocabulary import shard_max_token_id
from trajstore.trainer.data.where import WhereFilter

__all__ = [
    "CHAIN_LINKS",
    "SKIP_REASONS",
    "Admission",
    "AdmissionRule",
    "ChainedRows",
    "DataCursor",
    "GAEInputs",
    "ListShards",
    "PackedMicroBatch",
    "ReplayBuffer",
    "TrainSample",
    "StepBatch",
    "StoreCensus",
    "StreamClosed",
    "TrainDataError",
    "TrajectoryStream",
    "WhereFilter",
    "decide_rows",
    "episode_chains",
    "gae_inputs",
    "join_chains",
    "micro_batches",
    "pack",
    "read_scalar_columns",
    "replay_buffer_for",
    "replay_slots",
    "shard_max_token_id",
    "split_chains",
    "split_for_rank",
    "stream_config",
    "to_packed",
    "to_rows",
    "token_micro_batches",
    "with_missing_nullable_columns",
    "with_replay",
]

"""The store: a root URI (local directory or any fsspec URL such as ``s3://bucket/prefix``)
holding immutable Parquet shards that appear atomically, so any number of writers on any
number of hosts can append at once. Layout (every name and path builder is in
:mod:`trajstore.store.layout`)::

    <root>/trajectories/<shard>.parquet       trajectory rows (schema v4; v1 to v3 still read)
    <root>/runs/<run_id>/{steps,consumed}/    training records, also Parquet shards
    <root>/runs/<run_id>/config.json          the resolved training config
    <root>/runs/<run_id>/checkpoints/         it<iteration>/ folders and their LATEST pointer
    <root>/policies/<run_id>/v<N>/            published policy weights, and a LATEST pointer
    <root>/_tmp/                              local only: shards being written (never read)
    <root>/_locks/                            lock files of writers that serialise commits

Shard names start with the UTC write time in nanoseconds, so sorting names gives arrival order.
This package re-exports the public names of its modules (one concept each).
"""

from trajstore.store.cleanup import TMP_STALE_AFTER_S
from trajstore.store.detect import LAYOUT_RUNS_CHECKED
from trajstore.store.encoding import (
    PARQUET_COMPRESSION,
    PER_TOKEN_COLUMNS,
    ROW_GROUP_TARGET_MB,
    SPAN_BYTES_ESTIMATE,
    row_bytes,
)
from trajstore.store.handle import Store
from trajstore.store.id_index import METADATA_ID_INDEX_KEY, decode_id_index, encode_id_index, id_hashes
from trajstore.store.layout import (
    LOCKS_DIR,
    POLICIES_DIR,
    RUN_CONFIG_FILE,
    RUN_CONSUMED_DIR,
    RUN_STEPS_DIR,
    RUN_TOKENS_DIR,
    RUNS_DIR,
    SHARD_SUFFIX,
    STORE_FIRST_ENTRIES,
    TMP_DIR,
    TRAJECTORIES_DIR,
    new_shard_name,
)
from trajstore.store.open import open_existing_store, open_store, open_store_for_writing
from trajstore.store.shards import (
    BROKEN_LINK_SIZE,
    SHARD_CACHE_MAX_ENTRIES,
    CorruptShardWarning,
    ShardInfo,
)

__all__ = [
    "BROKEN_LINK_SIZE", "LAYOUT_RUNS_CHECKED", "LOCKS_DIR", "METADATA_ID_INDEX_KEY", "PARQUET_COMPRESSION",
    "PER_TOKEN_COLUMNS", "POLICIES_DIR", "ROW_GROUP_TARGET_MB", "RUNS_DIR", "RUN_CONFIG_FILE", "RUN_CONSUMED_DIR",
    "RUN_STEPS_DIR", "RUN_TOKENS_DIR", "SHARD_CACHE_MAX_ENTRIES", "SHARD_SUFFIX", "SPAN_BYTES_ESTIMATE", "STORE_FIRST_ENTRIES",
    "TMP_DIR", "TMP_STALE_AFTER_S", "TRAJECTORIES_DIR", "CorruptShardWarning", "ShardInfo", "Store",
    "decode_id_index", "encode_id_index", "id_hashes", "new_shard_name", "open_existing_store", "open_store",
    "open_store_for_writing", "row_bytes",
]

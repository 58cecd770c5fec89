"""Store maintenance: ``traj compact`` (:mod:`~trajstore.maintenance.compact`) and ``traj gc``
(:mod:`~trajstore.maintenance.gc`, its trajectory rule in :mod:`~trajstore.maintenance.gc_rows`).

Layering: :mod:`trajstore.store` is the bottom layer (shards, listing, locks, the compaction
records every listing applies), :mod:`trajstore.reader` builds on it, and maintenance builds on
both: it reads shards through the reader (older schema versions converted) and rewrites them
through the store, holding the store's maintenance lock."""

from trajstore.maintenance.compact import CompactionResult, compact_store
from trajstore.maintenance.gc import GcResult, GcRules, gc_store

__all__ = ["CompactionResult", "GcResult", "GcRules", "compact_store", "gc_store"]

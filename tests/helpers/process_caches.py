"""What a process remembers about stores (footers, shard index files, scalar cache covers, id
lookups), and forgetting it, so a test can act as a new process would."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trajstore.reader import id_lookup
from trajstore.store import Store, scalar_cache, shards
from trajstore.store import index as shard_index


def new_process() -> None:
    """Forget what this process read, as a new process would."""
    shards._SHARD_CACHE.clear()
    shards._SCHEMA_NAMES.clear()
    shard_index._FILES.clear()
    scalar_cache._COVERS.clear()
    id_lookup._LOOKUPS.clear()


def files_in(root: Path, rel: str, suffix: str) -> list[str]:
    """Names of the `suffix` files in the store folder `rel` (e.g. the shard index's), sorted."""
    d = root / rel
    return sorted(f for f in os.listdir(d) if f.endswith(suffix)) if d.is_dir() else []


def names_loaded_by_a_new_process(store: Store, load: Callable[[Store], tuple[list[tuple[str, Any]], Any]]) -> list[str]:
    """The shard names a new process finds in a store cache (``load``: the shard index's or the
    scalar cache's), sorted."""
    new_process()
    entries, _ = load(store)
    return sorted(n for n, _ in entries)

"""How far a reader got, in shard names that stay meaningful across compactions.

A reader that streams the store in arrival order (``iter_batches``, the trainer) remembers the
shards it finished and its row in the shard in progress. A compaction may replace those shards
by one output meanwhile (:mod:`trajstore.store.compaction_records`); the output's :attr:`ShardInfo.parts`
say where each source's rows are in it, so :func:`plan` turns the progress into the output's
rows still to read, split into **units** named by the shard whose numbering they continue: a
source already started is continued in its own numbering, a source not started is read under
the coarsest name that covers it, and the progress keeps naming what it read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from trajstore.errors import CorruptShardError
from trajstore.store import ShardInfo
from trajstore.store.compaction_records import CompactionSource


@dataclass
class Progress:
    """Shards read to the end (by name, in any order), the shard in progress and its next row.

    The trainer's ``DataCursor`` holds the same three fields (and is stored in checkpoints).
    """

    done: list[str] = field(default_factory=list)
    shard: str | None = None
    next_row: int = 0


@dataclass
class Unit:
    """Rows of one physical shard that continue the numbering of the shard `name`.

    Attributes:
        name: the shard (a source, or the physical shard itself) the rows belong to.
        rows: row numbers in `name`'s own numbering, ascending, int64.
        phys: the same rows' positions in the physical file, ascending, int64.
    """

    name: str
    rows: np.ndarray
    phys: np.ndarray


def _names_below(parts: Sequence[CompactionSource]) -> set[str]:
    return {n for p in parts for n in p.names()}


def _walk(name: str, parts: Sequence[CompactionSource], phys: np.ndarray, done: set[str], current: str | None,
          next_row: int, units: list[Unit], consumed: list[np.ndarray]) -> None:
    rows = np.arange(len(phys), dtype=np.int64)
    present = phys >= 0
    if name in done:
        consumed.append(phys[present])
        return
    if name == current:
        before = rows < next_row
        consumed.append(phys[before & present])
        units.append(Unit(name, rows[~before & present], phys[~before & present]))
        return
    below = _names_below(parts) if parts else set()
    if below and (below & done or current in below):
        base = 0
        for p in parts:
            sub = np.full(p.rows, -1, dtype=np.int64)
            kept = np.ones(p.rows, dtype=bool)
            if p.dropped:
                kept[list(p.dropped)] = False
            sub[kept] = phys[base:base + p.kept]
            base += p.kept
            _walk(p.name, p.parts, sub, done, current, next_row, units, consumed)
        return
    units.append(Unit(name, rows[present], phys[present]))


def plan(shard: ShardInfo, progress: Progress, done: set[str] | None = None) -> tuple[list[Unit], np.ndarray]:
    """The units of `shard` still to read after `progress`, in row order, and the physical rows
    already read (sorted int64). A shard no compaction wrote is one unit (from ``next_row`` when
    it is the shard in progress); a fully read shard gives no unit with rows (units of no rows
    may be returned: reading them only marks them done).

    Args:
        done: ``set(progress.done)`` when the caller keeps one.

    Raises:
        CorruptShardError: the shard's compaction record does not add up to its rows.
    """
    done = set(progress.done) if done is None else done
    if shard.parts and sum(p.kept for p in shard.parts) != shard.num_rows:
        raise CorruptShardError(shard.path, f"its compaction record accounts for {sum(p.kept for p in shard.parts)} "
                                f"rows, the file has {shard.num_rows}")
    units: list[Unit] = []
    consumed: list[np.ndarray] = []
    _walk(shard.name, shard.parts, np.arange(shard.num_rows, dtype=np.int64), done, progress.shard,
          progress.next_row, units, consumed)
    read = np.sort(np.concatenate(consumed)) if consumed else np.zeros(0, dtype=np.int64)
    return units, read


def mentions(shard: ShardInfo, name: str | None) -> bool:
    """Whether `name` is `shard` or one of the shards it replaced."""
    return name is not None and (name == shard.name or name in _names_below(shard.parts))

"""Ids stored more than once, within a file or across files, found in bounded memory: 8 bytes
(a 64-bit hash of the id) per row while reading, then the candidate rows' ids read again to
confirm (a hash collision is not reported)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from trajstore.store.id_index import id_hashes


@dataclass(frozen=True)
class Duplicate:
    """One row whose id an earlier row already has.

    Attributes:
        trajectory_id: the id.
        file_index, row_group, row: where the repeated copy is (row: in its file, 0-based).
        first: (file_index, row_group, row) of the first copy.
    """

    trajectory_id: str
    file_index: int
    row_group: int
    row: int
    first: tuple[int, int, int]


@dataclass
class DuplicateIds:
    """Collects the ids of every row group in reading order; :meth:`duplicates` then names
    every repeated copy. Memory: 8 bytes per row plus 24 per row group."""

    _hashes: list[np.ndarray] = field(default_factory=list)
    _groups: list[tuple[int, int, int]] = field(default_factory=list)  # (file, row group, first row in file)
    _starts: list[int] = field(default_factory=list)  # global index of each group's first row
    _n: int = 0

    def add(self, file_index: int, row_group: int, first_row: int, ids: list[str | None]) -> None:
        """Record the ids of one row group (nulls are skipped: they are a row problem of their own)."""
        h = id_hashes(["" if i is None else i for i in ids])
        self._hashes.append(h)
        self._groups.append((file_index, row_group, first_row))
        self._starts.append(self._n)
        self._n += len(h)

    def _where(self, index: int) -> tuple[int, int, int, int]:
        """(file index, row group, row in file, row in row group) of global row `index`."""
        g = int(np.searchsorted(np.asarray(self._starts), index, side="right")) - 1
        f, rg, first_row = self._groups[g]
        offset = index - self._starts[g]
        return f, rg, first_row + offset, offset

    def duplicates(self, read_ids: Callable[[int, int], list[str | None]]) -> Iterator[Duplicate]:
        """Every row whose id an earlier row (in reading order) has, that earlier row named.

        Args:
            read_ids: ``(file index, row group) -> ids`` of that row group, to confirm candidates.
        """
        if not self._hashes:
            return
        h = np.concatenate(self._hashes)
        order = np.argsort(h, kind="stable")
        hs = h[order]
        repeated = np.flatnonzero(hs[1:] == hs[:-1]) + 1
        if not len(repeated):
            return
        candidates = np.unique(np.concatenate([order[repeated], order[repeated - 1]]))
        cache: dict[tuple[int, int], list[str | None]] = {}
        first: dict[str, tuple[int, int, int]] = {}
        for index in candidates:  # ascending: reading order
            f, rg, row, offset = self._where(int(index))
            if (f, rg) not in cache:
                cache[(f, rg)] = read_ids(f, rg)
            tid = cache[(f, rg)][offset]
            if tid is None:
                continue
            if tid in first:
                yield Duplicate(tid, f, rg, row, first[tid])
            else:
                first[tid] = (f, rg, row)

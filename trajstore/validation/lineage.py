"""Lineage across the files ``traj validate`` reads: every child's parent
(``parent_trajectory_id``) must be among the rows read, its ``fork_point`` must not be past
the parent's ``num_tokens`` (:func:`trajstore.validate.lineage_violations`, the writer's rule),
and the child's first ``fork_point`` token ids must be the parent's (the schema's meaning of a
fork point: checked by a hash of the child's prefix, then the parents' row groups read again).
Memory: 16 bytes per row read (a 64-bit id hash and its token count) plus the children."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from trajstore.errors import Violation
from trajstore.store.id_index import id_hashes
from trajstore.validate import lineage_violations


@dataclass(frozen=True)
class Child:
    """A row with a parent, and where it is."""

    file_index: int
    row_group: int
    row: int
    trajectory_id: str
    parent_trajectory_id: str
    fork_point: int | None
    prefix_hash: bytes | None = None
    """Hash of its first ``fork_point`` token ids (None: tokens not read)."""


ReadTokens = Callable[[int, int], list]
"""Token ids of each row of row group (file index, row group), as lists."""


def prefix_hash(tokens: object, n: int) -> bytes:
    """A hash of the first `n` token ids (compared across tables of any integer dtype)."""
    return hashlib.blake2b(np.asarray(tokens, dtype=np.int64)[:n].tobytes(), digest_size=16).digest()


@dataclass
class LineageCheck:
    """Collects each row group's ids, token counts and children; :meth:`problems` then checks the
    children against every row read (a parent may be in a later file). A hash collision could
    take a missing parent for present (64-bit hashes: negligible)."""

    _hashes: list[np.ndarray] = field(default_factory=list)
    _lengths: list[np.ndarray] = field(default_factory=list)
    _children: list[Child] = field(default_factory=list)
    _groups: list[tuple[int, int, int]] = field(default_factory=list)  # (file, row group, rows) per add

    def add(self, file_index: int, row_group: int, first_row: int, table: pa.Table) -> None:
        """Record one row group (rows of schema v3; older tables have no lineage and are only
        recorded as possible parents)."""
        names = set(table.column_names)
        if not {"trajectory_id", "num_tokens"} <= names:
            return
        ids = table.column("trajectory_id").to_pylist()
        self._groups.append((file_index, row_group, table.num_rows))
        self._hashes.append(id_hashes(["" if i is None else i for i in ids]))
        self._lengths.append(table.column("num_tokens").fill_null(-1).to_numpy(zero_copy_only=False)
                             .astype(np.int64, copy=False))
        if "parent_trajectory_id" not in names or table.column("parent_trajectory_id").null_count == table.num_rows:
            return
        parents = table.column("parent_trajectory_id").to_pylist()
        forks = table.column("fork_point").to_pylist() if "fork_point" in names else [None] * table.num_rows
        tokens = table.column("tokens") if "tokens" in names else None
        for i, p in enumerate(parents):
            if p is not None and ids[i] is not None:
                f = forks[i]
                h = None
                if tokens is not None and isinstance(f, int) and f >= 0:
                    h = prefix_hash(tokens[i].values.to_numpy(zero_copy_only=False), f)
                self._children.append(Child(file_index, row_group, first_row + i, ids[i], p, f, h))

    def problems(self, read_tokens: ReadTokens | None = None) -> Iterator[tuple[Child, Violation]]:
        """Each child whose parent is not among the rows read, whose fork point is past the
        parent's end, or (with `read_tokens`) whose first ``fork_point`` tokens are not the
        parent's (the first copy of a repeated parent id counts)."""
        if not self._children:
            return
        hashes = np.concatenate(self._hashes)
        lengths = np.concatenate(self._lengths)
        order = np.argsort(hashes, kind="stable")  # stable: the first copy of an id comes first
        sorted_h = hashes[order]
        wanted = id_hashes([c.parent_trajectory_id for c in self._children])
        at = np.searchsorted(sorted_h, wanted)
        prefixes: dict[tuple[int, int, int], list[Child]] = {}
        for c, h, k in zip(self._children, wanted.tolist(), at.tolist()):
            found = k < len(sorted_h) and int(sorted_h[k]) == h
            n = int(lengths[order[k]]) if found else None
            record = _Record(c.parent_trajectory_id, c.fork_point)
            bad = lineage_violations(record, None if n is None or n < 0 else n)  # type: ignore[arg-type]
            for v in bad:
                if n is None:
                    v = Violation(v.field, f"{c.parent_trajectory_id!r} is not among the rows read")
                yield c, v
            if not bad and found and c.prefix_hash is not None:
                prefixes.setdefault(self._where(int(order[k])), []).append(c)
        yield from self._prefix_problems(prefixes, read_tokens)

    def _where(self, index: int) -> tuple[int, int, int]:
        """(file, row group, row in it) of the `index`-th row recorded."""
        for f, rg, n in self._groups:
            if index < n:
                return f, rg, index
            index -= n
        raise IndexError(index)

    @staticmethod
    def _prefix_problems(prefixes: dict[tuple[int, int, int], list[Child]],
                         read_tokens: ReadTokens | None) -> Iterator[tuple[Child, Violation]]:
        if read_tokens is None:
            return
        by_group: dict[tuple[int, int], list[tuple[int, Child]]] = {}
        for (f, rg, row), cs in prefixes.items():
            by_group.setdefault((f, rg), []).extend((row, c) for c in cs)
        for (f, rg), rows in sorted(by_group.items()):
            tokens = read_tokens(f, rg)
            for row, c in rows:
                assert c.fork_point is not None
                if prefix_hash(tokens[row], c.fork_point) != c.prefix_hash:
                    yield c, Violation("fork_point", f"{c.fork_point}, but the first {c.fork_point} token ids are not "
                                                     f"those of parent {c.parent_trajectory_id!r} (tokens[:fork_point] "
                                                     "must equal the parent's)")


@dataclass(frozen=True)
class _Record:
    """The attributes :func:`lineage_violations` reads."""

    parent_trajectory_id: str
    fork_point: int | None

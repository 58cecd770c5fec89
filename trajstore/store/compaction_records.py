"""Which shards a compaction replaced: the records ``traj compact`` writes and the one rule every
listing applies to them, so readers see each trajectory once while a compaction runs, after it,
and after it was killed at any point.

A compaction merges consecutive shards ``s1 .. sk`` (arrival order) into one output shard. Its
**record**, ``trajectories/_compactions/<output stem>.json``, names the output and its sources
in order, with the rows of each source it left out (later copies of a trajectory id). The
output holds the kept rows of ``s1``, then of ``s2``, ... in their order, so a row of a source
has a known place in the output, and a training cursor that names a source stays meaningful.

The output's name is ``<stem of s1>-c<19 digits>-<8 hex>.parquet``: it sorts right before
``s1`` (``-`` sorts before ``.``), so it takes ``s1``'s place in arrival order, and a later
compaction of the same place sorts before an earlier one (the digits count down with time).

Commit protocol (every step atomic: one PUT, or temp file + rename):

1. write the record (an intent: a record whose output does not exist changes nothing);
2. write the output shard: **the commit point**. From now on every listing shows the output and
   hides the sources;
3. delete the sources (after a grace time, for readers that listed them before the commit).

The rule (:func:`resolve`): a listed shard is hidden when a record names it as a source and
that record's output is listed (or was itself replaced by a listed shard, transitively); a
shard with a compaction name is shown only when its record exists. Listing the shards before
reading the records makes the rule safe with a listing that is no snapshot (S3 pages): an
output that was listed had its record written before it.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from trajstore.errors import StoreError, TrajstoreWarning
from trajstore.store.fsutil import why
from trajstore.store.layout import (
    HOST_TAG,
    RECORD_SUFFIX,
    SHARD_SUFFIX,
    compaction_record_file,
    compactions_dir,
)

if TYPE_CHECKING:
    from trajstore.store.handle import Store

RECORD_FORMAT = 1
"""Version of the record's JSON layout."""
_MARK = re.compile(r"-c\d{19}-[0-9a-f]{8}$")
_COUNTDOWN_FROM = 10**19 - 1


class ShardGone(StoreError):
    """A listed shard was deleted before it was read (a compaction replaced it): list again."""


class LineageWarning(TrajstoreWarning):
    """A compaction record cannot be read, or two records claim the same shard."""


@dataclass(frozen=True)
class CompactionSource:
    """One source of a compaction output, in output order.

    Attributes:
        name: the source shard's file name.
        rows: rows the source held.
        dropped: source rows (0-based, ascending) not carried into the output: later copies of
            an id that appeared earlier in arrival order.
        parts: the source's own sources when it was itself a compaction output, else ().
    """

    name: str
    rows: int
    dropped: tuple[int, ...] = ()
    parts: tuple[CompactionSource, ...] = ()

    @property
    def kept(self) -> int:
        """Rows of this source in the output."""
        return self.rows - len(self.dropped)

    def names(self) -> Iterable[str]:
        """This source's name and every name below it."""
        yield self.name
        for p in self.parts:
            yield from p.names()


@dataclass(frozen=True)
class CompactionRecord:
    """What ``trajectories/_compactions/<output stem>.json`` holds.

    Attributes:
        output: the output shard's file name. rows: its rows.
        sources: (name, rows, dropped rows) of each source, in output order.
        created_at: UNIX time the record was written (s). host, pid: the compacting process.
    """

    output: str
    rows: int
    sources: tuple[tuple[str, int, tuple[int, ...]], ...]
    created_at: float = field(default_factory=time.time)
    host: str = HOST_TAG
    pid: int = 0

    def to_json(self) -> bytes:
        return json.dumps({
            "format": RECORD_FORMAT, "output": self.output, "rows": self.rows, "created_at": self.created_at,
            "host": self.host, "pid": self.pid,
            "sources": [{"name": n, "rows": r, "dropped": list(d)} for n, r, d in self.sources],
        }, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> CompactionRecord:
        """Raises: ValueError (not a record of a known format)."""
        d = json.loads(data)
        if not isinstance(d, dict) or d.get("format") != RECORD_FORMAT:
            raise ValueError(f"not a compaction record of format {RECORD_FORMAT}")
        sources = tuple((str(s["name"]), int(s["rows"]), tuple(int(x) for x in s["dropped"])) for s in d["sources"])
        if sum(r - len(dr) for _, r, dr in sources) != int(d["rows"]):
            raise ValueError("the sources' kept rows do not add up to the output's rows")
        return cls(str(d["output"]), int(d["rows"]), sources, float(d["created_at"]), str(d["host"]), int(d["pid"]))

    @property
    def source_names(self) -> list[str]:
        return [n for n, _, _ in self.sources]


def compacted_name(first_source: str) -> str:
    """The name of a compaction output whose first source is `first_source`: its stem (without
    an earlier compaction's mark), ``-c``, a countdown of the UTC time in ns, random hex."""
    stem = _MARK.sub("", first_source.removesuffix(SHARD_SUFFIX))
    return f"{stem}-c{_COUNTDOWN_FROM - time.time_ns():019d}-{uuid.uuid4().hex[:8]}{SHARD_SUFFIX}"


def is_compaction_output(name: str) -> bool:
    """Whether a shard file name is one :func:`compacted_name` gives (shown only with its record)."""
    return bool(_MARK.search(name.removesuffix(SHARD_SUFFIX)))


_RECORD_CACHE: dict[tuple[str, int], CompactionRecord | None] = {}
_RECORD_LOCK = threading.Lock()


def read_records(store: Store) -> dict[str, CompactionRecord]:
    """Every readable compaction record of the store, by output name. Records never change once
    written, so each is read once per process. An unreadable one is skipped with a
    :class:`LineageWarning` (its output then stays hidden and its sources shown).

    Raises:
        StoreError: the records folder cannot be listed.
    """
    base = store.path(compactions_dir())
    try:
        entries = store.fs.ls(base, detail=True, refresh=True) if not store.is_local else store.fs.ls(base, detail=True)
    except FileNotFoundError:
        return {}
    except Exception as e:  # unreachable endpoint, bad credentials
        raise StoreError(f"cannot list {store.url(compactions_dir())}: {why(e)}") from e
    out: dict[str, CompactionRecord] = {}
    for e in entries:
        p = e["name"]
        if e.get("type") != "file" or not p.endswith(RECORD_SUFFIX):
            continue
        key = (store.url_of(p), int(e.get("size") or 0))
        with _RECORD_LOCK:
            rec = _RECORD_CACHE.get(key, ...)
        if rec is ...:
            try:
                rec = CompactionRecord.from_json(store.fs.cat_file(p))
            except FileNotFoundError:  # an orphan record removed meanwhile
                continue
            except (OSError, ValueError, KeyError, TypeError) as err:
                warnings.warn(f"skipping compaction record {store.url_of(p)}: {why(err)}", LineageWarning,
                              stacklevel=2)
                rec = None
            with _RECORD_LOCK:
                _RECORD_CACHE[key] = rec
        if rec is not None:
            out[rec.output] = rec
    return out


@dataclass
class Resolution:
    """What :func:`resolve` decided for one listing.

    Attributes:
        visible: listed names readers read, in the listing's order.
        replaced: listed names hidden because a committed output holds their rows (a compaction
            deletes them after its grace time).
        pending: listed compaction outputs without a committed record (hidden).
        orphans: records whose output is neither listed nor replaced: a compaction that stopped
            before its commit point (they change nothing).
        committed: records in effect, by output name.
        replaced_by: for each name in `replaced`, the output whose record claims it.
    """

    visible: list[str]
    replaced: list[str]
    pending: list[str]
    orphans: list[str]
    committed: dict[str, CompactionRecord]
    replaced_by: dict[str, str] = field(default_factory=dict)

    def parts(self, name: str) -> tuple[CompactionSource, ...]:
        """The sources of a shard as a tree of :class:`CompactionSource` (() for a shard no compaction wrote)."""
        rec = self.committed.get(name)
        if rec is None:
            return ()
        return tuple(CompactionSource(n, r, d, self.parts(n)) for n, r, d in rec.sources)


def resolve(listed: Sequence[str], records: Mapping[str, CompactionRecord]) -> Resolution:
    """Apply the listing rule (module docstring) to the names of one listing and the records
    read after it. Two records claiming one source (compactions that were not serialised by the
    compaction lock) are resolved the same way by every reader: the one whose output sorts first
    wins, the other is ignored with a warning."""
    present = set(listed)
    claimed: dict[str, str] = {}
    valid: dict[str, CompactionRecord] = {}
    for out in sorted(records):
        rec = records[out]
        clash = [s for s in rec.source_names if s in claimed]
        if clash:
            warnings.warn(f"compaction record of {out} claims {clash[0]}, already replaced by {claimed[clash[0]]}: "
                          "ignored", LineageWarning, stacklevel=3)
            continue
        valid[out] = rec
        for s in rec.source_names:
            claimed[s] = out
    live: dict[str, bool] = {}

    def committed(out: str, depth: int = 0) -> bool:
        """The output exists, or was replaced by an output that is committed."""
        if out in live:
            return live[out]
        ok = out in valid and (out in present or (out in claimed and depth < 64 and committed(claimed[out], depth + 1)))
        live[out] = ok
        return ok

    visible, replaced, pending = [], [], []
    for name in listed:
        if name in claimed and committed(claimed[name]):
            replaced.append(name)
        elif is_compaction_output(name) and not committed(name):
            pending.append(name)
        else:
            visible.append(name)
    done = {o: r for o, r in valid.items() if committed(o)}
    orphans = [o for o in records if o not in done and o not in present]
    return Resolution(visible, replaced, pending, orphans, done, {n: claimed[n] for n in replaced})


def write_record(store: Store, record: CompactionRecord) -> str:
    """Write a record atomically (step 1 of the commit protocol); return its path."""
    return store.write_bytes(compaction_record_file(record.output), record.to_json())


def delete_record(store: Store, output: str) -> None:
    """Remove the record of `output` (only for an orphan: a record whose output never appeared)."""
    try:
        store.fs.rm_file(store.path(compaction_record_file(output)))
    except FileNotFoundError:
        pass

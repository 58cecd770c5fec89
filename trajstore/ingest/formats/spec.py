"""What one input format declares to the ingest (:class:`InputFormat`): its name, help line and
stored ``source``, and how its input is recognised and read: as records that are one trajectory
each (:class:`Records`), as the events of one conversation (:class:`Events`), or as whole Parquet
files (:class:`ParquetFiles`). Detection, dispatch and the pipeline read these declarations
through :mod:`~trajstore.ingest.formats.registry`; nothing else knows a format.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from trajstore.ingest.records import Origin, Parsed, ParsedTrajectory

HistoryKind = Literal["chat", "v1-events", "v0-events", "empty"]
"""What a record's ``history`` list holds (:func:`history_kind`)."""


def history_kind(history: Any) -> HistoryKind | None:
    """What a ``history`` list holds, by the shape of its items: ``chat`` (SWE-agent: messages
    with a ``role``), ``v1-events`` (OpenHands V1: events with a ``kind``), ``v0-events``
    (OpenHands V0: events or ``asdict`` dumps with ``action`` / ``observation`` and no role; older
    eval outputs hold ``[action, observation]`` pairs), ``empty``, or None (not a list, or items of
    none of these shapes)."""
    if not isinstance(history, list):
        return None
    items = [x for e in history[:20] for x in (e if isinstance(e, list) else [e]) if isinstance(x, dict)]
    if not history:
        return "empty"
    if any("kind" in e for e in items[:5]):
        return "v1-events"
    if any("role" in e for e in items):
        return "chat"
    if any("action" in e or "observation" in e for e in items):
        return "v0-events"
    return None


@dataclass(frozen=True)
class Records:
    """A format whose records (a document, a JSON array item, a JSONL line, a Parquet row) are one
    trajectory each.

    Attributes:
        parse: one record -> its parsed trajectory (or several, e.g. the lineages of an ATIF
            file), or a :class:`~trajstore.ingest.records.Problem`; raises on a malformed record
            (that record's problem only).
        keys: top-level keys every record of the format holds at least one of: detection looks
            further only at the objects that hold one (empty: never detected, read only when
            named with ``--input-format``).
        history: for a format whose records hold their log as a ``history`` list: what kinds
            of list (:func:`history_kind`) it holds.
        signature: whether a JSON object (holding one of `keys`, and a `history` of one of those
            kinds) has this format's structure: a harness's own marker, or the shape of its
            parts, never one shared key alone. None: `keys` and `history` say it all.
        excludes: formats whose records also have this structure: an object that is one of
            theirs is not one of this format's.
        fallback: detected only for an object no other format claims (the shape every chat
            format shares).
        list_item: for a format whose record may be a bare JSON list (a list of chat messages):
            whether an object is such an item. A list whose first item is one is one record; so
            is a list of objects that are no record of any format, one of which is an item.
    """

    parse: Callable[[Any, Origin], Parsed | list[Parsed]]
    keys: tuple[str, ...] = ()
    history: tuple[HistoryKind, ...] = ()
    signature: Callable[[dict[str, Any]], bool] | None = None
    excludes: tuple[str, ...] = ()
    fallback: bool = False
    list_item: Callable[[dict[str, Any]], bool] | None = None


@dataclass(frozen=True)
class Events:
    """A format whose records are the events of one conversation: a JSON list or JSONL file of
    them is one trajectory, and so is an event folder (``events/<n>.json``).

    Attributes:
        keys: top-level keys each of its events holds at least one of: `signature` is asked
            only of the objects that hold one.
        signature: whether a JSON object is one of its events (None: its events are another
            event format's, e.g. a session store of V0 events).
        parse: an event list read from one file -> its conversation; raises on a malformed list.
        document: a whole JSON document detected as this format, when it is more than an event
            list (a file named after its task, with a score file beside it); default `parse`.
        folder: the events of an event folder (each file decoded, in order) and the folder's
            path -> its records and problems (the folder's other files read beside them).
        reads_any_folder: reads the event folders whose events are of no known format (the
            first event folders ingest read).
    """

    keys: tuple[str, ...] = ()
    signature: Callable[[dict[str, Any]], bool] | None = None
    parse: Callable[[list[Any], Origin], Parsed] | None = None
    document: Callable[[Any, Origin], Iterator[Parsed]] | None = None
    folder: Callable[[list[Any], str], Iterator[Parsed]] | None = None
    reads_any_folder: bool = False


@dataclass(frozen=True)
class ParquetFiles:
    """A format read a whole Parquet file at a time (trajectory Parquet in trajstore's schema).

    Attributes:
        claims: whether the Parquet file at a path is one of this format's (by its footer).
        parse: the file's records and problems, in row order; never raises for bad input.
    """

    claims: Callable[[str], bool]
    parse: Callable[[str], Iterator[Parsed]]


@dataclass(frozen=True)
class NoTrajectory:
    """The files of a harness that hold no trajectory (a score, conversation state, metadata):
    named as such instead of refused as unknown content.

    Attributes:
        keys: top-level keys each such file (a JSON object) holds at least one of: `why` is
            asked only of the objects that hold one.
        why: a JSON object and its path -> why it holds no trajectory, or None when it is no
            such file.
    """

    keys: tuple[str, ...]
    why: Callable[[dict[str, Any], str], str | None]


Settle = Callable[[list[ParsedTrajectory]], tuple[list[ParsedTrajectory], Counter[str]]]
"""Records held until every input is read -> (those to build, those skipped counted by reason)."""


@dataclass(frozen=True)
class InputFormat:
    """One input format of ``traj ingest``.

    Attributes:
        name: its ``--input-format`` name.
        help: one line for ``traj ingest --help``.
        source: what its trajectories store in ``source`` (the ingest summary's per-format counts).
        records / events / parquet: how its input is read (at least one is set).
        no_trajectory: the harness's files that hold no trajectory (:class:`NoTrajectory`).
        settle: for a format whose records can only be judged together (completion logs that
            repeat one conversation call after call): its records are held until every input
            is read, then settled.
    """

    name: str
    help: str
    source: str
    records: Records | None = None
    events: Events | None = None
    parquet: ParquetFiles | None = None
    no_trajectory: NoTrajectory | None = None
    settle: Settle | None = None

    @property
    def reads_parquet_only(self) -> bool:
        """True for a format that reads nothing but whole Parquet files."""
        return self.parquet is not None and self.records is None and self.events is None

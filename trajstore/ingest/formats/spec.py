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
from typing import Any

from trajstore.ingest.records import Origin, Parsed, ParsedTrajectory


@dataclass(frozen=True)
class Records:
    """A format whose records (a document, a JSON array item, a JSONL line, a Parquet row) are one
    trajectory each.

    Attributes:
        parse: one record -> its parsed trajectory (or several, e.g. the lineages of an ATIF
            file), or a :class:`~trajstore.ingest.records.Problem`; raises on a malformed record
            (that record's problem only).
        signature: whether a JSON object has this format's structure (a harness's own marker,
            or the shape of its parts; never one shared key alone). None: never detected, read
            only when named with ``--input-format``.
        excludes: formats whose records also have this structure: an object that is one of
            theirs is not one of this format's.
        fallback: detected only for an object no other format claims (the shape every chat
            format shares).
        list_item: for a format whose record may be a bare JSON list (a list of chat messages):
            whether an object is such an item. A list whose first item is one is one record; so
            is a list of objects that are no record of any format, one of which is an item.
    """

    parse: Callable[[Any, Origin], Parsed | list[Parsed]]
    signature: Callable[[dict[str, Any]], bool] | None = None
    excludes: tuple[str, ...] = ()
    fallback: bool = False
    list_item: Callable[[dict[str, Any]], bool] | None = None


@dataclass(frozen=True)
class Events:
    """A format whose records are the events of one conversation: a JSON list or JSONL file of
    them is one trajectory, and so is an event folder (``events/<n>.json``).

    Attributes:
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
        not_a_trajectory: why a JSON document that belongs to this harness holds no trajectory
            (a score file, conversation state, ...), given the document and its path; None for
            any other document.
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
    not_a_trajectory: Callable[[Any, str], str | None] | None = None
    settle: Settle | None = None

    @property
    def reads_parquet_only(self) -> bool:
        """True for a format that reads nothing but whole Parquet files."""
        return self.parquet is not None and self.records is None and self.events is None

"""The one list of the input formats ``traj ingest`` reads (:data:`REGISTERED`), and what the rest
of the ingest asks of it: a format by name, the ``--input-format`` names and help, and which
format a record, a row, an event, a whole document or a Parquet file is in (by structure, never
by a file name). Each format's own module declares it (:class:`~.spec.InputFormat`); adding a
format is its module plus one line here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final

from trajstore.ingest.formats import (
    atif,
    chat_messages,
    mini_swe_agent,
    nebius_swe_agent,
    nemo_gym,
    openhands_v0_eval,
    openhands_v0_events,
    openhands_v0_feedback,
    openhands_v1_completions,
    openhands_v1_eval,
    openhands_v1_events,
    swe_agent,
    swe_gym,
    swe_rebench_openhands,
    swe_smith,
    tau_bench,
    trajstore_parquet,
    verl_rollouts,
)
from trajstore.ingest.formats.spec import Events, InputFormat, NoTrajectory, ParquetFiles, Records, history_kind

REGISTERED: Final[tuple[InputFormat, ...]] = (
    openhands_v0_events.V0_EVENTS,
    openhands_v0_events.V0_SESSION,
    openhands_v1_events.V1_EVENTS,
    mini_swe_agent.MINI_SWE_AGENT,
    atif.ATIF,
    nemo_gym.NEMO_GYM,
    swe_agent.SWE_AGENT,
    openhands_v1_completions.V1_COMPLETIONS,
    tau_bench.TAU_BENCH,
    verl_rollouts.VERL_ROLLOUTS,
    openhands_v0_eval.V0_RESOLVER,
    openhands_v1_eval.V1_EVAL,
    openhands_v0_eval.V0_EVAL,
    openhands_v0_feedback.V0_FEEDBACK,
    swe_smith.SWE_SMITH,
    swe_gym.SWE_GYM,
    swe_rebench_openhands.SWE_REBENCH_OPENHANDS,
    nebius_swe_agent.NEBIUS_SWE_AGENT,
    chat_messages.CHAT_MESSAGES,
    trajstore_parquet.TRAJSTORE_PARQUET,
)
"""Every input format, in the order detection tries them: should two ever match one record, the
first wins (harness markers come before shapes several harnesses share)."""

BY_NAME: Final[dict[str, InputFormat]] = {f.name: f for f in REGISTERED}
FORMATS: Final[tuple[str, ...]] = tuple(BY_NAME)
"""The ``--input-format`` names (besides ``auto``)."""
FORMAT_HELP: Final[dict[str, str]] = {f.name: f.help for f in REGISTERED}
"""One line per input format, for ``traj ingest --help``."""
BY_SOURCE: Final[dict[str, InputFormat]] = {f.source: f for f in REGISTERED}
"""The format whose trajectories store each ``source``."""

_RECORDS: list[tuple[InputFormat, Records]] = [(f, f.records) for f in REGISTERED if f.records and f.records.keys]
_EVENTS: list[tuple[InputFormat, Events]] = [(f, f.events) for f in REGISTERED if f.events and f.events.signature]
_LIST_ITEMS: list[tuple[InputFormat, Callable[[dict[str, Any]], bool]]] = [
    (f, f.records.list_item) for f in REGISTERED if f.records and f.records.list_item]
_PARQUET: list[tuple[InputFormat, ParquetFiles]] = [(f, f.parquet) for f in REGISTERED if f.parquet]
_NO_TRAJECTORY: list[NoTrajectory] = [f.no_trajectory for f in REGISTERED if f.no_trajectory]
_ANY_FOLDER = next(f for f in REGISTERED if f.events is not None and f.events.reads_any_folder)


def get(name: str) -> InputFormat:
    """The format named `name`.

    Raises:
        ValueError: no such format (naming the known ones).
    """
    try:
        return BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown input format {name!r}; choose auto or one of {', '.join(FORMATS)}") from None


def _matches(f: InputFormat, d: dict[str, Any]) -> bool:
    """Whether the object `d` (holding one of `f`'s record keys) is a record of `f`."""
    rec = f.records
    assert rec is not None
    if rec.history and history_kind(d.get("history")) not in rec.history:
        return False
    if rec.signature is not None and not rec.signature(d):
        return False
    return not any(_matches(BY_NAME[x], d) for x in rec.excludes)


def formats_of(d: Any) -> list[InputFormat]:
    """Every record format whose structure `d` has (one of its keys, its kind of history, its
    signature; less the formats it excludes; a fallback format only when no other matches); one
    for any record of a known harness, [] for none."""
    if not isinstance(d, dict):
        return []
    found = [(f, rec) for f, rec in _RECORDS if any(k in d for k in rec.keys) and _matches(f, d)]
    main = [f for f, rec in found if not rec.fallback]
    return main or [f for f, _ in found]


def detect_record(d: Any) -> InputFormat | None:
    """The format of one record (a JSON object that is a whole trajectory), or None (should two
    ever match, the first of :data:`REGISTERED`)."""
    fmts = formats_of(d)
    return fmts[0] if fmts else None


def _list_record(v: Any) -> InputFormat | None:
    """The format of which the JSON list `v` is one record because its first item is one of the
    format's items (a list of chat messages), or None."""
    if not (isinstance(v, list) and v and isinstance(v[0], dict)):
        return None
    return next((f for f, item in _LIST_ITEMS if item(v[0])), None)


def _loose_list_record(v: Any) -> InputFormat | None:
    """The format of which `v` is one record as a list of objects that are no record of any
    format, some of them its items (its first may be the broken one), or None."""
    if not (isinstance(v, list) and v and all(isinstance(m, dict) and detect_record(m) is None for m in v)):
        return None
    return next((f for f, item in _LIST_ITEMS if any(item(m) for m in v)), None)


def detect_row(v: Any) -> InputFormat | None:
    """The format of one row of a JSONL file or JSON array: :func:`detect_record`, or a format
    whose record may be a bare list (a row that is itself a list of chat messages)."""
    return detect_record(v) or _list_record(v)


def one_record_list(doc: Any, fmt: str) -> InputFormat | None:
    """The format of which the JSON document `doc` is a single record although it is a list (a
    bare list of chat messages, even one whose first message is broken), not an array of
    records; None otherwise. `fmt`: the ``--input-format`` given (``auto``: none)."""
    f = _list_record(doc)
    if f is not None:
        return f
    f = _loose_list_record(doc)
    return f if f is not None and fmt in ("auto", f.name) else None


def event_formats_of(d: Any) -> list[InputFormat]:
    """Every event format one of whose events `d` is (it holds one of the format's event keys and
    has the structure of its events)."""
    if not isinstance(d, dict):
        return []
    return [f for f, ev in _EVENTS if any(k in d for k in ev.keys) and ev.signature(d)]  # type: ignore[misc]


def detect_event(d: Any) -> InputFormat | None:
    """The event format of one event, or None."""
    fmts = event_formats_of(d)
    return fmts[0] if fmts else None


def detect_document(d: Any) -> InputFormat | None:
    """The format of a whole JSON document (object or array), or None when unknown: the record
    it is, else the format of its first object (a record or an event), else the format it is
    one bare-list record of."""
    fmt = detect_record(d)
    if fmt:
        return fmt
    if isinstance(d, list) and d:
        first = next((x for x in d if isinstance(x, dict)), None)
        if first is None:
            return None
        return detect_record(first) or detect_event(first) or _loose_list_record(d)
    return None


def folder_format(fmt: str, events: Iterable[Any]) -> InputFormat:
    """The format that reads an event folder: `fmt` when it names one that reads folders, else
    the format of its first event object (``auto``), else the one that reads any folder."""
    named = BY_NAME.get(fmt) if fmt != "auto" else detect_event(next((e for e in events if isinstance(e, dict)), None))
    if named is not None and named.events is not None and named.events.folder is not None:
        return named
    return _ANY_FOLDER


def parquet_format(path: str, fmt: str) -> InputFormat | None:
    """The format that reads the Parquet file at `path` whole: the one `fmt` names when it
    reads Parquet files, else (``auto``) the first that claims the file by its footer; None:
    its rows are records, detected one by one."""
    if fmt != "auto":
        named = BY_NAME.get(fmt)
        return named if named is not None and named.parquet is not None else None
    return next((f for f, files in _PARQUET if files.claims(path)), None)


def not_a_trajectory(d: Any, path: str) -> str | None:
    """Why the JSON document `d` (read from `path`) is a known file that holds no trajectory (a
    score, conversation state or metadata file of some harness), or None."""
    if not isinstance(d, dict):
        return None
    for skip in _NO_TRAJECTORY:
        why = skip.why(d, path) if any(k in d for k in skip.keys) else None
        if why:
            return why
    return None

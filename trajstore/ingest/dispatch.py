"""Sending each record of an input unit to its format's parser: a file's rows (JSONL lines, JSON
array items, Parquet rows) detected one by one, a whole document, an event list, an event folder
or a whole Parquet file. Which format reads what is the registry's
(:mod:`~trajstore.ingest.formats.registry`); whatever goes wrong with one record is that record's
:class:`Problem` only.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from trajstore.ingest.discover import InputUnit
from trajstore.ingest.formats import registry
from trajstore.ingest.formats.spec import InputFormat
from trajstore.ingest.huge_ints import find_huge_int, huge_int_reason
from trajstore.ingest.read import Loaded, is_parquet, iter_parquet_rows, json_loads, load_json_or_jsonl, read_text
from trajstore.ingest.reasons import problem_reason
from trajstore.ingest.records import Origin, Parsed, Problem


def _parse_record(fmt: InputFormat, origin: Origin, rec: Any) -> list[Parsed]:
    """One record through its format's parser (one parsed record, or several: the lineages of an
    ATIF file); any exception is this record's problem only."""
    if fmt.records is None:
        return [Problem(origin, "unsupported", f"--input-format {fmt.name} does not read records of one "
                        "trajectory each (rows of a JSONL file, items of a JSON array)")]
    try:
        out = fmt.records.parse(rec, origin)
    except Exception as e:  # noqa: BLE001 - one bad record costs only itself
        return [Problem(origin, "malformed", problem_reason(e))]
    return out if isinstance(out, list) else [out]


def _parse_rows(path: str, rows: Iterable[tuple[int, Any]], fmt: InputFormat | None,
                huge_ints: bool = False) -> Iterator[Parsed]:
    """The rows of a JSONL file, a JSON array or a Parquet shard (``(line, value)`` pairs), each
    read as `fmt` (None: ``auto``).

    Under ``auto`` each row's format is detected on its own, so one odd row never decides the
    file. A row of no known shape is parsed as the file's format (that of the first row that has
    one), so its problem names what it lacks; rows before that first recognised row wait for it.
    When the first recognised thing is an event, the whole file is one conversation's event list.
    With `huge_ints` (a JSON array holding integers too long to convert), a row holding one
    is refused naming its field and the others are parsed.
    """
    if huge_ints:
        rows = list(rows)
        bad = {n: hit for n, v in rows if (hit := find_huge_int(v))}
        for n, hit in bad.items():
            yield Problem(Origin(path, n), "malformed", huge_int_reason(hit))
        rows = [(n, v) for n, v in rows if n not in bad]
    if fmt is not None and fmt.events is not None and fmt.events.parse is not None:
        yield _parse_event_list(path, [v for _, v in rows], fmt)
        return
    file_fmt = fmt
    waiting: list[tuple[int, Any]] = []
    seen = 0
    it = iter(rows)
    for n, v in it:
        seen += 1
        row_fmt = fmt if fmt is not None else registry.detect_row(v)
        if row_fmt is None and file_fmt is None:
            ev = registry.detect_event(v)
            if ev is not None:  # a JSONL of events: one conversation
                yield _parse_event_list(path, [w for _, w in waiting] + [v] + [w for _, w in it], ev)
                return
            waiting.append((n, v))
            continue
        if file_fmt is None:
            file_fmt = row_fmt
            for wn, wv in waiting:
                yield from _parse_record(file_fmt, Origin(path, wn), wv)  # type: ignore[arg-type]
            waiting = []
        yield from _parse_record(row_fmt or file_fmt, Origin(path, n), v)  # type: ignore[arg-type]
    if file_fmt is None and waiting:
        n0, v0 = waiting[0]
        yield Problem(Origin(path, n0), "unsupported",
                      f"no record of a known shape among {seen} (keys of the first: {_keys(v0)}); "
                      "name the format with --input-format")


def _parse_event_list(path: str, events: list[Any], fmt: InputFormat) -> Parsed:
    """The conversation of an event list read from one file, or the problem that it has none."""
    assert fmt.events is not None and fmt.events.parse is not None
    try:
        return fmt.events.parse(events, Origin(path))
    except Exception as e:  # noqa: BLE001 - this file's problem only
        return Problem(Origin(path), "malformed", problem_reason(e))


def _parse_event_folder(unit: InputUnit, fmt: str) -> Iterator[Parsed]:
    """The records of an event folder (`unit.files`, in order) as the format that reads it makes
    them (:func:`~trajstore.ingest.formats.registry.folder_format`), and a :class:`Problem` for
    each event file that cannot be read (the others are still used)."""
    events: list[Any] = []
    for f in unit.files:
        try:
            events.append(json_loads(read_text(f)))
        except (ValueError, OSError) as e:
            yield Problem(Origin(f), "malformed", f"event file is not valid JSON: {e}")
    if not events:
        return
    folder = registry.folder_format(fmt, events).events
    assert folder is not None and folder.folder is not None
    yield from folder.folder(events, unit.path)


def parse_unit(unit: InputUnit, fmt: str = "auto") -> Iterator[Parsed]:
    """Parse one input unit into conversations, engine rollouts and problems.

    Never raises for bad input: an unreadable file, line, row or event, and any exception a
    parser raises on one record, become a :class:`Problem` with the path, the line (JSONL line,
    array index + 1, Parquet row + 1) and the reason, and parsing goes on with the next record.
    A Parquet file a format reads whole (trajstore's own schema) is read by it (unless `fmt`
    names another format), never as another harness's rows.

    Raises:
        ValueError: `fmt` names no format.
    """
    named = None if fmt == "auto" else registry.get(fmt)
    if named is not None and named.reads_parquet_only and (unit.is_event_dir or not is_parquet(unit.path)):
        yield Problem(Origin(unit.path), "unsupported", f"--input-format {fmt} reads Parquet files only; "
                      "this is not one")
        return
    if unit.is_event_dir:
        yield from _parse_event_folder(unit, fmt)
        return
    path = unit.path
    if is_parquet(path):
        whole = registry.parquet_format(path, fmt)
        if whole is not None:
            yield from whole.parquet.parse(path)  # type: ignore[union-attr]
            return
        try:
            yield from _parse_rows(path, iter_parquet_rows(path), named)
        except Exception as e:  # noqa: BLE001 - an unreadable shard, or one that breaks mid-way
            yield Problem(Origin(path), "malformed", f"not valid Parquet: {problem_reason(e)}")
        return
    try:
        loaded = load_json_or_jsonl(path)
    except (ValueError, OSError) as e:
        yield Problem(Origin(path), "malformed", str(e))
        return
    yield from loaded.problems
    if loaded.lines is None and _one_jsonl_record(path, loaded):
        loaded.lines = [(loaded.line, loaded.whole)]  # type: ignore[list-item]
    if loaded.lines is not None:  # JSONL: rows, or the events of one conversation
        yield from _parse_rows(path, loaded.lines, named)
        return
    try:
        yield from _parse_document(path, loaded.whole, fmt, loaded.huge_ints)
    except Exception as e:  # noqa: BLE001
        yield Problem(Origin(path), "malformed", problem_reason(e))


def _one_jsonl_record(path: str, loaded: Loaded) -> bool:
    """A ``.jsonl`` file of one line holding an object that is no known non-trajectory file: a
    row like any other, whose record keeps its line number."""
    return (path.endswith(".jsonl") and loaded.line is not None and isinstance(loaded.whole, dict)
            and not registry.not_a_trajectory(loaded.whole, path))


def _parse_document(path: str, doc: Any, fmt: str, huge_ints: bool = False) -> Iterator[Parsed]:
    """A whole JSON document: a known file that holds no trajectory, a record, an array of
    records, a bare-list record (chat messages), an event list."""
    named = None if fmt == "auto" else registry.get(fmt)
    # a bare list of messages is one record, not rows (even when its first message is broken)
    one_record = registry.one_record_list(doc, fmt)
    if huge_ints:
        of = named or registry.detect_document(doc)
        if one_record is not None or not (isinstance(doc, list) and of is not None and of.records is not None):
            hit = find_huge_int(doc)
            yield Problem(Origin(path), "malformed", huge_int_reason(hit) if hit else "an integer too long to read")
            return
    if isinstance(doc, list) and not doc:  # whatever the format: nothing to store, nothing wrong
        yield Problem(Origin(path), "no_trajectory", "an empty JSON array (no records)")
        return
    why_not = registry.not_a_trajectory(doc, path)
    if why_not and named is None:
        yield Problem(Origin(path), "no_trajectory", why_not)
        return
    kind = named or registry.detect_document(doc)
    if kind is None:
        yield Problem(Origin(path), "unsupported", f"unrecognised content (keys: {_keys(doc)}); "
                      "name the format with --input-format")
        return
    if kind is one_record:
        yield from _parse_record(kind, Origin(path), doc)
    elif kind.records is not None:
        if isinstance(doc, list):
            yield from _parse_rows(path, ((i + 1, r) for i, r in enumerate(doc)), named, huge_ints)
        else:
            yield from _parse_record(kind, Origin(path), doc)
    elif kind.events is not None and kind.events.document is not None:
        yield from kind.events.document(doc, Origin(path))
    elif kind.events is not None and kind.events.parse is not None:
        yield kind.events.parse(doc, Origin(path))
    else:
        yield Problem(Origin(path), "unsupported", f"format {kind.name!r} does not apply to a single file")


def _keys(v: Any) -> str:
    if isinstance(v, dict):
        return ", ".join(map(str, list(v)[:8])) or "an empty object"
    return f"a JSON {type(v).__name__}"

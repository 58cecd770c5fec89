"""Sending each record of an input unit to its format's parser: a file's rows (JSONL lines, JSON
array items, Parquet rows) detected one by one, a whole document, an event list or an event
directory. Whatever goes wrong with one record is that record's :class:`Problem` only.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

from trajstore.ingest import detect
from trajstore.ingest.discover import InputUnit
from trajstore.ingest.event_dirs import parse_event_dir
from trajstore.ingest.formats import openhands_v0, openhands_v1
from trajstore.ingest.formats.trajstore_parquet import TRAJSTORE_PARQUET, is_trajstore_parquet, parse_trajstore_parquet
from trajstore.ingest.huge_ints import find_huge_int, huge_int_reason
from trajstore.ingest.read import is_parquet, iter_parquet_rows, json_loads, load_json_or_jsonl, read_text
from trajstore.ingest.reasons import problem_reason
from trajstore.ingest.records import Origin, Parsed, Problem
from trajstore.ingest.registry import EVENT_FORMATS, ROW_PARSERS


def _parse_record(kind: str, origin: Origin, rec: Any) -> list[Parsed]:
    """One record through its format's parser (one parsed record, or several: the lineages of an
    ATIF file); any exception is this record's problem only."""
    try:
        out = ROW_PARSERS[kind](rec, origin)
    except Exception as e:  # noqa: BLE001 - one bad record costs only itself (issue 12, item 6)
        return [Problem(origin, "malformed", problem_reason(e))]
    return out if isinstance(out, list) else [out]


def _parse_rows(path: str, rows: Iterable[tuple[int, Any]], fmt: str, huge_ints: bool = False) -> Iterator[Parsed]:
    """The rows of a JSONL file, a JSON array or a Parquet shard (``(line, value)`` pairs).

    Each row's format is detected on its own, so one odd row never decides the file. A row of
    no known shape is parsed as the file's format (that of the first row that has one), so its
    problem names what it lacks; rows before that first recognised row wait for it. When the
    first recognised thing is an event, the whole file is one conversation's event list.
    With `huge_ints` (a JSON array holding integers too long to convert), a row holding one
    is refused naming its field and the others are parsed.
    """
    if huge_ints:
        rows = list(rows)
        bad = {n: hit for n, v in rows if (hit := find_huge_int(v))}
        for n, hit in bad.items():
            yield Problem(Origin(path, n), "malformed", huge_int_reason(hit))
        rows = [(n, v) for n, v in rows if n not in bad]
    if fmt in EVENT_FORMATS:
        yield from _parse_event_list(path, [v for _, v in rows], fmt)
        return
    file_kind = None if fmt == "auto" else fmt
    waiting: list[tuple[int, Any]] = []
    seen = 0
    it = iter(rows)
    for n, v in it:
        seen += 1
        kind = file_kind if fmt != "auto" else detect.detect_row(v)
        if kind is None and file_kind is None:
            ev = detect.detect_event(v)
            if ev is not None:  # a JSONL of events: one conversation
                yield from _parse_event_list(path, [w for _, w in waiting] + [v] + [w for _, w in it], ev)
                return
            waiting.append((n, v))
            continue
        if file_kind is None:
            file_kind = kind
            for wn, wv in waiting:
                yield from _parse_record(file_kind, Origin(path, wn), wv)
            waiting = []
        yield from _parse_record(kind or file_kind, Origin(path, n), v)
    if file_kind is None and waiting:
        n0, v0 = waiting[0]
        yield Problem(Origin(path, n0), "unsupported",
                      f"no record of a known shape among {seen} (keys of the first: {_keys(v0)}); "
                      "name the format with --input-format")


def _parse_event_list(path: str, events: list[Any], kind: str) -> Iterator[Parsed]:
    try:
        yield (openhands_v1.parse_persisted_events(events, Origin(path)) if kind == "openhands-v1-events"
               else openhands_v0.parse_event_list(events, Origin(path)))
    except Exception as e:  # noqa: BLE001
        yield Problem(Origin(path), "malformed", problem_reason(e))


def parse_unit(unit: InputUnit, fmt: str = "auto") -> Iterator[Parsed]:
    """Parse one input unit into conversations, engine rollouts and problems.

    Never raises for bad input: an unreadable file, line, row or event, and any exception a
    parser raises on one record, become a :class:`Problem` with the path, the line (JSONL line,
    array index + 1, Parquet row + 1) and the reason, and parsing goes on with the next record.
    A Parquet file in trajstore's own schema is read as ``trajstore-parquet`` (unless `fmt`
    names another format), never as another harness's rows.
    """
    if fmt == TRAJSTORE_PARQUET and (unit.is_event_dir or not is_parquet(unit.path)):
        yield Problem(Origin(unit.path), "unsupported", f"--input-format {TRAJSTORE_PARQUET} reads Parquet files only; "
                      "this is not one")
        return
    if unit.is_event_dir:
        yield from parse_event_dir(unit, fmt)
        return
    path = unit.path
    if is_parquet(path):
        if fmt == TRAJSTORE_PARQUET or (fmt == "auto" and is_trajstore_parquet(path)):
            yield from parse_trajstore_parquet(path)
            return
        try:
            yield from _parse_rows(path, iter_parquet_rows(path), fmt)
        except Exception as e:  # noqa: BLE001 - an unreadable shard, or one that breaks mid-way
            yield Problem(Origin(path), "malformed", f"not valid Parquet: {problem_reason(e)}")
        return
    try:
        loaded = load_json_or_jsonl(path)
    except (ValueError, OSError) as e:
        yield Problem(Origin(path), "malformed", str(e))
        return
    yield from loaded.problems
    if loaded.lines is not None:  # JSONL: rows, or the events of one conversation
        yield from _parse_rows(path, loaded.lines, fmt)
        return
    try:
        yield from _parse_document(path, loaded.whole, fmt, loaded.huge_ints)
    except Exception as e:  # noqa: BLE001
        yield Problem(Origin(path), "malformed", problem_reason(e))


def _parse_document(path: str, doc: Any, fmt: str, huge_ints: bool = False) -> Iterator[Parsed]:
    # a bare list of messages is one record, not rows (even when its first message is broken)
    one_chat = detect.is_chat(doc) or (fmt in ("auto", "chat-messages") and detect.is_message_list(doc))
    if huge_ints and (one_chat or not (isinstance(doc, list) and (fmt if fmt != "auto" else detect.detect_document(doc))
                                       in ROW_PARSERS)):
        hit = find_huge_int(doc)
        yield Problem(Origin(path), "malformed", huge_int_reason(hit) if hit else "an integer too long to read")
        return
    if isinstance(doc, list) and not doc:  # whatever the format: nothing to store, nothing wrong
        yield Problem(Origin(path), "no_trajectory", "an empty JSON array (no records)")
        return
    why_not = detect.not_a_trajectory(doc)
    if why_not and fmt == "auto":
        if os.path.basename(path).startswith("eval_"):
            task = openhands_v1.task_of(path, "eval_")
            traj = os.path.join(os.path.dirname(path), f"traj_{task}.json")
            if not os.path.exists(traj):
                why_not += f"; no traj_{task}.json next to it"
        yield Problem(Origin(path), "no_trajectory", why_not)
        return
    kind = fmt if fmt != "auto" else detect.detect_document(doc)
    if kind is None:
        yield Problem(Origin(path), "unsupported", f"unrecognised content (keys: {_keys(doc)}); "
                      "name the format with --input-format")
        return
    if kind == "chat-messages" and one_chat:
        yield from _parse_record(kind, Origin(path), doc)
        return
    if kind in ROW_PARSERS:
        if isinstance(doc, list):
            yield from _parse_rows(path, ((i + 1, r) for i, r in enumerate(doc)), fmt, huge_ints)
        else:
            yield from _parse_record(kind, Origin(path), doc)
        return
    if kind == "openhands-v1-events":
        name = os.path.basename(path)
        if name.startswith("traj_"):
            task = openhands_v1.task_of(path, "traj_")
            ev_path = os.path.join(os.path.dirname(path), f"eval_{task}.json")
            ev = None
            if os.path.exists(ev_path):
                try:
                    ev = json_loads(read_text(ev_path))
                except (ValueError, OSError) as e:
                    yield Problem(Origin(ev_path), "malformed", f"eval file cannot be read: {e}")
            yield openhands_v1.parse_task_trajectory(doc, Origin(path), ev, ev_path if ev is not None else None)
        else:
            yield openhands_v1.parse_persisted_events(doc, Origin(path))
    elif kind == "openhands-v0-events":
        yield openhands_v0.parse_event_list(doc, Origin(path))
    else:
        yield Problem(Origin(path), "unsupported", f"format {kind!r} does not apply to a single file")


def _keys(v: Any) -> str:
    if isinstance(v, dict):
        return ", ".join(map(str, list(v)[:8])) or "an empty object"
    return f"a JSON {type(v).__name__}"

"""ATIF streamed as JSON Lines (``<session>.atif.jsonl``): a header line holding the document's
root fields (``schema_version``, ``session_id``, ``agent``; OpenAgents' writer marks it
``"__header__": true``), then one step per line as it happened, so that a crash loses no step.
The header and the steps make the ATIF document :mod:`~trajstore.ingest.formats.atif` reads
(:func:`stream_document`). A writer that keeps an index beside the stream (``<session>.index.json``: a checkpoint,
``status`` and ``final_metrics``, which the stream does not repeat) has its ``final_metrics`` read
with it.
"""

from __future__ import annotations

import os
from typing import Any

from trajstore.ingest.read import json_loads, read_text
from trajstore.ingest.records import Origin, RecordError
from trajstore.ingest.values import json_type

STREAM_SUFFIX = ".atif.jsonl"
INDEX_SUFFIX = ".index.json"


def is_header(d: dict[str, Any]) -> bool:
    """A stream's header line: the ATIF root fields without ``steps``."""
    return (str(d.get("schema_version", "")).startswith("ATIF") and "steps" not in d
            and (d.get("__header__") is True or isinstance(d.get("agent"), dict)))


def is_step(d: dict[str, Any]) -> bool:
    """An ATIF step object: an integer ``step_id`` and a ``source`` of system, user or agent."""
    sid = d.get("step_id")
    return isinstance(sid, int) and not isinstance(sid, bool) and d.get("source") in ("system", "user", "agent")


def is_stream_line(d: dict[str, Any]) -> bool:
    """A line of a streamed ATIF file (its header or a step)."""
    return is_header(d) or is_step(d)


def _index(path: str) -> tuple[str | None, dict[str, Any]]:
    """The index file kept beside the stream `path` and its content (None, {} when there is none)."""
    if not path.endswith(STREAM_SUFFIX):
        return None, {}
    f = path[:-len(STREAM_SUFFIX)] + INDEX_SUFFIX
    try:
        doc = json_loads(read_text(f))
    except (OSError, ValueError):
        return None, {}
    return (f, doc) if isinstance(doc, dict) else (None, {})


def stream_document(lines: list[Any], origin: Origin) -> tuple[dict[str, Any], str | None]:
    """The ATIF document a streamed file's lines make (its header's root fields, its steps in
    order, the ``final_metrics`` of its index when the header has none) and the index file read
    for it (None: none beside it).

    Raises:
        RecordError: a line that is not an object, no header line or two of them.
    """
    header: dict[str, Any] | None = None
    steps: list[Any] = []
    for n, line in enumerate(lines, 1):
        if not isinstance(line, dict):
            raise RecordError(f"line {n} is {json_type(line)}, expected an ATIF header or step object")
        if is_header(line):
            if header is not None:
                raise RecordError(f"line {n} is a second header line (schema_version {line.get('schema_version')!r})")
            header = line
        else:
            steps.append(line)
    if header is None:
        raise RecordError("streamed ATIF has no header line (schema_version, session_id, agent): the steps' "
                          "agent and session are unknown")
    doc = {k: v for k, v in header.items() if k != "__header__"}
    doc["steps"] = steps
    index_path, index = _index(os.path.abspath(origin.path))
    if "final_metrics" not in doc and isinstance(index.get("final_metrics"), dict):
        doc["final_metrics"] = index["final_metrics"]
    return doc, index_path


def index_file(d: dict[str, Any], path: str) -> str | None:
    """Why a stream's index (``<session>.index.json``) holds no trajectory (it is read with the stream)."""
    if path.endswith(INDEX_SUFFIX) and "checkpoint" in d and "session_id" in d:
        return f"ATIF stream index: read with {os.path.basename(path[:-len(INDEX_SUFFIX)] + STREAM_SUFFIX)}"
    return None

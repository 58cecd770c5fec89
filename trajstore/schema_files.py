"""The schema for other languages, generated from :mod:`trajstore.schema` into ``schemas/``:
each version's Arrow schema as an Arrow IPC schema message (``trajectory.v<N>.arrow``, read by
Rust, Go, C++ and JS Arrow and by ``pyarrow.ipc.read_schema``) and a JSON Schema of one
trajectory record (``trajectory.v<N>.schema.json``) for writers that emit JSON lines.
``python -m trajstore.schema_files`` rewrites them; a test fails when they drift."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from trajstore.schema import (
    ACTION_LOGPROBS_COLUMN,
    FIELD_DOCS,
    LEGACY_LOGPROBS_COLUMN,
    LINK_KINDS,
    LOGPROB_LAYOUT,
    LOGPROB_MODES,
    LOGPROB_SOURCES,
    READABLE_VERSIONS,
    SPAN_KINDS,
    STATUSES,
    TOKEN_SOURCES,
    trajectory_schema,
)

ARROW_FILE = "trajectory.v{version}.arrow"
"""Name of a version's Arrow IPC schema file under ``schemas/``."""
JSON_SCHEMA_FILE = "trajectory.v{version}.schema.json"
"""Name of a version's JSON Schema file under ``schemas/``."""

_ENUMS = {"status": STATUSES, "token_source": TOKEN_SOURCES, "logprob_source": LOGPROB_SOURCES, "kind": SPAN_KINDS,
          "link_kind": LINK_KINDS, "logprob_mode": LOGPROB_MODES}


def arrow_schema_bytes(version: int) -> bytes:
    """Schema `version` as one Arrow IPC schema message (field docs and the version in its metadata).

    Raises:
        ValueError: `version` is not readable by this package.
    """
    return trajectory_schema(version).serialize().to_pybytes()


def _json_type(t: pa.DataType, nullable: bool, name: str) -> dict[str, Any]:
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        item = _json_type(t.value_type, t.value_field.nullable, name)
        if name in (ACTION_LOGPROBS_COLUMN, LEGACY_LOGPROBS_COLUMN) and pa.types.is_floating(t.value_type):  # JSON has no NaN: null = unknown
            item = {"type": ["number", "null"]}
        out: dict[str, Any] = {"type": "array", "items": item}
    elif pa.types.is_struct(t):
        out = {"type": "object", "additionalProperties": False,
               "required": [t.field(i).name for i in range(t.num_fields) if not t.field(i).nullable],
               "properties": {t.field(i).name: _json_type(t.field(i).type, t.field(i).nullable, t.field(i).name)
                              for i in range(t.num_fields)}}
    elif pa.types.is_integer(t):
        bits = t.bit_width
        out = {"type": "integer", "minimum": -(2 ** (bits - 1)), "maximum": 2 ** (bits - 1) - 1}
    elif pa.types.is_floating(t):
        out = {"type": "number"}
    elif pa.types.is_boolean(t):
        out = {"type": "boolean"}
    elif pa.types.is_timestamp(t):
        out = {"type": "string", "format": "date-time"}
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        out = {"type": "string"}
        if name in _ENUMS:
            out["enum"] = list(_ENUMS[name])
    else:  # pragma: no cover - the schema uses only the types above (a test builds every version)
        raise ValueError(f"no JSON Schema type for Arrow type {t}")
    if nullable:
        out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    return out


def json_schema(version: int) -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of one trajectory record of schema `version` as a JSON object:
    one property per column, required = the non-nullable columns, no other property;
    ``created_at`` an RFC 3339 string; a log-prob the engine did not give is ``null`` (stored as NaN).

    Raises:
        ValueError: `version` is not readable by this package.
    """
    schema = trajectory_schema(version)
    props = {}
    for f in schema:
        prop = _json_type(f.type, f.nullable, f.name)
        doc = (f.metadata or {}).get(b"doc")
        prop["description"] = doc.decode() if doc else FIELD_DOCS.get(f.name, "")
        props[f.name] = prop
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://trajstore.dev/schemas/trajectory.v{version}.schema.json",
        "title": f"trajstore trajectory record, schema v{version}",
        "description": "One trajectory (one row of a trajectory shard). " + LOGPROB_LAYOUT[version],
        "type": "object",
        "additionalProperties": False,
        "required": [f.name for f in schema if not f.nullable],
        "properties": props,
    }


def json_schema_text(version: int) -> str:
    """:func:`json_schema` as the exact text stored in ``schemas/`` (sorted keys, 2-space indent)."""
    return json.dumps(json_schema(version), indent=2, sort_keys=True) + "\n"


def write_schema_files(folder: str | Path) -> list[Path]:
    """Write every readable version's Arrow IPC schema and JSON Schema into `folder`; returns the paths."""
    folder = Path(folder)
    out = []
    for v in READABLE_VERSIONS:
        arrow = folder / ARROW_FILE.format(version=v)
        arrow.write_bytes(arrow_schema_bytes(v))
        js = folder / JSON_SCHEMA_FILE.format(version=v)
        js.write_text(json_schema_text(v))
        out += [arrow, js]
    return out


if __name__ == "__main__":  # python -m trajstore.schema_files [FOLDER]  (default: schemas)
    import sys

    for p in write_schema_files(sys.argv[1] if len(sys.argv) > 1 else "schemas"):
        print(p)

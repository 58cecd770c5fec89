"""File-level rules of a trajectory Parquet file: a readable schema version in its footer, and
column names and types that fit the schema of that version (:mod:`trajstore.schema`)."""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from trajstore.schema import METADATA_SCHEMA_VERSION_KEY, READABLE_VERSIONS, SCHEMA_VERSION, trajectory_schema


def declared_version(footer: Mapping[bytes, bytes] | None) -> tuple[int | None, str | None]:
    """The schema version a file's footer declares, and why it cannot be used (None = usable).

    A footer without :data:`~trajstore.schema.METADATA_SCHEMA_VERSION_KEY` gives
    ``(None, reason)``; a version newer than this package reads is a compatibility problem named
    as such (upgrade trajstore), never "corrupt".
    """
    raw = (footer or {}).get(METADATA_SCHEMA_VERSION_KEY)
    key = METADATA_SCHEMA_VERSION_KEY.decode()
    if raw is None:
        return None, (f"no {key!r} key in the Parquet footer's key-value metadata: stamp the schema version "
                      f"(write with the schema of schemas/trajectory.v{SCHEMA_VERSION}.arrow, which carries it)")
    try:
        version = int(raw)
    except ValueError:
        return None, f"{key} is {raw!r}, not an integer"
    if version > SCHEMA_VERSION:
        return version, (f"schema version {version} is newer than this trajstore reads (up to {SCHEMA_VERSION}); "
                         "upgrade trajstore: pip install -U trajstore")
    if version not in READABLE_VERSIONS:
        return version, f"schema version {version} is not one of {list(READABLE_VERSIONS)}"
    return version, None


def column_problems(actual: pa.Schema, version: int) -> list[tuple[str, str]]:
    """``(column, why)`` for every column of `actual` that does not fit schema `version`: a column
    the schema does not have, a type other than the schema's (nested nullability included, as the
    store's readers compare), a required (non-nullable) column that is missing. An optional
    column may be left out (readers read it as null).

    Raises:
        ValueError: `version` is not readable (:func:`declared_version` first).
    """
    expected = trajectory_schema(version)
    out: list[tuple[str, str]] = []
    for f in actual:
        i = expected.get_field_index(f.name)
        if i < 0:
            out.append((f.name, f"unexpected column (not in the schema v{version})"))
        elif not f.type.equals(expected.field(i).type):
            out.append((f.name, f"has type {f.type}, expected {expected.field(i).type}"))
    for f in expected:
        if actual.get_field_index(f.name) < 0 and not f.nullable:
            out.append((f.name, f"required column is missing (schema v{version})"))
    return out

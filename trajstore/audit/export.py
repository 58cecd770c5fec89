"""Writing a query's result (``traj sql --format csv|jsonl|json|parquet``) without Python per
value: DuckDB hands Arrow record batches, Arrow's writers encode them (CSV, Parquet), DuckDB
itself renders JSON lines; memory is bounded by one batch.

What each format holds:

- ``csv``: a header, then one line per row (RFC 4180: strings always quoted); lists, structs and
  maps as JSON text, blobs as hex, timestamps and other non-CSV types as DuckDB prints them, NULL
  and non-finite floats (NaN, inf) as an empty field;
- ``jsonl``: one JSON object per line (DuckDB's ``to_json``); non-finite floats as ``null``, blobs
  as hex;
- ``json``: ``{"result": [row objects]}`` (the same objects), valid JSON once complete;
- ``parquet``: the result's own Arrow types (NaN kept), one row group per batch.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from typing import Any, BinaryIO

import duckdb
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from trajstore.audit.views import AuditError
from trajstore.errors import one_line

EXPORT_FORMATS = ("csv", "jsonl", "json", "parquet")
_CSV_PLAIN = {"tinyint", "smallint", "integer", "bigint", "utinyint", "usmallint", "uinteger", "ubigint",
              "boolean", "varchar", "float", "double"}
_FLOATS = {"float", "double"}
_NESTED = {"list", "struct", "map", "array", "union"}


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _has_float(t: Any) -> bool:
    return t.id in _FLOATS or (t.id in _NESTED and any(_has_float(c) for _, c in _children(t)))


def _children(t: Any) -> list[tuple[str, Any]]:
    try:
        return list(t.children)
    except Exception:  # noqa: BLE001 - a type without children
        return []


def _finite(expr: str, t: Any, depth: int = 0) -> str:
    """`expr` of DuckDB type `t` with every non-finite float (also inside lists and structs) as NULL."""
    if t.id in _FLOATS:
        return f"CASE WHEN isfinite({expr}) THEN {expr} END"
    if not _has_float(t) or depth > 8:
        return expr
    kids = _children(t)
    if t.id in ("list", "array") and kids:
        x = f"_x{depth}"
        return f"list_transform({expr}, lambda {x}: {_finite(x, kids[0][1], depth + 1)})"
    if t.id == "struct":
        return "struct_pack(" + ", ".join(f"{_quote(k)} := {_finite(f'({expr}).{_quote(k)}', c, depth + 1)}"
                                          for k, c in kids) + ")"
    return expr  # maps, unions: left as they are


def _csv_column(name: str, t: Any) -> str:
    q = _quote(name)
    if t.id in _FLOATS:
        return f"{_finite(q, t)} AS {q}"
    if t.id in _CSV_PLAIN:
        return q
    if t.id in _NESTED:
        return f"to_json({_finite(q, t)})::VARCHAR AS {q}"
    if t.id == "blob":
        return f"hex({q}) AS {q}"
    return f"{q}::VARCHAR AS {q}"


class _Batches:
    """Record batches of a relation, DuckDB errors raised while rows are produced (failed casts,
    malformed JSON, ``error()``; after the first batch the Arrow stream raises them as a bare
    ``OSError``, which is the query's, not the output file's) as one-line :class:`AuditError` s; ``schema`` known before the first batch."""

    def __init__(self, rel: duckdb.DuckDBPyRelation, batch_rows: int):
        try:
            self.reader = rel.to_arrow_reader(batch_rows)
        except duckdb.Error as e:
            raise AuditError(f"query failed: {one_line(str(e))}") from e
        self.schema = self.reader.schema

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        try:
            while True:
                try:
                    yield self.reader.read_next_batch()
                except StopIteration:
                    return
        except (duckdb.Error, OSError) as e:  # past the first batch DuckDB's stream fails as a bare OSError
            raise AuditError(f"query failed: {one_line(str(e))}") from e


def _text(s: str) -> str:
    """`s` as a DuckDB string expression (newlines as chr(10): DuckDB strings have no escapes)."""
    return " || chr(10) || ".join("'" + part.replace("'", "''") + "'" for part in s.split("\n"))


def _json_lines(rel: duckdb.DuckDBPyRelation, prefix: str, suffix: str) -> duckdb.DuckDBPyRelation:
    """One VARCHAR column: `prefix`, each row as a JSON object, `suffix`."""
    cols = ", ".join(f"{_quote(n)} := {f'hex({_quote(n)})' if t.id == 'blob' else _finite(_quote(n), t)}"
                     for n, t in zip(rel.columns, rel.types))
    obj = f"to_json(struct_pack({cols}))" if cols else "'{}'"
    return rel.query("_trajstore_result", f"SELECT {_text(prefix)} || {obj} || {_text(suffix)} AS line "
                                          "FROM _trajstore_result")


def _write_strings(sink: BinaryIO, batch: pa.RecordBatch, skip: int = 0) -> None:
    """The bytes of the string column of `batch`, as stored (no copy per value), minus the first `skip`."""
    arr = batch.column(0)
    if len(arr) == 0:
        return
    offsets = arr.buffers()[1]
    width = 8 if pa.types.is_large_string(arr.type) else 4
    mv = memoryview(offsets).cast("q" if width == 8 else "i")
    a, b = mv[arr.offset], mv[arr.offset + len(arr)]
    sink.write(memoryview(arr.buffers()[2])[a + skip:b])


def write_result(rel: duckdb.DuckDBPyRelation, fmt: str, sink: BinaryIO, *, batch_rows: int = 10_000) -> int:
    """Stream `rel` into `sink` (a binary file) as `fmt` (:data:`EXPORT_FORMATS`, module docstring);
    return the rows written.

    Raises:
        AuditError: the query fails while its rows are produced.
        ValueError: an unknown format.
    """
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"unknown format {fmt!r} (one of {', '.join(EXPORT_FORMATS)})")
    rows = 0
    if fmt in ("csv", "parquet"):
        src = rel.project(", ".join(_csv_column(n, t) for n, t in zip(rel.columns, rel.types))) if fmt == "csv" else rel
        batches = _Batches(src, batch_rows)
        if fmt == "csv":  # the header as Python's csv writes it (quoted only where needed), then Arrow's rows
            head = io.StringIO()
            csv.writer(head, lineterminator="\n").writerow(rel.columns)
            sink.write(head.getvalue().encode())
        writer: Any = (pacsv.CSVWriter(sink, batches.schema, write_options=pacsv.WriteOptions(include_header=False))
                       if fmt == "csv" else pq.ParquetWriter(sink, batches.schema, compression="zstd"))
        with writer:
            for batch in batches:
                writer.write_batch(batch)
                rows += batch.num_rows
    elif fmt == "jsonl":
        for batch in _Batches(_json_lines(rel, "", "\n"), batch_rows):
            _write_strings(sink, batch)  # the values as stored: no Python per row
            rows += batch.num_rows
    else:
        sink.write(b'{\n  "result": [')
        for batch in _Batches(_json_lines(rel, ",\n    ", ""), batch_rows):
            _write_strings(sink, batch, skip=1 if rows == 0 else 0)  # no comma before the first row
            rows += batch.num_rows
        sink.write(b"\n  ]\n}\n" if rows else b"]\n}\n")
    return rows

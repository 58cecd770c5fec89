"""How a table becomes the bytes of one Parquet shard: the schema version and writer stamped in
its metadata, row groups of a bounded size, zstd, per-token column encodings and the footer's id
index. Where the bytes go (atomically) is :mod:`trajstore.store.atomic`'s concern."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from trajstore.errors import StoreError
from trajstore.schema import (
    ACTION_LOGPROBS_COLUMN,
    LEGACY_LOGPROBS_COLUMN,
    METADATA_SCHEMA_VERSION_KEY,
    METADATA_WRITER_KEY,
    SCHEMA_VERSION,
)
from trajstore.store.id_index import METADATA_ID_INDEX_KEY, encode_id_index

ROW_GROUP_TARGET_MB = 8
"""Uncompressed MiB per Parquet row group; bounds the memory of one streamed batch. A fetch by id
decodes the row group holding the row: 8 MiB made one fetch 3-4x faster than 32 MiB for about
1.3x the time of a scan of the scalar columns, the stream unchanged (bench/RESULTS.md)."""
PARQUET_COMPRESSION = "zstd"
SPAN_BYTES_ESTIMATE = 96
"""Uncompressed bytes assumed per span when sizing row groups (a dozen small fields)."""
PER_TOKEN_COLUMNS = ("tokens", ACTION_LOGPROBS_COLUMN, LEGACY_LOGPROBS_COLUMN)
"""Per-token list columns (the log-probs under their v3 name, and v1/v2's for old-layout test shards)."""
TOKEN_ENCODING_ENV = "TRAJSTORE_TOKEN_ENCODING"
"""Environment variable choosing how token ids are encoded in the shards this process writes
(:data:`TOKEN_ENCODINGS`; default ``plain``)."""
TOKEN_ENCODINGS = ("plain", "byte_stream_split")
"""``plain``: readable by every Parquet engine. ``byte_stream_split`` (Parquet 2.11's
BYTE_STREAM_SPLIT for INT32: the 4 bytes of each id go to 4 streams, so the high bytes, mostly 0
below a 16.7 M vocabulary, compress to almost nothing): on the store bench's table 6% fewer bytes,
1.6x faster encoding and 1.3-1.9x faster decoding than plain (bench/RESULTS.md), but
pyarrow < 16, DuckDB < 2.0 and Spark 3.5 cannot decode it ("BYTE_STREAM_SPLIT encoding is only
supported for FLOAT or DOUBLE data"): opt in where every reader is newer (docs/engines.md, "Reading a store
with other engines"). Log-probs are byte-stream-split either way (FLOAT: every engine reads it)."""


def token_encoding() -> str:
    """The token-id encoding this process writes (:data:`TOKEN_ENCODING_ENV`).

    Raises:
        StoreError: the variable holds something else than :data:`TOKEN_ENCODINGS`.
    """
    value = os.environ.get(TOKEN_ENCODING_ENV, "plain").strip().lower() or "plain"
    if value not in TOKEN_ENCODINGS:
        raise StoreError(f"{TOKEN_ENCODING_ENV}={os.environ[TOKEN_ENCODING_ENV]!r}: expected one of "
                         f"{', '.join(TOKEN_ENCODINGS)}")
    return value


def stamped(table: pa.Table, extra_metadata: Mapping[bytes, bytes] | None) -> pa.Table:
    """`table` with the shard metadata: schema version (the table schema's own
    ``trajstore.schema_version`` when it has one, e.g. ``trajectories_to_table(version=1)`` for
    tests and benchmarks of the v1 read path, else the current one) and the writer."""
    meta = dict(table.schema.metadata or {})
    meta.setdefault(METADATA_SCHEMA_VERSION_KEY, str(SCHEMA_VERSION).encode())
    meta[METADATA_WRITER_KEY] = b"trajstore"
    meta.update(extra_metadata or {})
    return table.replace_schema_metadata(meta)


def _footer_only(table: pa.Table) -> dict[bytes, bytes]:
    """Footer entries kept out of the Arrow schema (which every shard repeats in its footer):
    the id index of a trajectory table."""
    if "trajectory_id" in table.column_names and "spans" in table.column_names:
        return {METADATA_ID_INDEX_KEY: encode_id_index(table.column("trajectory_id"))}
    return {}


def row_bytes(table: pa.Table) -> np.ndarray:
    """Approximate uncompressed bytes of each row, int64 (n,): list columns by their element
    count times the element width (``spans`` at :data:`SPAN_BYTES_ESTIMATE` each), strings by
    their length (``metadata`` can be megabytes), fixed-width columns by their width."""
    import pyarrow.compute as pc  # 0.1-0.2 s to import (a wrapper per kernel): only writers size rows

    n = table.num_rows
    out = np.zeros(n, dtype=np.int64)
    for col in table.columns:
        t = col.type
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            counts = pc.list_value_length(col).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
            vt = t.value_type
            width = vt.byte_width if pa.types.is_integer(vt) or pa.types.is_floating(vt) else SPAN_BYTES_ESTIMATE
            out += counts * width
        elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t):
            out += pc.binary_length(col).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        else:
            try:
                out += t.byte_width
            except ValueError:  # bool and other bit-packed or nested types
                out += 1
    return out


def row_group_slices(table: pa.Table, target_bytes: int) -> list[tuple[int, int]]:
    """Split rows into consecutive slices of about `target_bytes` uncompressed bytes each
    (:func:`row_bytes`; a single row larger than the target gets a row group of its own)."""
    n = table.num_rows
    if n == 0:
        return []
    per_row = row_bytes(table)
    out, start, acc = [], 0, 0
    for i, b in enumerate(per_row.tolist()):
        acc += b
        if acc >= target_bytes:
            out.append((start, i + 1))
            start, acc = i + 1, 0
    if start < n:
        out.append((start, n))
    return out


def _leaf_paths(schema: pa.Schema) -> list[str]:
    """Parquet column paths (``a.list.element.b``) of every leaf of an Arrow schema."""
    def walk(prefix: str, t: pa.DataType) -> list[str]:
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return walk(f"{prefix}.list.element", t.value_type)
        if pa.types.is_struct(t):
            return [p for i in range(t.num_fields) for p in walk(f"{prefix}.{t.field(i).name}", t.field(i).type)]
        return [prefix]
    return [p for f in schema for p in walk(f.name, f.type)]


VERIFY_PAGE_CHECKSUMS = True
"""Readers check each data page's CRC-32 where the writer stored one (:func:`write_parquet` stores
them; shards written before it did, and other writers' files without them, read as before): a
flipped bit in a compressed token page otherwise decodes, most of the time, to other token ids
without any error (31 of 40 single-bit flips in a test; bench/RESULTS.md). The check costs nothing
measurable."""
FOOTER_PAD_KEY = b"trajstore.rewrite_pad"
"""Footer entry that makes a rewritten shard larger than the file it replaces (see
:func:`trajstore.store.rewrite.rewrite_shard`); its value is that many ``.`` bytes."""


def write_parquet(sink: Any, table: pa.Table, slices: list[tuple[int, int]], *, footer_pad: int = 0) -> None:
    """Write `table` (already :func:`stamped`) to `sink` as Parquet, one row group per slice of
    :func:`row_group_slices`, with the footer-only entries (the id index, and a
    :data:`FOOTER_PAD_KEY` entry of `footer_pad` bytes when it is positive); token ids encoded as
    :func:`token_encoding` says; every page with its CRC-32 (Parquet's page checksum), which the
    store's readers verify (:data:`VERIFY_PAGE_CHECKSUMS`).

    Raises:
        StoreError: a bad :data:`TOKEN_ENCODING_ENV` (before anything is written).
    """
    opts: dict[str, Any] = {}
    per_token = [f"{c}.list.element" for c in PER_TOKEN_COLUMNS if c in table.column_names]
    if per_token:
        # Per-token columns: no dictionary (a 49k+ vocabulary overflows the dictionary page
        # and falls back anyway) and no min/max statistics (useless for pruning token ids);
        # log-probs byte-stream-split, which zstd compresses better than plain floats.
        others = [c for c in _leaf_paths(table.schema) if c not in per_token]
        # ... except min/max of token ids: the trainer checks them against the model's
        # vocabulary from the footer alone, before it writes anything (a few bytes per row group)
        stats = others + [c for c in per_token if c.startswith("tokens.")]
        split = token_encoding() == "byte_stream_split"
        opts = dict(use_dictionary=others, write_statistics=stats,
                    column_encoding={c: "BYTE_STREAM_SPLIT" for c in per_token if split or not c.startswith("tokens.")})
    with pq.ParquetWriter(sink, table.schema, compression=PARQUET_COMPRESSION, write_page_checksum=True,
                          **opts) as w:
        for a, b in slices or [(0, 0)]:
            part = table.slice(a, b - a)
            w.write_table(part, row_group_size=max(1, part.num_rows))
        footer = _footer_only(table)
        if footer_pad > 0:
            footer[FOOTER_PAD_KEY] = b"." * footer_pad
        if footer:
            w.add_key_value_metadata(footer)

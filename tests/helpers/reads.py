"""Watching what a reader reads: the row groups it decodes."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


def count_row_group_reads(monkeypatch: Any) -> list[int]:
    """A list that receives the index of every row group any ``pq.ParquetFile`` reads from now on
    (until `monkeypatch` undoes it; thread-safe appends, so worker threads count too)."""
    reads: list[int] = []
    real = pq.ParquetFile.read_row_group

    def counting(self: pq.ParquetFile, i: int, *args: Any, **kw: Any) -> pa.Table:
        reads.append(i)
        return real(self, i, *args, **kw)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", counting)
    return reads

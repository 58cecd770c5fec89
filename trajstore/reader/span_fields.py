"""A few span fields of a shard, read without the rest of the spans: :func:`read_span_fields`
decodes only the Parquet leaf columns it names (the trainer's admission reads the sampling fields
of every row this way, not call ids, tool call ids and the rest)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from trajstore.reader.files import file_version, open_shard
from trajstore.schema import SPAN_TYPE
from trajstore.store import ShardInfo, Store


def read_span_fields(store: Store, shard: ShardInfo, names: Sequence[str]) -> pa.ListArray:
    """The ``spans`` column of every row of `shard` (file order, duplicates kept) holding only the
    span fields `names`, in that order, as the current schema types them: a field the file lacks
    (written by an older schema version, e.g. ``logprob_mode`` before v4) is null.

    Raises:
        KeyError: a name is not a span field of the current schema.
        NewerSchemaError, OSError, pyarrow.ArrowException: as the other readers (the shard cannot
            be decoded, or is of a newer schema version).
    """
    want = pa.list_(pa.field("item", pa.struct([SPAN_TYPE.field(n) for n in names]), nullable=False))
    pf = open_shard(store, shard)
    try:
        file_version(pf, shard)  # a newer version raises, as every reader does
        leaves = [pf.schema.column(i).path for i in range(len(pf.schema))]
        # `kind` too: every version has it, so the lists keep their lengths whatever is asked for
        present = [p for p in leaves if p.startswith("spans.") and p.rsplit(".", 1)[-1] in {*names, "kind"}]
        col = pf.read(columns=present).column("spans")
    finally:
        pf.close()
    col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return col.cast(want)  # fields matched by name: extra ones dropped, missing ones null

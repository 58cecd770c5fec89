"""The ``consumed.reuse`` column (replay buffer): consumption records written before it existed
read as first uses (0), alone or beside newer records, in the views and the staleness audit."""

from __future__ import annotations

import pyarrow as pa

from tests.helpers.stores import consumed_row
from trajstore.audit import connect, staleness_report
from trajstore.schema import CONSUMED_SCHEMA
from trajstore.store import open_store

OLD_CONSUMED_SCHEMA = pa.schema([f for f in CONSUMED_SCHEMA if f.name != "reuse"], metadata=CONSUMED_SCHEMA.metadata)
"""The records' schema before the replay buffer: no ``reuse`` column."""


def _by_run(conn) -> dict:  # noqa: ANN001
    rel = staleness_report(conn).by_run
    return dict(zip(rel.columns, rel.fetchall()[0]))


def test_records_without_the_reuse_column_read_as_first_uses(known_store) -> None:  # noqa: ANN001
    old = [consumed_row("q", 0, 8, "A", 5, 7, 4, 0.0, 0.0, 1.0), consumed_row("q", 0, 8, "C", 4, 4, 6, 0.0, 0.0, 1.0)]
    # the fixture's own run r1 was written without a reuse value too (null): both kinds of old record
    known_store.write_table(pa.Table.from_pylist(old, schema=OLD_CONSUMED_SCHEMA), subdir="runs/q/consumed")
    conn = connect(known_store, strict=True)
    assert conn.execute("SELECT count(*), sum(reuse), count(reuse) FROM consumed WHERE run_id = 'q'").fetchall() == \
        [(2, 0, 2)]
    assert conn.execute("SELECT typeof(reuse) FROM consumed LIMIT 1").fetchall() == [("BIGINT",)]
    assert _by_run(connect(known_store, strict=True))["reused"] == 0
    # a reuse recorded later, in the current schema, beside the old records
    new = consumed_row("q", 1, 9, "A", 5, 7, 4, 0.0, 0.0, 1.0) | {"reuse": 1}
    known_store.write_table(pa.Table.from_pylist([new], schema=CONSUMED_SCHEMA), subdir="runs/q/consumed")
    conn = connect(known_store, strict=True)
    assert conn.execute("SELECT step, trajectory_id, reuse FROM consumed WHERE run_id = 'q' ORDER BY step, "
                        "trajectory_id").fetchall() == [(0, "A", 0), (0, "C", 0), (1, "A", 1)]
    rel = staleness_report(conn, run="q").by_run
    row = dict(zip(rel.columns, rel.fetchall()[0]))
    assert (row["consumed"], row["reused"]) == (3, 1)


def test_a_store_whose_records_all_predate_the_column_reads_them_as_first_uses(tmp_path) -> None:  # noqa: ANN001
    store = open_store(str(tmp_path))
    old = [consumed_row("q", 0, 8, "A", 5, 7, 4, 0.0, 0.0, 1.0)]
    store.write_table(pa.Table.from_pylist(old, schema=OLD_CONSUMED_SCHEMA), subdir="runs/q/consumed")
    assert connect(store, strict=True).execute("SELECT trajectory_id, reuse FROM consumed").fetchall() == [("A", 0)]

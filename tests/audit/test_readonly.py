"""`sql` and audit connections cannot write to the store (or read outside it)."""

from __future__ import annotations

import os

import duckdb
import pytest

from trajstore import audit


def _listing(root: str) -> list[tuple[str, int, float]]:
    out = []
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            st = os.stat(p)
            out.append((p, st.st_size, st.st_mtime))
    return sorted(out)


@pytest.mark.parametrize("statement", [
    "COPY (SELECT * FROM trajectories) TO '{root}/trajectories/evil.parquet' (FORMAT parquet)",
    "COPY (SELECT 1 AS a) TO '{shard}' (FORMAT parquet, USE_TMP_FILE false)",
    "CREATE TABLE t AS SELECT * FROM trajectories",
    "INSERT INTO consumed SELECT * FROM consumed",
    "ATTACH '{root}/x.duckdb' AS x",
    "SET enable_external_access = true",
    "PRAGMA enable_profiling",
    "EXPLAIN ANALYZE COPY (SELECT 1) TO '{root}/y.csv'",
])
def test_sql_refuses_writes_and_leaves_store_untouched(known_store, statement):
    before = _listing(known_store.root)
    conn = audit.connect(known_store)
    shard = known_store.list_shards()[0].path
    with pytest.raises(audit.AuditError, match="read-only: refusing"):
        audit.sql(conn, statement.format(root=known_store.root, shard=shard))
    assert _listing(known_store.root) == before
    assert conn.execute("SELECT count(*) FROM trajectories").fetchall()[0][0] == 6


def test_sql_runs_selects_and_names_errors(known_store):
    conn = audit.connect(known_store)
    got = audit.sql(conn, "WITH k AS (SELECT kind, sum(num_tokens) AS n FROM spans GROUP BY kind) "
                          "SELECT * FROM k ORDER BY kind").fetchall()
    # prompt 2+1+1+2+3+1 = 10; action 20; observation 2+3+2 = 7.
    assert got == [("action", 20), ("observation", 7), ("prompt", 10)]
    with pytest.raises(audit.AuditError, match="exactly one"):
        audit.sql(conn, "SELECT 1; SELECT 2")
    with pytest.raises(audit.AuditError, match="nope"):
        audit.sql(conn, "SELECT nope FROM trajectories")


def test_connection_file_access_is_limited_to_the_shards(known_store, tmp_path):
    conn = audit.connect(known_store)
    outside = tmp_path / "outside.csv"
    outside.write_text("a\n1\n")
    with pytest.raises(audit.AuditError, match="disabled by configuration"):
        audit.sql(conn, f"SELECT * FROM read_csv('{outside}')")
    # Even bypassing `sql`, DuckDB refuses to create files and to unlock its configuration.
    with pytest.raises(duckdb.Error, match="disabled by configuration"):
        conn.execute(f"COPY (SELECT 1) TO '{known_store.root}/new.csv'")
    with pytest.raises(duckdb.Error, match="locked"):
        conn.execute("SET enable_external_access = true")
    assert not os.path.exists(f"{known_store.root}/new.csv")

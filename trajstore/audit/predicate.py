"""The user's ``--where`` predicate over ``trajectories``: checked to be one boolean expression
DuckDB accepts, and the SQL fragments the reports build from it (selected rows, run filter)."""

from __future__ import annotations

import json

import duckdb

from trajstore.audit.views import AuditError, sql_literal
from trajstore.errors import one_line


def _predicate_probe(where: str) -> str:
    # The newline ends a trailing "--" comment, which would otherwise swallow the closing
    # parenthesis (and, in a report, the rest of its query).
    return f"SELECT count(*) FROM trajectories WHERE ({where}\n)"


def predicate_error(where: str, error: duckdb.Error) -> str:
    """DuckDB's reason for refusing the user predicate `where`, in terms of the text the user
    typed: `error` came from the parenthesised probe (``WHERE (<where>\n)``), so a syntax error
    there can name a ``)`` the user never wrote (``reward >`` -> 'syntax error at or near ")"').
    The predicate is parsed again unwrapped and that reason is returned when it fails too; the
    ``LINE 1: ...`` echo of our query is dropped either way."""
    try:
        duckdb.extract_statements(f"SELECT count(*) FROM trajectories WHERE {where}")
    except duckdb.Error as unwrapped:
        return one_line(str(unwrapped))
    return one_line(str(error))


def is_plain_predicate(conn: duckdb.DuckDBPyConnection, where: str) -> bool:
    """True when `where` is one boolean expression over a ``trajectories`` relation, i.e. when
    ``SELECT count(*) FROM trajectories WHERE (<where>)`` parses as exactly one plain
    SELECT. A predicate that closes the parenthesis early and appends UNION, GROUP BY, HAVING,
    ORDER BY, LIMIT, a second statement, ... changes the query's shape and gives False.

    Only parses (with DuckDB's ``json_serialize_sql`` on `conn`); whether the columns exist is
    for the caller to check by running the predicate.

    Raises:
        duckdb.Error: `where` does not even split into statements (e.g. an unterminated quote).
    """
    probe = _predicate_probe(where)
    statements = duckdb.extract_statements(probe)
    if len(statements) != 1 or statements[0].type.name != "SELECT":
        return False
    try:
        doc = json.loads(conn.execute("SELECT json_serialize_sql(?)", [probe]).fetchall()[0][0])
        node = doc["statements"][0]["node"]
    except (duckdb.Error, KeyError, IndexError, TypeError, ValueError):
        return False
    return (not doc.get("error") and node.get("type") == "SELECT_NODE"
            and (node.get("from_table") or {}).get("type") == "BASE_TABLE"
            and not node.get("group_expressions") and node.get("having") is None
            and not node.get("modifiers") and not (node.get("cte_map") or {}).get("map")
            and not node.get("group_sets") and node.get("qualify") is None and node.get("sample") is None
            and node.get("aggregate_handling", "STANDARD_HANDLING") == "STANDARD_HANDLING")


def where_sql(conn: duckdb.DuckDBPyConnection, where: str | None) -> str:
    """Check a user predicate over ``trajectories`` columns; return it parenthesised."""
    if where is None or not where.strip():
        return "TRUE"
    try:
        plain = is_plain_predicate(conn, where)
    except duckdb.Error as e:
        raise AuditError(f"invalid --where predicate {where!r}: {predicate_error(where, e)}") from e
    if not plain:
        raise AuditError(f"invalid --where predicate {where!r}: must be one boolean expression")
    try:
        conn.sql(_predicate_probe(where) + " LIMIT 0").fetchall()
    except duckdb.Error as e:
        raise AuditError(f"invalid --where predicate {where!r} (columns of the trajectories view): "
                         f"{predicate_error(where, e)}") from e
    # Evaluated once on a row of NULLs with the view's column types: a literal of the wrong type
    # (``reward = 'x'``) fails when it is cast, which LIMIT 0 never does.
    try:
        conn.sql("WITH _t AS (SELECT * FROM trajectories LIMIT 0) SELECT count(*) FROM (SELECT _t.* FROM "
                 f"(SELECT 1) AS _one LEFT JOIN _t ON true) AS trajectories WHERE ({where}\n)").fetchall()
    except duckdb.Error as e:
        raise AuditError(f"invalid --where predicate {where!r} (types of the trajectories view's columns, e.g. "
                         f"reward DOUBLE, status VARCHAR): {e}") from e
    return f"({where}\n)"


def run_filter(run: str | None, column: str = "run_id") -> str:
    """SQL condition keeping `run`'s rows by `column` (TRUE for every run)."""
    return "TRUE" if run is None else f"{column} = {sql_literal(run)}"


def selected_cte(conn: duckdb.DuckDBPyConnection, where: str | None) -> str:
    """The CTE ``sel``: the trajectories the checked predicate `where` selects."""
    return f"sel AS (SELECT * FROM trajectories WHERE {where_sql(conn, where)})"

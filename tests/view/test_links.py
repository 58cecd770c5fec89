"""trajstore/view/links.py: the ``<column>_url`` columns ``--view-url`` adds to ``traj stats``
tables (Python) and ``traj sql`` results (DuckDB). That both encode an id alike and the app serves
the path: tests/view/test_app.py."""

from __future__ import annotations

import duckdb

from trajstore.tables import TableData
from trajstore.view.links import with_view_link_columns, with_view_links


def test_a_link_column_follows_each_column_of_trajectory_ids():
    table = TableData("dup.ids", ["trajectory_id", "copies", "parent_trajectory_id"],
                      [("a b", 2, "p/1"), ("c", 3, None)], keys=["trajectory_id"])
    got = with_view_links(table, "http://h:1/")
    assert list(got.columns) == ["trajectory_id", "trajectory_id_url", "copies", "parent_trajectory_id",
                                 "parent_trajectory_id_url"]
    # space and slash are percent-encoded (%20, %2F); a missing id has no link
    assert [tuple(r) for r in got.rows] == [("a b", "http://h:1/t/a%20b", 2, "p/1", "http://h:1/t/p%2F1"),
                                            ("c", "http://h:1/t/c", 3, None, None)]
    assert got.name == "dup.ids" and list(got.keys) == ["trajectory_id"]


def test_results_without_trajectory_ids_are_left_as_they_are():
    table = TableData("t", ["source", "n"], [("sdk", 1)])
    assert with_view_links(table, "http://h") is table
    rel = duckdb.sql("SELECT 1 AS n")
    assert with_view_link_columns(rel, "http://h") is rel
    linked = with_view_link_columns(duckdb.sql("SELECT 'a b' AS example_id, 1 AS n"), "http://h")
    assert linked.columns == ["example_id", "example_id_url", "n"]
    assert linked.fetchall() == [("a b", "http://h/t/a%20b", 1)]

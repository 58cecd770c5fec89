"""Links from other outputs to ``traj view`` pages: ``traj stats --view-url`` and ``traj sql
--view-url`` add a ``<column>_url`` column after each column of trajectory ids, computed in
Python for result tables and by DuckDB for a query, alike (the path is
:func:`trajstore.view.urls.trajectory_path`'s)."""

from __future__ import annotations

import dataclasses
from typing import Any

from trajstore.tables import TableData
from trajstore.view.urls import VIEW_URL_SAFE, trajectory_path

LINKED_ID_COLUMNS = ("trajectory_id", "example_id", "parent_trajectory_id")
"""Columns holding trajectory ids that ``--view-url`` links to their ``traj view`` page."""


def view_link(view_url: str, trajectory_id: str) -> str:
    """``<view_url>/t/<trajectory_id>``, the id percent-encoded but for :data:`VIEW_URL_SAFE`
    (``http://v`` and ``odd:id=1+x`` -> ``http://v/t/odd:id%3D1%2Bx``)."""
    return view_url.rstrip("/") + trajectory_path(trajectory_id)


def with_view_link_columns(rel: Any, view_url: str) -> Any:
    """The DuckDB relation `rel` (a ``traj sql`` result) with a ``<column>_url`` column after each
    column of :data:`LINKED_ID_COLUMNS`, computed by DuckDB as :func:`view_link` does; `rel`
    itself when it has none. Lazy: nothing runs until the result is read."""
    cols = list(rel.columns)
    if not any(c in LINKED_ID_COLUMNS for c in cols):
        return rel
    base = view_url.rstrip("/") + "/t/"
    exprs = []
    for c in cols:
        q = '"' + c.replace('"', '""') + '"'
        exprs.append(q)
        if c in LINKED_ID_COLUMNS:
            encoded = f"url_encode(CAST({q} AS VARCHAR))"
            for ch in VIEW_URL_SAFE:
                encoded = f"replace({encoded}, '%{ord(ch):02X}', '{ch}')"
            exprs.append(f"'{base.replace(chr(39), chr(39) * 2)}' || {encoded} AS \"{c}_url\"")
    return rel.project(", ".join(exprs))


def with_view_links(table: TableData, view_url: str) -> TableData:
    """`table` with a ``<column>_url`` column after each column of :data:`LINKED_ID_COLUMNS`
    holding :func:`view_link` of its id (None where the id is not a string); `table` itself
    when it has none."""
    linked = [c for c in table.columns if c in LINKED_ID_COLUMNS]
    if not linked:
        return table
    cols: list[str] = []
    for c in table.columns:
        cols += [c, f"{c}_url"] if c in linked else [c]
    rows = []
    for r in table.rows:
        out: list[Any] = []
        for c, v in zip(table.columns, r):
            out.append(v)
            if c in linked:
                out.append(view_link(view_url, v) if isinstance(v, str) else None)
        rows.append(tuple(out))
    return dataclasses.replace(table, columns=cols, rows=rows)

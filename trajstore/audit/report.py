"""The base of every audit report: a typed record of named, lazy DuckDB relations, with what the
CLI needs to show them (key columns, why a table is empty, prose columns, notes under a table)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import ClassVar

import duckdb

NOT_CONSUMED = "no training run consumed the selected trajectories"
"""Why a table over consumption records has no rows."""


@dataclass(frozen=True)
class Report:
    """Base of every report: named DuckDB relations (lazy; each fetch re-runs its query).

    Class attributes (for display): ``KEYS`` maps a table to the columns that identify its rows
    (kept in every part when a wide table is cut to fit a terminal); ``EMPTY`` says why a table
    can have no rows; ``WRAP`` names a table's prose columns, wrapped at spaces on a narrow
    terminal instead of cut (cut reasons could all read the same); ``NOTES`` says what a
    table's columns count where their names cannot (printed under the table).
    """

    KEYS: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    EMPTY: ClassVar[Mapping[str, str]] = {}
    WRAP: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    NOTES: ClassVar[Mapping[str, str]] = {}

    def tables(self) -> dict[str, duckdb.DuckDBPyRelation]:
        """The report's relations by field name, in declaration order."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def empty_note(self, table: str) -> str | None:
        """Why ``table`` has no rows (``EMPTY``; a report may tell cases apart by its other tables)."""
        return self.EMPTY.get(table)


def consumed_but_unversioned(rep: Report, table: str, consumed: str, note: str) -> str | None:
    """The note for a staleness table without rows: ``note`` (staleness undefined) when the
    ``consumed`` table of the same report has rows, else the report's own ``EMPTY`` note."""
    return note if getattr(rep, consumed).limit(1).fetchall() else rep.EMPTY.get(table)

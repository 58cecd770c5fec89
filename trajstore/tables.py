"""Result tables as data: the columns and raw rows a report or a run summary hands over to be
printed, with which columns identify a row. No formatting or layout here; ``traj`` draws them
(``trajstore.cli.display.render_tables``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TableData:
    """One result table to print.

    Attributes:
        name: shown as the title (``staleness.by_run``); the part before the first ``.`` groups
            tables of one report in the note about empty ones.
        columns: column names.
        rows: one tuple per row, raw values (the renderer formats them).
        keys: columns that identify a row, kept in every part of a wide table. None: the
            shortest leading run of text/integer columns (at most three) whose values are unique
            per row.
        empty_note: why the table can be empty, printed instead of it (e.g. "no training run
            consumed the selected trajectories").
        wrap: prose columns that may wrap at spaces (a description); every other cell stays on
            one line.
        shares: columns holding shares in [0, 1] whose names do not say so (``solved``); they
            print like ``share_*`` columns.
        note: what a column counts when its name cannot say it, printed (dim) under the table
            in ``table`` output only.
    """

    name: str
    columns: Sequence[str]
    rows: Sequence[Sequence[Any]]
    keys: Sequence[str] | None = None
    empty_note: str | None = None
    wrap: Sequence[str] = ()
    shares: Sequence[str] = ()
    note: str | None = None

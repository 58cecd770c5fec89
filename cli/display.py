"""How ``traj`` prints results: tables and one-record summaries for people (``--format table``,
laid out by :mod:`trajstore.cli.table_layout`, numbers as :mod:`trajstore.cli.cells` formats them)
or as JSON and CSV for programs; commands to copy on a line of their own.

Callers hand over columns and rows they already computed (:class:`~trajstore.tables.TableData`).
Tables without rows are not drawn: one line per report says so, after the tables. Commands a
user is meant to copy go through :func:`print_command`: their own line, unstyled, never wrapped.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from enum import Enum
from typing import IO, TYPE_CHECKING, Any

from trajstore.cli.cells import column_formatter, jsonable
from trajstore.cli.table_layout import print_fields, print_inline, print_table
from trajstore.tables import TableData

if TYPE_CHECKING:
    from rich.console import Console


class OutputFormat(str, Enum):
    """What ``--format`` selects on every command: ``table`` for people, ``json`` / ``csv`` for programs."""

    table = "table"
    json = "json"
    csv = "csv"


def render_tables(tables: Sequence[TableData], fmt: OutputFormat | str, *, console: Console | None = None,
                  out: IO[str] | None = None, compact: bool = False) -> None:
    """Print tables: rich tables laid out for the console width (:func:`~trajstore.cli.table_layout.print_table`), one
    JSON object ``{name: [row objects]}``, or CSV sections each headed by ``# name`` (a single
    table: plain CSV).

    Args:
        console: where ``table`` output goes (default: a new stdout console).
        out: where ``json`` / ``csv`` output goes (default: sys.stdout).
        compact: ``table`` output as short as it can be (a screen-sized overview): a one-row
            table as one wrapped paragraph (:func:`~trajstore.cli.table_layout.print_inline`),
            every other one whole, never transposed or cut into parts.
    """
    fmt = OutputFormat(fmt)
    out = out or sys.stdout
    if fmt is OutputFormat.json:
        doc = {t.name: [{c: jsonable(v) for c, v in zip(t.columns, r)} for r in t.rows] for t in tables}
        out.write(json.dumps(doc, indent=2) + "\n")
        return
    if fmt is OutputFormat.csv:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        for i, t in enumerate(tables):
            if len(tables) > 1:
                buf.write(("\n" if i else "") + f"# {t.name}\n")
            w.writerow(t.columns)
            w.writerows([["" if v is None else jsonable(v) if not isinstance(v, (list, dict)) else
                          json.dumps(jsonable(v)) for v in r] for r in t.rows])
        out.write(buf.getvalue())
        return
    console = console or new_console()
    empty: list[TableData] = []
    for t in tables:
        if t.rows and compact and len(t.rows) == 1 and len(t.columns) > 2:
            print_inline(console, t)
        elif t.rows:
            print_table(console, t, whole=compact)
            if t.note:
                console.print(f"({t.note})", style="dim", markup=False, highlight=False)
        else:
            empty.append(t)
    for line in _empty_notes(tables, empty):
        console.print(line, style="dim", markup=False, highlight=False)


def render_record(name: str, record: Mapping[str, Any], fmt: OutputFormat | str, *,
                  console: Console | None = None, out: IO[str] | None = None) -> None:
    """Print one result object (a command's summary): JSON as it is; CSV as one header and one
    row with nested objects flattened to dotted names; a table with one row per field."""
    fmt = OutputFormat(fmt)
    out = out or sys.stdout
    if fmt is OutputFormat.json:
        out.write(json.dumps(jsonable(dict(record)), indent=2) + "\n")
        return
    flat = flatten(record)
    if fmt is OutputFormat.csv:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(flat)
        w.writerow(["" if v is None else json.dumps(jsonable(v)) if isinstance(v, list) else jsonable(v)
                    for v in flat.values()])
        out.write(buf.getvalue())
        return
    print_fields(console or new_console(), name, {k: _cell_for(k, v) for k, v in flat.items()})


def flatten(record: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level with dotted keys: ``{"a": {"b": 1}}`` -> ``{"a.b": 1}``."""
    out: dict[str, Any] = {}
    for k, v in record.items():
        if isinstance(v, Mapping):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _cell_for(name: str, v: Any) -> str:
    if isinstance(v, (list, tuple, dict)) and not v:  # `shards │ []` in traj migrate: nothing, like a missing value
        return "-"
    if isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v):  # names (shards): one per line
        return "\n".join(v)
    return column_formatter(name, [v])(v)


def print_command(console: Console, command: str) -> None:
    """Print a command the user is meant to copy: on its own line, unstyled, never wrapped."""
    console.print(command, markup=False, highlight=False, soft_wrap=True, style=None, emoji=False)


def new_console(*, stderr: bool = False) -> Console:
    """A rich console on stdout (results) or stderr (progress and notes)."""
    from rich.console import Console  # here, not at import: rich adds ~0.15 s to every command's start-up

    return Console(stderr=stderr)


@contextlib.contextmanager
def stderr_progress(description: str, *, disable: bool = False) -> Iterator[Callable[[int, int, str], None]]:
    """A transient progress bar on stderr while the block runs; yields ``advance(i, n, text)``:
    item ``i`` (0-based) of ``n`` is done, ``text`` says which. `disable`: no bar (a dry run)."""
    from rich.progress import Progress  # here, not at import: see new_console

    with Progress(console=new_console(stderr=True), transient=True, disable=disable) as progress:
        task = progress.add_task(description, total=None)

        def advance(i: int, n: int, text: str) -> None:
            progress.update(task, total=n, completed=i + 1, description=text)

        yield advance


def _empty_notes(tables: Sequence[TableData], empty: Sequence[TableData]) -> list[str]:
    """One line per report whose tables are all empty (``clip: no rows (why)``); otherwise one
    line per run of empty tables that share a reason."""
    lines: list[str] = []
    seen: set[str] = set()
    pending: list[TableData] = []

    def flush() -> None:
        if pending:
            note = pending[0].empty_note or f"columns: {', '.join(pending[0].columns)}"
            lines.append(f"{', '.join(t.name for t in pending)}: no rows ({note})")
            pending.clear()

    for t in empty:
        group = t.name.split(".", 1)[0]
        members = [x for x in tables if x.name.split(".", 1)[0] == group]
        if len(members) > 1 and all(not x.rows for x in members):
            if group not in seen:
                seen.add(group)
                flush()
                notes = list(dict.fromkeys(x.empty_note for x in members if x.empty_note))
                lines.append(f"{group}: no rows" + (f" ({'; '.join(notes)})" if notes else ""))
            continue
        if pending and (pending[0].empty_note != t.empty_note or t.empty_note is None):
            flush()
        pending.append(t)
    flush()
    return lines


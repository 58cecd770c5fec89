"""``traj stats`` and ``traj sql``: audits of a store through DuckDB (see :mod:`trajstore.audit`).
Parse options, call the library, render rich tables, JSON or CSV."""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import json
import math
import sys
from enum import Enum
from pathlib import Path
from typing import Any, Optional

import typer

from trajstore.cli.main import app, friendly_errors


class OutputFormat(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


def parse_storage_options(items: list[str]) -> dict[str, Any]:
    """``key=value`` strings to fsspec options; ``true``/``false`` become booleans.

    Raises:
        ValueError: an item has no ``=``.
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--storage-option {item!r}: expected key=value")
        out[key] = {"true": True, "false": False}.get(value.lower(), value)
    return out


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (dt.datetime, dt.date)):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    return v


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.4g}"
    return str(_jsonable(v))


def _fetch(rel: Any) -> tuple[list[str], list[tuple[Any, ...]]]:
    import duckdb

    from trajstore.audit import AuditError

    try:
        return list(rel.columns), rel.fetchall()
    except duckdb.Error as e:  # raised while running (casts, malformed JSON, refused file access)
        raise AuditError(f"query failed: {e}") from e


def render(tables: dict[str, Any], fmt: OutputFormat) -> None:
    """Print named relations: rich tables, one JSON object {name: [row objects]}, or CSV
    sections each headed by a ``# name`` line."""
    fetched = {name: _fetch(rel) for name, rel in tables.items()}
    if fmt is OutputFormat.json:
        doc = {name: [{c: _jsonable(v) for c, v in zip(cols, row)} for row in rows]
               for name, (cols, rows) in fetched.items()}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    elif fmt is OutputFormat.csv:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        for i, (name, (cols, rows)) in enumerate(fetched.items()):
            if len(fetched) > 1:
                buf.write(("\n" if i else "") + f"# {name}\n")
            w.writerow(cols)
            w.writerows([[_jsonable(v) if not isinstance(v, float) or math.isfinite(v) else "" for v in r]
                         for r in rows])
        sys.stdout.write(buf.getvalue())
    else:
        from rich.console import Console

        console = Console()
        for name, (cols, rows) in fetched.items():
            for title, part_cols, part_rows in _column_groups(name, cols, rows, console.width):
                console.print(_rich_table(title, part_cols, part_rows))


def _column_groups(name: str, cols: list[str], rows: list[tuple[Any, ...]], width: int
                   ) -> list[tuple[str, list[str], list[tuple[str, ...]]]]:
    """Split a wide table into pieces that fit `width` characters; each piece repeats the
    leading key columns (text columns such as run_id, source)."""
    cells = [tuple(_cell(v) for v in r) for r in rows]
    need = [max([len(c)] + [len(r[i]) for r in cells]) + 3 for i, c in enumerate(cols)]
    keys = 0
    while keys < len(cols) - 1 and rows and all(isinstance(r[keys], str) or r[keys] is None for r in rows):
        keys += 1
    groups: list[list[int]] = []
    budget = width - 1 - sum(need[:keys])
    for i in range(keys, len(cols)):
        if not groups or sum(need[j] for j in groups[-1]) + need[i] > budget:
            groups.append([])
        groups[-1].append(i)
    if len(groups) <= 1:
        return [(name, cols, cells)]
    out = []
    for g in groups:
        idx = list(range(keys)) + g
        out.append((f"{name} ({cols[g[0]]} .. {cols[g[-1]]})", [cols[i] for i in idx],
                    [tuple(r[i] for i in idx) for r in cells]))
    return out


def _rich_table(title: str, cols: list[str], rows: list[tuple[str, ...]]) -> Any:
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for c in cols:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*r)
    if not rows:
        t.caption = "(no rows)"
    return t


@app.command("stats")
@friendly_errors
def stats_cmd(
    store: str = typer.Argument(..., help="store URI (local path or s3://bucket/prefix)"),
    staleness: bool = typer.Option(False, "--staleness", help="trainer version - policy version of consumed "
                                   "tokens/trajectories; version spread and lag of unconsumed data"),
    clip: bool = typer.Option(False, "--clip", help="DIS masked fractions per step and staleness bucket"),
    coverage: bool = typer.Option(False, "--coverage", help="action tokens with log-probs / policy versions; "
                                  "untrainable trajectories and why"),
    rewards: bool = typer.Option(False, "--rewards", help="reward distribution per source"),
    lengths: bool = typer.Option(False, "--lengths", help="turns, action / observation tokens per source"),
    statuses: bool = typer.Option(False, "--statuses", help="trajectories per source and status"),
    duplicates: bool = typer.Option(False, "--duplicates", help="trajectory ids stored more than once"),
    where: Optional[str] = typer.Option(None, "--where", help="SQL predicate over trajectories columns, "
                                        "e.g. \"source = 'sdk' AND reward IS NOT NULL\""),
    run: Optional[str] = typer.Option(None, "--run", help="only this training run's records"),
    fmt: OutputFormat = typer.Option(OutputFormat.table, "--format", help="table | json | csv"),
    plot: Optional[Path] = typer.Option(None, "--plot", help="also draw the plottable reports into this PNG"),
    storage_option: list[str] = typer.Option([], "--storage-option", help="fsspec option key=value (repeatable)"),
) -> None:
    """Audit reports over a store (no report flag: an overview and every report)."""
    from trajstore import audit
    from trajstore.audit.views import run_ids
    from trajstore.cli.main import open_existing_store

    s = open_existing_store(store, parse_storage_options(storage_option))
    if run is not None and run not in run_ids(s):
        raise audit.AuditError(f"run {run!r} not found under {s.url('runs')} (runs: {', '.join(run_ids(s)) or 'none'})")
    conn = audit.connect(s)
    chosen = {"staleness": staleness, "clip": clip, "coverage": coverage, "rewards": rewards,
              "lengths": lengths, "statuses": statuses, "duplicates": duplicates}
    everything = not any(chosen.values())
    builders = {
        "overview": lambda: audit.overview_report(conn, where=where, run=run),
        "staleness": lambda: audit.staleness_report(conn, where=where, run=run),
        "clip": lambda: audit.clip_report(conn, where=where, run=run),
        "coverage": lambda: audit.coverage_report(conn, where=where),
        "rewards": lambda: audit.reward_report(conn, where=where),
        "lengths": lambda: audit.length_report(conn, where=where),
        "statuses": lambda: audit.status_report(conn, where=where),
        "duplicates": lambda: audit.duplicate_report(conn, where=where),
    }
    import duckdb

    try:
        reports = {name: build() for name, build in builders.items()
                   if everything or chosen.get(name, False)}
    except duckdb.Error as e:
        raise audit.AuditError(f"report query failed: {e}") from e
    render({f"{name}.{t}": rel for name, rep in reports.items() for t, rel in rep.tables().items()}, fmt)
    if plot is not None:
        from trajstore.audit.plots import plot_reports

        # What is really written: a directory gets a file inside it; a name without a suffix
        # gets ".png" (matplotlib adds it), so say that name, not the one given.
        out = plot / "traj-stats.png" if plot.is_dir() else (plot if plot.suffix else plot.with_suffix(".png"))
        panels = plot_reports(reports, out)
        typer.echo(f"wrote {out} ({', '.join(panels)})", err=True)


SQL_BATCH_ROWS = 10_000
"""Rows fetched from DuckDB at a time by ``traj sql``: its memory is bounded by one batch."""
SQL_TABLE_MAX_ROWS = 1_000
"""Rows ``traj sql`` shows as a table (a table needs every row for its widths); csv / json stream all."""


def _sql_batches(rel: Any) -> Any:
    """Arrow record batches of `rel`, :data:`SQL_BATCH_ROWS` rows at a time, DuckDB errors
    (raised while rows are produced: failed casts, malformed JSON) as one-line AuditErrors."""
    import duckdb

    from trajstore.audit import AuditError
    from trajstore.errors import one_line

    try:
        reader = rel.to_arrow_reader(SQL_BATCH_ROWS)
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                return
            yield batch
    except duckdb.Error as e:
        raise AuditError(f"query failed: {one_line(str(e))}") from e


def _columns(rel: Any) -> list[str]:
    return list(rel.columns)


def _stream_csv(rel: Any) -> None:
    out = sys.stdout
    w = csv.writer(out, lineterminator="\n")
    w.writerow(_columns(rel))
    for batch in _sql_batches(rel):
        w.writerows([[_jsonable(v) if not isinstance(v, float) or math.isfinite(v) else "" for v in row.values()]
                     for row in batch.to_pylist()])
        out.flush()


def _stream_json(rel: Any) -> None:
    """``{"result": [row objects]}``, written a batch at a time (valid JSON when complete)."""
    out = sys.stdout
    cols = _columns(rel)
    out.write('{\n  "result": [')
    first = True
    for batch in _sql_batches(rel):
        for row in batch.to_pylist():
            out.write(("\n    " if first else ",\n    ")
                      + json.dumps({c: _jsonable(v) for c, v in zip(cols, row.values())}))
            first = False
        out.flush()
    out.write("\n  ]\n}\n" if not first else "]\n}\n")


def _show_table(rel: Any) -> None:
    from rich.console import Console

    cols = _columns(rel)
    rows: list[tuple[Any, ...]] = []
    more = False
    for batch in _sql_batches(rel):
        for row in batch.to_pylist():
            if len(rows) == SQL_TABLE_MAX_ROWS:
                more = True
                break
            rows.append(tuple(row.values()))
        if more:
            break
    console = Console()
    for title, part_cols, part_rows in _column_groups("result", cols, rows, console.width):
        console.print(_rich_table(title, part_cols, part_rows))
    if more:
        typer.echo(f"(showing the first {SQL_TABLE_MAX_ROWS} rows; use --limit N, or --format csv|json to "
                   "stream every row)", err=True)


@app.command("sql")
@friendly_errors
def sql_cmd(
    store: str = typer.Argument(..., help="store URI (local path or s3://bucket/prefix)"),
    query: str = typer.Argument(..., help="one SELECT over the views trajectories, spans, span_logprobs, steps, "
                                "consumed, step_metrics"),
    fmt: OutputFormat = typer.Option(OutputFormat.table, "--format", help="table | json | csv (json and csv "
                                     "stream every row as it arrives)"),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="at most N rows"),
    storage_option: list[str] = typer.Option([], "--storage-option", help="fsspec option key=value (repeatable)"),
) -> None:
    """Run one read-only SELECT against the store's DuckDB views. Rows are fetched in batches of
    10,000, so memory stays bounded however large the result; a table shows the first 1,000."""
    from trajstore import audit

    from trajstore.cli.main import open_existing_store

    conn = audit.connect(open_existing_store(store, parse_storage_options(storage_option)))
    rel = audit.sql(conn, query, limit=limit)
    {OutputFormat.csv: _stream_csv, OutputFormat.json: _stream_json, OutputFormat.table: _show_table}[fmt](rel)

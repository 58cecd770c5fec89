"""``traj stats`` and ``traj sql``: audits of a store through DuckDB (see :mod:`trajstore.audit`).
Parse options, call the library, render tables, JSON or CSV (:mod:`trajstore.cli.display`)."""

from __future__ import annotations

import os
import sys
import textwrap
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import duckdb
import typer

from trajstore import audit
from trajstore.audit import AuditError
from trajstore.audit.export import write_result
from trajstore.audit.plots import (
    PLOTTED_FLAGS,
    UnsupportedPlotFormat,
    plot_destination,
    plot_reports,
    require_matplotlib,
)
from trajstore.audit.views import run_ids
from trajstore.cli.app import TrajTyper
from trajstore.cli.display import OutputFormat, new_console, render_tables
from trajstore.cli.errors import InvalidOptionError, friendly_errors
from trajstore.cli.options import (
    FormatOption,
    SkipUnreadableOption,
    StorageOptions,
    StoreArgument,
    parse_storage_options,
    unreadable_hint,
)
from trajstore.errors import CorruptShardError, one_line, os_reason
from trajstore.store import open_existing_store
from trajstore.store.layout import RUNS_DIR
from trajstore.tables import TableData
from trajstore.view.links import with_view_link_columns, with_view_links

ViewUrlOption = Annotated[str | None, typer.Option(
    "--view-url", metavar="URL",
    help="base URL of a running `traj view` (e.g. http://127.0.0.1:8200): each column of trajectory ids gets a "
    "column of links to each one's page")]
"""``--view-url`` of ``traj stats`` and ``traj sql``."""


commands = TrajTyper()


def _fetch(rel: Any) -> tuple[list[str], list[tuple[Any, ...]]]:
    try:
        return list(rel.columns), rel.fetchall()
    except duckdb.Error as e:  # raised while running (casts, malformed JSON, refused file access)
        raise AuditError(f"query failed: {e}") from e


def report_tables(reports: dict[str, Any]) -> list[TableData]:
    """Every table of the given reports (``{name: Report}``), fetched, named ``<report>.<table>``,
    with the report's key columns and empty-table notes (the short overview's tables, report
    ``brief``, are named ``overview.<table>``: they continue the totals)."""
    out = []
    for key, rep in reports.items():
        name = "overview" if key == "brief" else key
        for t, rel in rep.tables().items():
            cols, rows = _fetch(rel)
            out.append(TableData(f"{name}.{t}", cols, rows, keys=rep.KEYS.get(t), empty_note=rep.empty_note(t),
                                 wrap=rep.WRAP.get(t, ()), note=rep.NOTES.get(t)))
    return out


REPORT_FLAGS: tuple[str, ...] = ("--coverage", "--rewards", "--lengths", "--statuses", "--staleness", "--clip",
                                 "--duplicates", "--lineage")
"""The report flags the short overview names under itself (``traj stats`` without a flag)."""


def more_reports_hint(width: int = 80) -> str:
    """The lines under the short overview that point to the rest (wrapped at `width`): two at 80 columns."""
    return textwrap.fill(f"more: traj stats --all prints every report; one at a time: {', '.join(REPORT_FLAGS)}",
                         width, subsequent_indent="  ")


def _connect(store: Any, skip_unreadable: bool) -> Any:
    """The audit connection; a shard that cannot be read stops the audit (exit status 1, the shard
    named) unless `skip_unreadable`: totals that silently leave a shard's rows out would pass a
    nightly check of the exit status."""
    try:
        return audit.connect(store, strict=not skip_unreadable)
    except CorruptShardError as e:
        raise unreadable_hint(e) from None


@commands.command("stats")
@friendly_errors
def stats_cmd(
    store: StoreArgument,
    staleness: bool = typer.Option(False, "--staleness", help="trainer version - policy version of consumed "
                                   "tokens/trajectories; version spread and lag of unconsumed data"),
    clip: bool = typer.Option(False, "--clip", help="DIS masked fractions per step and staleness bucket"),
    coverage: bool = typer.Option(False, "--coverage", help="action tokens with log-probs / policy versions; "
                                  "untrainable trajectories and why"),
    rewards: bool = typer.Option(False, "--rewards", help="reward distribution per source"),
    lengths: bool = typer.Option(False, "--lengths", help="turns, action / observation tokens per source"),
    statuses: bool = typer.Option(False, "--statuses", help="trajectories per source and status"),
    duplicates: bool = typer.Option(False, "--duplicates", help="trajectory ids stored more than once"),
    all_reports: bool = typer.Option(False, "--all", help="the store's totals and every report"),
    lineage: bool = typer.Option(False, "--lineage", help="episodes, lineages per episode (sub-agents, context "
                                 "rewrites, forks, continuations) and tokens shared with a parent"),
    where: str | None = typer.Option(None, "--where", help="SQL predicate over trajectories columns, "
                                        "e.g. \"source = 'sdk' AND reward IS NOT NULL\""),
    run: str | None = typer.Option(None, "--run", help="only this training run's records"),
    fmt: FormatOption = OutputFormat.table,
    plot: str | None = typer.Option(None, "--plot", metavar="FILE.png",
                                        help="also draw the plottable reports into this PNG"),
    view_url: ViewUrlOption = None,
    skip_unreadable: SkipUnreadableOption = False,
    storage_option: StorageOptions = [],  # noqa: B006 - typer reads the default
) -> None:
    """Audit reports over a store. Without a report flag: a short overview that fits an 80x24
    terminal (totals, the largest sources, the runs that trained last) and names the flags for the
    rest; --all prints every report (--lineage: the episode / lineage report)."""
    chosen = {"staleness": staleness, "clip": clip, "coverage": coverage, "rewards": rewards,
              "lengths": lengths, "statuses": statuses, "duplicates": duplicates, "lineage": lineage}
    brief = not any(chosen.values()) and not all_reports and plot is None
    everything = all_reports or (not any(chosen.values()) and plot is not None)
    if plot is not None:  # before any work: a missing extra is one line, not tables then an error
        if not everything and not any(chosen[f.removeprefix("--")] for f in PLOTTED_FLAGS):
            raise InvalidOptionError(f"invalid option --plot: nothing to plot: it draws {', '.join(PLOTTED_FLAGS)} (or every report "
                                     "when no report flag is given); none of them is chosen")
        require_matplotlib()
        try:
            plot_out = plot_destination(plot)  # a bad destination is refused before the reports run
        except UnsupportedPlotFormat as e:
            raise InvalidOptionError(f"invalid option --plot: {e}") from None
    s = open_existing_store(store, storage_options=parse_storage_options(storage_option, store))
    if run is not None and run not in run_ids(s):
        raise audit.AuditError(f"run {run!r} not found under {s.url(RUNS_DIR)} "
                               f"(runs: {', '.join(run_ids(s)) or 'none'})")
    conn = _connect(s, skip_unreadable)
    builders = {
        "overview": lambda: audit.overview_report(conn, where=where, run=run),
        "brief": lambda: audit.brief_report(conn, where=where, run=run),
        "staleness": lambda: audit.staleness_report(conn, where=where, run=run),
        "clip": lambda: audit.clip_report(conn, where=where, run=run),
        "coverage": lambda: audit.coverage_report(conn, where=where),
        "rewards": lambda: audit.reward_report(conn, where=where),
        "lengths": lambda: audit.length_report(conn, where=where),
        "statuses": lambda: audit.status_report(conn, where=where),
        "duplicates": lambda: audit.duplicate_report(conn, where=where),
        "lineage": lambda: audit.lineage_report(conn, where=where),
    }
    wanted = {"overview", "brief"} if brief else {n for n in builders if (
        (everything and n != "lineage") or chosen.get(n, False))}
    try:
        reports = {name: build() for name, build in builders.items() if name in wanted}
        tables = report_tables(reports)
    except (duckdb.Error, audit.AuditError) as e:
        if isinstance(e, audit.AuditError) and "--where" in str(e):
            raise
        # a value of the wrong type in a row (CAST(source AS INT)) only fails while the rows are read
        with_where = f" with --where {where!r}" if where else ""
        message = one_line(str(e)).removeprefix("query failed: ")
        raise audit.AuditError(f"report query failed{with_where}: {message}") from e
    if view_url is not None:
        tables = [with_view_links(t, view_url) for t in tables]
    console = new_console()
    render_tables(tables, fmt, console=console, compact=brief)  # the overview fits an 80x24 terminal
    if brief and fmt is OutputFormat.table:  # part of the table output for people (json / csv: the tables only)
        typer.echo(more_reports_hint(console.width))
    if plot is not None:
        panels = plot_reports(reports, plot_out)  # the name really written (see plot_destination)
        typer.echo(f"wrote {plot_out} ({', '.join(panels)})", err=True)


SQL_BATCH_ROWS = 10_000
"""Rows fetched from DuckDB at a time by ``traj sql``: its memory is bounded by one batch."""
SQL_TABLE_MAX_ROWS = 1_000
"""Rows ``traj sql`` shows as a table (a table needs every row for its widths); csv / json stream all."""


def _sql_batches(rel: Any) -> Any:
    """Arrow record batches of `rel`, :data:`SQL_BATCH_ROWS` rows at a time, DuckDB errors
    (raised while rows are produced: failed casts, malformed JSON) as one-line AuditErrors."""
    try:
        reader = rel.to_arrow_reader(SQL_BATCH_ROWS)
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                return
            yield batch
    except (duckdb.Error, OSError) as e:  # past the first batch DuckDB's Arrow stream fails as a bare OSError
        raise AuditError(f"query failed: {one_line(str(e))}") from e


def _columns(rel: Any) -> list[str]:
    return list(rel.columns)


class SqlFormat(str, Enum):
    """``traj sql --format``: ``table`` for people (the first rows), the others stream every row."""

    table = "table"
    json = "json"
    csv = "csv"
    jsonl = "jsonl"
    parquet = "parquet"


def _export(rel: Any, fmt: SqlFormat, output: Path | None) -> None:
    """Stream `rel` as `fmt` to `output` (written atomically: a temp file beside it, renamed when
    complete) or to stdout, through :func:`trajstore.audit.export.write_result`."""
    if output is None:
        if fmt is SqlFormat.parquet and sys.stdout.isatty():
            raise InvalidOptionError("invalid option --format parquet: Parquet is binary: give --output FILE "
                                     "(or redirect stdout)")
        sys.stdout.flush()
        write_result(rel, fmt.value, sys.stdout.buffer, batch_rows=SQL_BATCH_ROWS)
        sys.stdout.buffer.flush()
        return
    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            rows = write_result(rel, fmt.value, fh, batch_rows=SQL_BATCH_ROWS)
        os.replace(tmp, output)
    except OSError as e:
        raise InvalidOptionError(f"invalid option --output: cannot write {output}: {os_reason(e)}") from None
    finally:
        if tmp.exists():
            tmp.unlink()
    typer.echo(f"wrote {rows:,} rows to {output}", err=True)


def _show_table(rel: Any) -> None:
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
    render_tables([TableData("result", cols, rows)], OutputFormat.table, console=new_console())
    if more:
        typer.echo(f"(showing the first {SQL_TABLE_MAX_ROWS} rows; use --limit N, or --format csv|json to "
                   "stream every row)", err=True)


@commands.command("sql")
@friendly_errors
def sql_cmd(
    store: StoreArgument,
    query: str = typer.Argument(..., help="one SELECT over the views trajectories, spans, span_logprobs, steps, "
                                "consumed, step_metrics, token_annotations"),
    fmt: Annotated[SqlFormat, typer.Option(
        "--format", help="output format: table (for people; the first 1,000 rows), json, csv, jsonl or parquet "
        "(for programs; every row, streamed through DuckDB's and Arrow's writers)", case_sensitive=False)
    ] = SqlFormat.table,
    output: Path | None = typer.Option(None, "--output", "-o", metavar="FILE", dir_okay=False,
                                       help="write the result to FILE (whole or not at all) instead of stdout"),
    limit: int | None = typer.Option(None, "--limit", min=1, help="at most N rows"),
    view_url: ViewUrlOption = None,
    skip_unreadable: SkipUnreadableOption = False,
    storage_option: StorageOptions = [],  # noqa: B006 - typer reads the default
) -> None:
    """Run one read-only SELECT against the store's DuckDB views. Rows are fetched in batches of
    10,000, so memory stays bounded however large the result; a table shows the first 1,000."""
    if not query.strip():
        raise typer.BadParameter("the query is empty (give one SELECT)", param_hint="QUERY")
    if output is not None and fmt is SqlFormat.table:
        raise InvalidOptionError("invalid option --output: a table is for the terminal; choose --format csv, json, "
                                 "jsonl or parquet")
    conn = _connect(open_existing_store(store, storage_options=parse_storage_options(storage_option, store)),
                    skip_unreadable)
    rel = audit.sql(conn, query, limit=limit)
    if view_url is not None:
        rel = with_view_link_columns(rel, view_url)
    if fmt is SqlFormat.table:
        _show_table(rel)
    else:
        _export(rel, fmt, output)

"""``traj runs``: what training left in a store (published versions, checkpoints, records) and
what it occupies; the listing comes from :func:`trajstore.trainer.loop.runs.list_runs`."""

from __future__ import annotations

import dataclasses

import typer

from trajstore.cli.app import TrajTyper
from trajstore.cli.display import OutputFormat, render_record, render_tables
from trajstore.cli.errors import friendly_errors
from trajstore.cli.options import FormatOption, StorageOptions, StoreArgument, parse_storage_options
from trajstore.store import open_existing_store
from trajstore.tables import TableData
from trajstore.trainer.loop.runs import list_runs

commands = TrajTyper()


def _size(n: int) -> str:
    """Bytes for people in binary units (``512 B``, ``6.4 KiB``, ``3.6 GiB``), as the memory plan,
    docs/benchmarks.md and bench/RESULTS.md give them (``traj runs`` printed MB / GB beside them)."""
    f = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if f < 1024 or unit == "TiB":
            return f"{f:.0f} {unit}" if unit == "B" else f"{f:.1f} {unit}"
        f /= 1024
    return f"{n} B"  # pragma: no cover


@commands.command("runs")
@friendly_errors
def runs_cmd(
    store: StoreArgument,
    fmt: FormatOption = OutputFormat.table,
    storage_option: StorageOptions = [],  # noqa: B006 - typer reads the default
) -> None:
    """Training runs in STORE: published versions, checkpoints and records, with their sizes
    (prune with `traj train --keep-versions N --keep-checkpoints N`). A damaged checkpoint or
    LATEST pointer is named on stderr, one line each."""
    report = list_runs(open_existing_store(store, storage_options=parse_storage_options(storage_option, store)))
    for r in report.runs:
        for problem in r.problems:
            typer.echo(f"warning: run {r.run_id}: {problem}", err=True)
    if fmt is OutputFormat.json:
        out = dataclasses.asdict(report)
        for r, info in zip(out["runs"], report.runs):
            r.update(versions_bytes=info.versions_bytes, checkpoints_bytes=info.checkpoints_bytes,
                     total_bytes=info.total_bytes)
        render_record("traj runs", out, fmt)
        return
    table = fmt is OutputFormat.table
    size = _size if table else (lambda n: n)
    rows = []
    for r in report.runs:
        vs = [v.version for v in r.versions]
        versions = ("-" if not vs else f"v{vs[0]}" if len(vs) == 1 else f"{len(vs)}: v{vs[0]} .. v{vs[-1]}")
        incomplete = sum(not v.complete for v in r.versions)
        if incomplete:
            versions += f" ({incomplete} incomplete)"
        ckpts = ", ".join(f"it{c.iteration}{'*' if c.latest else ''}" for c in r.checkpoints) or "-"
        rows.append((r.run_id, r.model, versions, r.latest_version, size(r.versions_bytes), ckpts,
                     size(r.checkpoints_bytes), size(r.records_bytes), size(r.total_bytes),
                     (f"{len(r.problems)} (on stderr)" if table else "; ".join(r.problems)) if r.problems else
                     ("-" if table else "")))
    unit = "" if table else "_bytes"
    columns = ["run", "model", "versions", "latest_version", "versions" + (unit or "_size"), "checkpoints",
               "checkpoints" + (unit or "_size"), "records" + (unit or "_size"), "total" + (unit or "_size"),
               "problems"]
    if table and not any(r.problems for r in report.runs):  # a column of dashes says nothing
        columns, rows = columns[:-1], [row[:-1] for row in rows]
    render_tables([TableData(f"training runs in {report.store}", columns, rows, keys=["run"],
                             empty_note="no run has trained on this store yet")], fmt)
    if table and any(c.latest for r in report.runs for c in r.checkpoints):
        typer.echo("* = the checkpoint LATEST names (what --resume continues from)")
    if table and report.tmp_bytes:
        typer.echo(f"temporary files under _tmp/: {_size(report.tmp_bytes)} (removed by the next writer or trainer "
                   "once an hour old)")

"""``traj validate``: check trajectory Parquet files, folders or stores against the schema and its
invariants (see :mod:`trajstore.validation`). Parses options, calls the library, renders."""

from __future__ import annotations

import typer

from trajstore.cli.app import TrajTyper
from trajstore.cli.display import OutputFormat, render_tables, stderr_progress
from trajstore.cli.errors import EXIT_ERROR, InvalidOptionError, friendly_errors
from trajstore.cli.options import FormatOption, StorageOptions, parse_storage_options
from trajstore.tables import TableData
from trajstore.validation import NoSuchInputError, validate_files

commands = TrajTyper()


@commands.command("validate")
@friendly_errors
def validate_cmd(
    paths: list[str] = typer.Argument(..., metavar="PATH", help="Parquet files, folders of them or stores "
                                      "(local or s3://...)"),
    fmt: FormatOption = OutputFormat.table,
    storage_option: StorageOptions = [],  # noqa: B006 - typer reads the default
) -> None:
    """Check every row against the trajectory schema of its file's version and its invariants (the
    SDK's rules): column names and types, spans ordered and covering the tokens, log-probs one per
    action token, counts and min/max policy versions that agree with the spans, statuses, ids
    stored more than once. Lists each problem with its file, row group, row and field, then a
    summary; exit status 1 when there is any. Reads one row group at a time."""
    options = parse_storage_options(storage_option, paths[0])
    with stderr_progress("validating") as advance:
        try:
            report = validate_files(paths, storage_options=options,
                                    on_file=lambda i, n, summary: advance(i, n, f"checked {summary.file}"))
        except NoSuchInputError as e:
            raise InvalidOptionError(f"no such input path: {e.path}") from None
    if not report.files:  # a mistyped folder must not pass a CI check; no tables saying "no problems" above it
        typer.echo(f"error: no Parquet files under {', '.join(paths)}", err=True)
        raise typer.Exit(EXIT_ERROR)
    listed = len(report.problems)
    render_tables([
        TableData("validate.problems", ["file", "row_group", "row", "trajectory_id", "field", "problem", "rule"],
                  [(p.file, p.row_group, p.row, p.trajectory_id, p.field, p.message, p.rule) for p in report.problems],
                  keys=["file", "row_group", "row"], wrap=["problem"], empty_note="no problems",
                  note=None if listed == report.num_problems else
                  f"first {listed} of {report.num_problems} problems listed"),
        TableData("validate.files", ["file", "schema_version", "row_groups", "rows", "rows_checked",
                                     "rows_with_problems", "problems"],
                  [(f.file, f.schema_version, f.row_groups, f.rows, f.rows_checked, f.rows_with_problems, f.problems)
                   for f in report.files], keys=["file"]),
        TableData("validate.by_field", ["rule", "field", "problems"],
                  [(rule, field, n) for (rule, field), n in sorted(report.by_field.items())],
                  keys=["rule", "field"], empty_note="no problems"),
    ], fmt)
    if listed < report.num_problems:
        typer.echo(f"note: {report.num_problems} problems, the first {listed} listed", err=True)
    unreadable = [p for p in report.problems if p.rule == "read"]
    if fmt == OutputFormat.table:  # whole lines: a table cell may shorten the file or split the reason
        for p in unreadable:
            where = "" if p.row_group is None else f" (row group {p.row_group})"
            typer.echo(f"unreadable: {p.file}{where}: {p.message}", err=True)
    if not report.ok:
        unchecked = report.rows - report.rows_checked
        n_files = len(report.files)
        typer.echo(f"error: {report.num_problems} problem{'s' if report.num_problems != 1 else ''} in "
                   f"{report.rows_with_problems} of {report.rows} rows ({n_files} file{'s' if n_files != 1 else ''}"
                   + (f"; {len({p.file for p in unreadable})} not readable, named above" if unreadable else "")
                   + (f"; {unchecked} rows not checked: unreadable or not of the schema" if unchecked else "")
                   + ")", err=True)
        raise typer.Exit(EXIT_ERROR)

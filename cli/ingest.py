"""``traj ingest``: agent logs -> store (thin wrapper over :func:`trajstore.ingest.ingest_paths`).

Exit status (the same scheme as every command, see :mod:`trajstore.cli.main`): 0 when every
record was stored or deliberately skipped (already stored, a duplicate, a file that holds no
trajectory); 1 when some record was refused (malformed, invalid, unsupported: all other records
are stored first, each refusal listed) and for an error (``--strict`` found a problem: nothing stored; the store cannot
be written); 2 for usage errors (unknown option value, missing input path).
"""

from __future__ import annotations

import csv
import json
import os
import sys
import time
from enum import Enum
from typing import Any

import typer

from trajstore.cli.app import TrajTyper
from trajstore.cli.display import OutputFormat, render_record
from trajstore.cli.errors import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_REFUSED, InvalidOptionError, friendly_errors
from trajstore.cli.options import StorageOptions, StoreArgument, parse_storage_options
from trajstore.ingest import IngestError, IngestInterrupted, ingest_paths
from trajstore.ingest.formats.registry import FORMAT_HELP, FORMATS
from trajstore.ingest.summary import REFUSING_KINDS, summary_notes
from trajstore.store import open_store_for_writing

commands = TrajTyper()

PROGRESS_DELAY_S = 0.5
"""The progress bar appears only once an ingest has run this long (seconds)."""

InputFormatChoice = Enum("InputFormatChoice", {n: n for n in ("auto", *FORMATS)}, type=str)  # type: ignore[misc]
"""``--input-format`` values: ``auto`` or one of :data:`trajstore.ingest.FORMATS`."""

_INPUT_FORMAT_HELP = ("input format, detected per record when 'auto': "
                      + "; ".join(f"{name} ({FORMAT_HELP[name]})" for name in FORMATS))


class _LazyProgress:
    """A rich progress bar (files, records, tokens) on stderr that starts only when the ingest
    has run for :data:`PROGRESS_DELAY_S` and stderr is a terminal."""

    def __init__(self, enabled: bool):
        # here, not at import: rich adds to every command's start-up (and most ingests end before the delay)
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.t0 = time.monotonic()
        console = Console(stderr=True)
        self.enabled = enabled and console.is_terminal
        self.prog = Progress(TextColumn("ingesting"), BarColumn(), MofNCompleteColumn(), TextColumn("files"),
                             TextColumn("{task.fields[records]:,} records  {task.fields[tokens]:,} tokens  "
                                        "{task.fields[refused]:,} refused"), TimeElapsedColumn(),
                             console=console, transient=True)
        self.task = self.prog.add_task("ingest", total=None, records=0, tokens=0, refused=0)
        self.started = False

    def __call__(self, p: Any) -> None:
        if not self.enabled:
            return
        if not self.started and time.monotonic() - self.t0 >= PROGRESS_DELAY_S:
            self.prog.start()
            self.started = True
        self.prog.update(self.task, completed=p.files_done, total=p.files_total, records=p.records,
                         tokens=p.tokens, refused=p.refused)

    def stop(self) -> None:
        if self.started:
            self.prog.stop()


def _summary_rows(report: Any) -> list[tuple[str, int]]:
    """The summary: what was refused (exit status 1, each listed on stderr as ``refused``) kept
    apart from what was deliberately skipped (exit status 0, listed as ``skipped``)."""
    rows = [("files seen", report.files_seen), ("trajectories parsed", report.trajectories_parsed),
            ("trajectories written", report.trajectories_written), ("records refused", report.refused)]
    rows += [(f"refused: {kind}", n) for kind, n in sorted(report.refused_by_kind.items())]
    rows += [(f"skipped: {reason}", n) for reason, n in sorted(report.skipped.items())]
    if report.skipped_inputs:
        rows.append(("skipped: no_trajectory (input holding none)", report.skipped_inputs))
    rows += [(f"files ignored: {sfx}", n) for sfx, n in sorted(report.ignored_files.items())]
    if report.truncated_observations:
        rows.append(("observations truncated", report.truncated_observations))
    if report.degraded_events:
        rows.append(("unknown events degraded", report.degraded_events))
    if report.engine_ids_discarded:  # also a fidelity flag: listed once, under its one name
        rows.append(("engine_ids_discarded (engine token ids not used: re-tokenized)", report.engine_ids_discarded))
    rows += [(f"not faithful: {flag}", n) for flag, n in sorted(report.fidelity_gaps.items())
             if flag != "engine_ids_discarded"]
    return rows


_HELP = (
    "Ingest agent logs (OpenHands V0/V1, SWE-agent, mini-swe-agent, tau-bench, ATIF, NeMo Gym, verl dumps, "
    "published datasets as JSON, JSONL or Parquet; trajectory Parquet in trajstore's schema written elsewhere, "
    "each row checked as traj validate checks it) into STORE.\n\n"
    "Each malformed file, line, row or event is reported with path, line and reason, and the rest is still "
    "ingested (--strict makes any problem fatal). Re-ingesting the same logs adds nothing.\n\n"
    "Exit status: 0 = every record stored or deliberately skipped; 1 = some record refused (all others "
    "stored, each refusal listed) or an error (--strict found a problem: nothing stored; the store cannot be "
    "written); 2 = usage error."
)


@commands.command("ingest", help=_HELP)
@friendly_errors
def ingest_cmd(
    store: StoreArgument,
    paths: list[str] = typer.Argument(..., metavar="PATH",
                                      help="log files or directories (searched for .json, .jsonl, .traj, .parquet)"),
    input_format: InputFormatChoice = typer.Option("auto", "--input-format", metavar="NAME", show_choices=False,
                                                   help=_INPUT_FORMAT_HELP),
    tokenizer: str = typer.Option("smollm2-135m", "--tokenizer",
                                  help="tokenizer + chat template for text-only logs (alias, .gguf or HF dir)"),
    strict: bool = typer.Option(False, "--strict/--no-strict",
                                help="fail (exit 1, nothing written) on any problem in the input"),
    max_observation_chars: int = typer.Option(200_000, "--max-observation-chars",
                                              help="cap each observation at this many characters (0 = no cap)"),
    fmt: str = typer.Option("table", "--format", help="summary output: table | json | csv"),
    engine_tokenizer: str | None = typer.Option(None, "--engine-tokenizer",
                                                   help="tokenizer that engine token ids in the logs belong to when "
                                                   "the log does not name it ('model' = each rollout's model name); "
                                                   "without it such rollouts are stored as not trainable"),
    train_reconstructed_actions: bool = typer.Option(
        False, "--train-reconstructed-actions/--no-train-reconstructed-actions",
        help="store model actions that the log keeps only as a parsed or reformatted version (metadata "
             "fidelity_gaps.action_text, e.g. Terminus-2 ATIF, prompt-based OpenHands V0) as trainable; by "
             "default they are stored with trainable = false, as the text is a reconstruction, not the model's "
             "own tokens"),
    storage_option: StorageOptions = [],  # noqa: B006 - typer reads the default
) -> None:
    """See :data:`_HELP`."""
    from rich.console import Console  # here, not at import: rich adds to every command's start-up
    from rich.markup import escape

    fmt = fmt.lower()  # case-insensitive, as --format is on every other command (`traj stats --format JSON`)
    if fmt not in {f.value for f in OutputFormat}:
        hint = (f" ({fmt!r} is an input format: use --input-format {fmt})" if fmt in FORMATS else "")
        raise InvalidOptionError(f"invalid option --format: {fmt!r} is not an output format: table | json | csv{hint}")
    if max_observation_chars < 0:
        raise InvalidOptionError(f"invalid option --max-observation-chars: must be >= 0 (0 = no cap), "
                                 f"got {max_observation_chars}")
    missing = [p for p in paths if "://" not in p and not os.path.exists(p)]
    if missing:
        raise InvalidOptionError(f"no such input path: {', '.join(missing)}")
    storage_options = parse_storage_options(storage_option or [], store)
    open_store_for_writing(store, command="traj ingest", storage_options=storage_options)  # before anything is read
    err = Console(stderr=True)
    bar = _LazyProgress(enabled=fmt == "table")
    try:
        report = ingest_paths(paths, store, input_format=input_format.value, tokenizer=tokenizer, strict=strict,
                              max_observation_chars=max_observation_chars or None,
                              engine_tokenizer=engine_tokenizer,
                              train_reconstructed_actions=train_reconstructed_actions,
                              storage_options=storage_options, progress=bar)
    except IngestInterrupted as e:  # Ctrl-C: say what the store now holds (typer would exit 130 silently)
        bar.stop()
        n = e.report.trajectories_written
        stored = (f"this ingest stored {n} trajector{'y' if n == 1 else 'ies'} before it, each whole"
                  if n else "nothing was stored")
        typer.echo(f"interrupted: {stored} (shards appear atomically, so nothing partial was written); "
                   "run the same ingest again to add the rest", err=True)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except IngestError as e:
        bar.stop()
        if fmt == "json":
            typer.echo(json.dumps({**e.report.to_dict(), "failed": True}, indent=2))
        if os.environ.get("TRAJ_TRACEBACK"):
            raise
        # one line per problem, as without --strict (the exception's own text joins them into one)
        problems = e.report.problems
        typer.echo(f"error: strict ingest: {len(problems)} problem(s) in the input, nothing written:", err=True)
        for p in problems:
            tag = "refused" if p.kind in REFUSING_KINDS else "skipped"
            typer.echo(f"  {tag} {p}", err=True)
        raise typer.Exit(EXIT_ERROR) from None
    bar.stop()
    if fmt == "json":
        typer.echo(json.dumps(report.to_dict(), indent=2))
    elif fmt == "csv":
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(["metric", "value"])
        w.writerows(_summary_rows(report))
    else:  # the shared renderer, as every command's tables
        render_record("traj ingest", dict(_summary_rows(report)), "table")
    if fmt != "json":
        for p in report.problems:
            tag = "refused" if p.kind in REFUSING_KINDS else "skipped"
            err.print(f"[yellow]{tag}[/yellow] {escape(str(p))}", markup=True, highlight=False, soft_wrap=True)
    if fmt == "table":  # what the summary's lines mean, after the inputs they name
        for line in summary_notes(report):
            err.print(line, markup=False, highlight=False, soft_wrap=True)
    if report.refused:
        raise typer.Exit(EXIT_REFUSED)

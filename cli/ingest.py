"""``traj ingest``: agent logs -> store (thin wrapper over :func:`trajstore.ingest.ingest_paths`)."""

from __future__ import annotations

import json
import os
from typing import Optional

import typer

from trajstore.cli.audit import parse_storage_options
from trajstore.cli.main import app, friendly_errors


@app.command("ingest")
@friendly_errors
def ingest_cmd(
    paths: list[str] = typer.Argument(..., help="log files or directories (searched for .json, .jsonl, .traj)"),
    store: str = typer.Option(..., "--store", help="store URI: local directory or s3://bucket/prefix"),
    input_format: str = typer.Option("auto", "--format", help="input format: auto (detect per file) or one of "
                                     "trajstore.ingest.FORMATS, e.g. openhands-v0-eval, swe-agent, nemo-gym"),
    tokenizer: str = typer.Option("smollm2-135m", "--tokenizer",
                                  help="tokenizer + chat template for text-only logs (alias, .gguf or HF dir)"),
    strict: bool = typer.Option(False, "--strict", help="fail (exit 1, nothing written) on any malformed input"),
    max_observation_chars: int = typer.Option(200_000, "--max-observation-chars",
                                              help="cap each observation at this many characters (0 = no cap)"),
    output: str = typer.Option("table", "--output", help="summary as 'table' or 'json' (for scripts); --format "
                               "selects the input format, so the summary format is --output"),
    engine_tokenizer: Optional[str] = typer.Option(None, "--engine-tokenizer",
                                                   help="tokenizer that engine token ids in the logs belong to when "
                                                   "the log does not name it ('model' = each rollout's model name); "
                                                   "without it such rollouts are stored as not trainable"),
    storage_option: Optional[list[str]] = typer.Option(None, "--storage-option",
                                                       help="fsspec option key=value (repeatable)"),
) -> None:
    """Ingest OpenHands (V0, V1), SWE-agent, nebius and NeMo Gym logs into a store.

    Malformed files, lines or events are reported with path, line and reason; the rest is still
    ingested (``--strict`` makes any problem fatal). Re-ingesting the same logs adds nothing.
    """
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from trajstore.ingest import IngestError, ingest_paths

    if output not in ("table", "json"):
        raise typer.BadParameter("--output must be 'table' or 'json'")
    if max_observation_chars < 0:
        raise typer.BadParameter(f"--max-observation-chars must be >= 0 (0 = no cap), got {max_observation_chars}")
    missing = [p for p in paths if "://" not in p and not os.path.exists(p)]
    if missing:
        raise FileNotFoundError(f"no such input path: {', '.join(missing)}")
    err = Console(stderr=True)
    with Progress(console=err, transient=True, disable=output == "json" or not err.is_terminal) as prog:
        task = prog.add_task("ingesting", total=None)
        try:
            report = ingest_paths(paths, store, format=input_format, tokenizer=tokenizer, strict=strict,
                                  max_observation_chars=max_observation_chars or None,
                                  engine_tokenizer=engine_tokenizer,
                                  storage_options=parse_storage_options(storage_option or []),
                                  progress=lambda done, total: prog.update(task, completed=done, total=total))
        except IngestError as e:
            if output == "json":
                typer.echo(json.dumps({**e.report.to_dict(), "failed": True}, indent=2))
            raise
    if output == "json":
        typer.echo(json.dumps(report.to_dict(), indent=2))
        return
    out = Console()
    t = Table(title="traj ingest", show_header=False)
    t.add_row("files seen", str(report.files_seen))
    t.add_row("trajectories parsed", str(report.trajectories_parsed))
    t.add_row("trajectories written", str(report.trajectories_written))
    for reason, n in sorted(report.skipped.items()):
        t.add_row(f"skipped: {reason}", str(n))
    for kind, n in sorted(report.to_dict()["problems_by_kind"].items()):
        t.add_row(f"problems: {kind}", str(n))
    if report.truncated_observations:
        t.add_row("observations truncated", str(report.truncated_observations))
    if report.degraded_events:
        t.add_row("unknown events degraded", str(report.degraded_events))
    if report.engine_ids_discarded:
        t.add_row("engine token ids discarded (re-tokenized)", str(report.engine_ids_discarded))
    for flag, n in sorted(report.fidelity_gaps.items()):
        t.add_row(f"not faithful: {flag}", str(n))
    out.print(t)
    for p in report.problems:
        err.print(f"[yellow]skipped[/yellow] {p}", markup=True, highlight=False, soft_wrap=True)

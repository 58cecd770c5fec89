"""``traj export``: write the selected trajectories of a store in another trainer's batch layout,
as a Hugging Face dataset folder, or as ATIF (see :mod:`trajstore.export`). Parses options, calls
:func:`trajstore.export.export_store`, renders its summary."""

from __future__ import annotations

import sys
from enum import Enum

import typer

from trajstore.cli.app import TrajTyper
from trajstore.cli.display import OutputFormat, render_record, stderr_progress
from trajstore.cli.errors import EXIT_ERROR, InvalidOptionError, friendly_errors
from trajstore.cli.options import FormatOption, StorageOptions, StoreArgument, parse_storage_options
from trajstore.export import DEFAULT_ROWS_PER_FILE, FIELDS, TARGETS, ExportOptions, ExportResult, export_store

commands = TrajTyper()

FieldChoice = Enum("FieldChoice", {n: n for n in FIELDS}, type=str)  # type: ignore[misc]
"""``--without`` values: :data:`trajstore.export.FIELDS`."""

_TO_HELP = ("target: " + " | ".join(TARGETS) + " (trainer batch layouts; hf: a Hugging Face dataset folder with a card; "
            "atif: ATIF trajectory.json files; otlp: OpenTelemetry traces as OTLP/JSON, --endpoint sends them)")


@commands.command("export")
@friendly_errors
def export_cmd(
    store: StoreArgument,
    to: str = typer.Option(..., "--to", metavar="TARGET", help=_TO_HELP),
    out: str = typer.Option(..., "--output", "-o", metavar="DIR", help="output folder (new or empty; appears complete "
                            "or not at all)"),
    where: str | None = typer.Option(None, "--where", help="SQL predicate over trajectories columns, as traj stats "
                                     "takes it, e.g. \"status = 'completed' AND reward IS NOT NULL\""),
    run: str | None = typer.Option(None, "--run", help="only the trajectories this training run consumed"),
    limit: int | None = typer.Option(None, "--limit", min=1, help="at most N trajectories, the first in arrival "
                                     "order"),
    skip_refused: bool = typer.Option(False, "--skip-refused/--no-skip-refused",
                                      help="leave out (and count) trajectories the target cannot take as they are "
                                      "instead of stopping at the first"),
    skip_unreadable: bool = typer.Option(False, "--skip-unreadable/--no-skip-unreadable",
                                         help="export a store with shards that cannot be read (truncated, not "
                                         "Parquet) without their trajectories, listing the shards in the manifest "
                                         "and the card; by default the export is refused, naming them (traj "
                                         "validate STORE shows them)"),
    allow_secrets: bool = typer.Option(False, "--allow-secrets/--no-allow-secrets",
                                       help="write even when traj redact STORE --dry-run would fail on the selected "
                                       "trajectories (a secret found, or spans that cannot be scanned); by default "
                                       "the export is refused, naming them, and nothing is written"),
    include_not_trainable: bool = typer.Option(False, "--include-not-trainable/--no-include-not-trainable",
                                               help="trainer layouts: also write trajectories stored as not "
                                               "trainable (trainable = false: no action token, an unnamed engine "
                                               "tokenizer, a redacted context, ...); by default they are left out "
                                               "and counted per reason (hf and atif keep every trajectory, "
                                               "flagged)"),
    without: list[FieldChoice] = typer.Option([], "--without", metavar="FIELD", show_choices=False,  # noqa: B006
                                              help="trainer layouts: leave this field out of the whole export so trajectories "
                                              f"lacking it are taken: {' | '.join(FIELDS)} (repeatable)"),
    pad_token_id: int = typer.Option(0, "--pad-token-id", help="token id written in padded positions "
                                     "(masked out)"),
    rows_per_file: int = typer.Option(DEFAULT_ROWS_PER_FILE, "--rows-per-file", min=1,
                                      help="trajectories per output file (each padded to its own longest)"),
    name: str | None = typer.Option(None, "--name", help="hf: the dataset's name on its card (default: the folder's)"),
    license: str | None = typer.Option(None, "--license", help="hf: the card's licence id, e.g. cc-by-4.0 "
                                       "(default: 'other', marked to fill)"),
    push: str | None = typer.Option(None, "--push", metavar="REPO", help="hf: then upload the folder to this Hub "
                                    "dataset repository (needs a token: HF_TOKEN or huggingface-cli login)"),
    private: bool = typer.Option(True, "--private/--public", help="hf --push: create the repository private"),
    endpoint: str | None = typer.Option(None, "--endpoint", metavar="URL", help="otlp: also send the traces to "
                                        "this OTLP/HTTP traces endpoint, e.g. http://localhost:4318/v1/traces"),
    dry_run: bool = typer.Option(False, "--dry-run/--no-dry-run", help="write (and upload) nothing: list every blocker, each "
                                 "with its count and the options that lift it, and what would be written (with "
                                 "--push: what would be created and uploaded); exit 1 when something blocks"),
    fmt: FormatOption = OutputFormat.table,
    storage_option: StorageOptions = [],  # noqa: B006 - typer reads the default
) -> None:
    """Export trajectories to another trainer (verl, slime, SkyRL, TRL, AReaL, OpenRLHF: each in its own
    batch layout, loss mask explicit, log-probs 0.0 only where the mask is 0), a Hugging Face dataset
    folder with a generated card (--push uploads it), ATIF with token ids and log-probs, or
    OpenTelemetry traces (--to otlp; --endpoint sends them). A trajectory lacking what the layout
    holds (engine log-probs, a reward, policy versions) stops the export: leave the field out with
    --without, or the trajectory with --skip-refused. Trainer layouts leave out (and count)
    trajectories stored as not trainable unless --include-not-trainable. Nothing is written while
    traj redact --dry-run would find a secret in the trajectories that would be exported (or could
    not scan them), unless --allow-secrets. Every blocker is named at once with its count and the
    options that lift it; --dry-run lists them without writing. The folder's
    .trajstore/export.json says what was written and how to load it."""
    if to not in TARGETS:  # checked here, not by click, so that every option's usage error reads the same
        raise InvalidOptionError(f"invalid option --to: {to!r} is not one of {', '.join(TARGETS)}")

    opts = ExportOptions(where=where, run=run, limit=limit, skip_refused=skip_refused,
                         skip_unreadable=skip_unreadable,
                         include_not_trainable=include_not_trainable, allow_secrets=allow_secrets,
                         without=frozenset(f.value for f in without), pad_token_id=pad_token_id,
                         rows_per_file=rows_per_file, name=name, license=license, push=push, private=private,
                         dry_run=dry_run, endpoint=endpoint)
    # a bar only for a person watching: not in JSON output, not into a pipe or a log
    with stderr_progress(f"export {to}", disable=fmt != OutputFormat.table or not sys.stderr.isatty()) as advance:
        r = export_store(store, to, out, opts, storage_options=parse_storage_options(storage_option, store),
                         progress=lambda stage, done, total: advance(done - 1, total, f"{stage} {done}/{total}"))
    if r.dry_run:
        _render_dry_run(r, fmt)
        return
    render_record(f"export {r.target}", {
        "target": r.target, "out": r.out, "selected": r.selected, "exported": r.exported,
        "skipped": dict(sorted(r.skipped.items())),
        "not_trainable_left_out": dict(sorted(r.not_trainable_left_out.items())), "left_out": r.left_out,
        "files": len(r.files),
        "approximations": {k: v for k, v in sorted(r.approximations.items()) if v},
        **({"unreadable_shards_skipped": {u: "rows unknown" if n is None else n
                                          for u, n in sorted(r.unreadable_skipped.items())}}
           if r.unreadable_skipped else {}),
        **({"pushed": r.pushed} if r.pushed else {}),
        **({"sent_spans": r.sent_spans} if endpoint else {}),
    }, fmt)
    if r.not_trainable_left_out:
        typer.echo(f"note: left out {sum(r.not_trainable_left_out.values())} of {r.selected} trajectories stored as "
                   "not trainable (" + ", ".join(f"{n} {why}" for why, n in sorted(r.not_trainable_left_out.items()))
                   + "); --include-not-trainable writes them", err=True)
    if r.unreadable_skipped:
        typer.echo(f"note: left out {len(r.unreadable_skipped)} unreadable shard(s) (--skip-unreadable): "
                   + ", ".join(sorted(r.unreadable_skipped)), err=True)
    if r.skipped:
        typer.echo(f"note: left out {sum(r.skipped.values())} of {r.selected} trajectories (" + ", ".join(
            f"{n} {why}" for why, n in sorted(r.skipped.items())) + ")", err=True)


def _render_dry_run(r: ExportResult, fmt: OutputFormat) -> None:
    """What a dry run found: every blocker (kind, count, the options that lift it, the first case),
    what would be written and left out, and with --push what would be created and uploaded; exit
    status 1 when something blocks."""
    render_record(f"export {r.target} (dry run: nothing written)", {
        "target": r.target, "selected": r.selected, "would_export": r.exported,
        "blockers": [{"kind": b.kind, "count": b.count, "lifted_by": " or ".join(b.options), "first": b.detail}
                     for b in r.blockers] if fmt != OutputFormat.table else
                    {b.kind: f"{b.count}, lifted by {' or '.join(b.options)}" for b in r.blockers} or "none",
        "would_skip": dict(sorted(r.skipped.items())),
        "not_trainable_left_out": dict(sorted(r.not_trainable_left_out.items())),
        **({"unreadable_shards_skipped": {u: "rows unknown" if n is None else n
                                          for u, n in sorted(r.unreadable_skipped.items())}}
           if r.unreadable_skipped else {}),
        **({"push": r.push_plan} if r.push_plan else {}),
    }, fmt)
    for b in r.blockers:
        typer.echo(f"{b.kind}: {b.detail}", err=True)
    if r.blockers:
        flags = sorted({b.options[0] for b in r.blockers})
        typer.echo(f"blocked: {len(r.blockers)} blocker(s); run again with any option of each, e.g. "
                   + " ".join(flags), err=True)
        raise typer.Exit(EXIT_ERROR)

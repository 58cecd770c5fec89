"""``traj redact``: find secrets and personal data in a store's trajectories (``--check``) or
rewrite the shards that hold some (see :mod:`trajstore.redact`). Parses options, calls the
library, renders."""

from __future__ import annotations

from pathlib import Path

import typer
from pydantic import ValidationError

from trajstore.cli.app import TrajTyper
from trajstore.cli.display import OutputFormat, render_tables, stderr_progress
from trajstore.cli.errors import EXIT_ERROR, InvalidOptionError, friendly_errors, invalid_options
from trajstore.cli.options import FormatOption, StorageOptions, StoreArgument, parse_storage_options
from trajstore.redact import RedactConfig, find_secrets, redact_store
from trajstore.store import open_existing_store
from trajstore.tables import TableData

commands = TrajTyper()


def redact_config(patterns: list[str], allow: list[str], allow_file: Path | None, default_allow: bool,
                  entropy: bool, keep_trainable: bool, tokenizer: str | None) -> RedactConfig:
    """The redaction config of the command's options.

    Raises:
        InvalidOptionError: a ``--pattern`` without ``NAME=``, a bad name or regex, an unreadable
            ``--allow-file``.
    """
    named = {}
    for item in patterns:
        name, sep, rx = item.partition("=")
        if not sep or not name:
            raise InvalidOptionError(f"invalid option --pattern: expected NAME=REGEX (got {item!r})")
        named[name] = rx
    allowed = list(allow)
    if allow_file is not None:
        try:
            lines = allow_file.read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise InvalidOptionError(f"invalid option --allow-file: cannot read {allow_file}: {e.strerror}") from None
        allowed += [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    try:
        return RedactConfig(patterns=named, allow=allowed, default_allow=default_allow, entropy=entropy,
                            keep_trainable=keep_trainable, tokenizer=tokenizer)
    except ValidationError as e:
        raise invalid_options(e, {"patterns": "--pattern", "allow": "--allow"}) from None


@commands.command("redact")
@friendly_errors
def redact_cmd(
    store: StoreArgument,
    check: bool = typer.Option(False, "--check/--no-check", help="only list what would be redacted (trajectory, "
                               "span, kind, a masked excerpt); exit status 1 if anything is found or cannot be "
                               "scanned"),
    pattern: list[str] = typer.Option([], "--pattern", metavar="NAME=REGEX", help="an extra detector: the "
                                      "secret is the regex's group 'secret', else group 1, else the whole match; "
                                      "NAME is written in the marker [REDACTED:NAME] (repeatable)",
                                      show_default=False),
    allow: list[str] = typer.Option([], "--allow", metavar="REGEX", help="leave a match alone when its whole "
                                    "text matches REGEX (repeatable)", show_default=False),
    allow_file: Path | None = typer.Option(None, "--allow-file", metavar="FILE", help="more --allow regexes, "
                                           "one per line (# comments)"),
    default_allow: bool = typer.Option(True, "--default-allow/--no-default-allow", help="also allow the "
                                       "built-in list: git@github.com and the like, openhands@all-hands.dev, "
                                       "addresses at example domains"),
    entropy: bool = typer.Option(False, "--entropy/--no-entropy", help="also flag quoted high-entropy strings "
                                 "(detect-secrets' plugins; noisy: hashes in code are flagged too)"),
    keep_trainable: bool = typer.Option(False, "--keep-trainable/--no-keep-trainable", help="a trajectory whose "
                                        "actions only had their context changed stays trainable (their log-probs "
                                        "were sampled under the original text); one whose action held a secret "
                                        "never does"),
    tokenizer: str | None = typer.Option(None, "--tokenizer", help="tokenizer for trajectories that record "
                                         "none (engine ids of an unnamed tokenizer)"),
    fmt: FormatOption = OutputFormat.table,
    storage_option: StorageOptions = [],  # noqa: B006 - typer reads the default
) -> None:
    """Scrub secrets and personal data (API keys and tokens, private keys, e-mail addresses, your
    --pattern) from a store's trajectories: token spans, metadata and raw rewards. Each secret's
    tokens are replaced by the tokens of [REDACTED:<kind>] from the trajectory's own tokenizer;
    spans and log-probs stay aligned, trajectories whose actions saw the change are marked not
    trainable, every change is recorded in the trajectory's metadata, and only the shards
    involved are rewritten, each atomically. --check lists what would change."""
    config = redact_config(pattern, allow, allow_file, default_allow, entropy, keep_trainable, tokenizer)
    s = open_existing_store(store, storage_options=parse_storage_options(storage_option, store))
    done = "scanned" if check else "redacted"
    with stderr_progress("scanning shards" if check else "redacting shards") as advance:
        result = (find_secrets if check else redact_store)(
            s, config=config, on_shard=lambda shard, i, n: advance(i, n, f"{done} {shard.name}"))
    unscanned = TableData("redact.unscanned", ["trajectory_id", "shard", "row", "reason"],
                          [(u.trajectory_id, u.shard, u.row, u.reason) for u in result.unscanned],
                          keys=["trajectory_id", "shard", "row"], wrap=["reason"],
                          empty_note="every trajectory's spans were scanned")
    if check:
        render_tables([TableData("redact.findings", ["trajectory_id", "row", "where", "kind", "excerpt"],
                                 [(f.trajectory_id, f.row, f.location, f.kind, f.excerpt) for f in result.findings],
                                 keys=["trajectory_id", "row", "where"], wrap=["excerpt"],
                                 empty_note="no secret found"), unscanned], fmt)
        if not result.clean:
            parts = []
            if result.findings:
                kinds = ", ".join(f"{k} {n}" for k, n in result.by_kind().items())
                hit = len({(f.shard, f.row) for f in result.findings})
                parts.append(f"{len(result.findings)} secret(s) in {hit} of {result.trajectories} trajectories "
                             f"({kinds}); traj redact {store} rewrites them")
            if result.unscanned:
                parts.append(f"{len(result.unscanned)} trajectories or shards not scanned (redact.unscanned says why)")
            typer.echo("error: " + "; ".join(parts), err=True)
            raise typer.Exit(EXIT_ERROR)
        return
    render_tables([
        TableData("redact.changes", ["trajectory_id", "row", "where", "kind", "tokens", "new_tokens"],
                  [(c.trajectory_id, c.row, c.location, c.kind, c.tokens and list(c.tokens),
                    c.new_tokens and list(c.new_tokens)) for c in result.changes],
                  keys=["trajectory_id", "row", "where"], empty_note="no secret found: nothing rewritten"),
        unscanned,
        TableData("redact.summary", ["store", "shards", "shards_rewritten", "trajectories", "trajectories_redacted",
                                     "made_not_trainable", "secrets_replaced"],
                  [(result.store, result.shards, len(result.shards_rewritten), result.trajectories,
                    result.trajectories_redacted, result.made_not_trainable, len(result.changes))], keys=["store"]),
    ], fmt)
    if result.unscanned:
        typer.echo(f"error: {len(result.unscanned)} trajectories or shards could not be scanned (listed in "
                   "redact.unscanned); their metadata and raw rewards were scrubbed, their token spans were not",
                   err=True)
        raise typer.Exit(EXIT_ERROR)

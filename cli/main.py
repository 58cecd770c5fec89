"""The ``traj`` command: thin wrappers that parse options, call the library and render.

Known errors print one line (``TRAJ_TRACEBACK=1`` shows the traceback). Each command group
lives in its own module and registers itself on :data:`app`.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from trajstore.errors import TrajstoreError, one_line

app = typer.Typer(
    name="traj",
    help="trajstore: trajectory data platform and SAO trainer for asynchronous agentic RL.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

F = TypeVar("F", bound=Callable[..., Any])


def friendly_errors(fn: F) -> F:
    """Turn known errors into one clear line on stderr and exit code 1 (2 for bad usage)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (TrajstoreError, FileNotFoundError, ValueError) as e:
            if os.environ.get("TRAJ_TRACEBACK"):
                raise
            typer.echo(f"error: {one_line(str(e))}", err=True)
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def open_existing_store(uri: str, storage_options: dict[str, Any] | None = None) -> Any:
    """Open a store that a read-only command inspects: a local directory or remote prefix
    that does not exist is an error (a mistyped path, prefix or bucket would otherwise audit an
    empty store without a word)."""
    from trajstore.errors import StoreError
    from trajstore.store import open_store

    s = open_store(uri, storage_options=storage_options)
    if not s.exists():
        what = "the directory does not exist" if s.is_local else "nothing is stored under that prefix"
        raise StoreError(f"no store at {s.uri}: {what}")
    return s


@app.command("schema")
@friendly_errors
def schema_cmd() -> None:
    """Print the JSON description of the trajectory schema (what schemas/ holds)."""
    from trajstore.schema import schema_json

    sys.stdout.write(schema_json())


@app.command("info")
@friendly_errors
def info_cmd(
    store: str = typer.Argument(..., help="store URI (local path or s3://bucket/prefix)"),
    storage_option: list[str] = typer.Option([], "--storage-option", help="fsspec option key=value (repeatable)"),
) -> None:
    """Shards, trajectories and duplicates in a store (unreadable shards named once on stderr)."""
    import json

    from trajstore.cli.audit import parse_storage_options
    from trajstore.reader import summarize_store

    s = summarize_store(open_existing_store(store, parse_storage_options(storage_option)))
    for message in s.skipped:
        typer.echo(f"warning: {message}", err=True)
    typer.echo(json.dumps({
        "store": s.store, "shards": s.shards, "trajectories": s.trajectories, "tokens": s.tokens,
        "duplicates_dropped": s.duplicates_dropped, "skipped_shards": len(s.skipped),
        "schema_versions": {f"v{k}": n for k, n in sorted(s.schema_versions.items())},
    }, indent=2))


# Command groups register themselves on `app` when imported.
from trajstore.cli import commands  # noqa: E402,F401


def main() -> None:  # pragma: no cover - console entry
    app()

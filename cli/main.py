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

from trajstore.errors import TrajstoreError

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
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


@app.command("schema")
@friendly_errors
def schema_cmd() -> None:
    """Print the JSON description of the trajectory schema (what schemas/ holds)."""
    from trajstore.schema import schema_json

    sys.stdout.write(schema_json())


@app.command("info")
@friendly_errors
def info_cmd(store: str = typer.Argument(..., help="store URI (local path or s3://bucket/prefix)")) -> None:
    """Shards, trajectories and duplicates in a store."""
    import json

    from trajstore.reader import count_duplicates, read_trajectories
    from trajstore.store import open_store

    s = open_store(store)
    shards = s.list_shards()
    t = read_trajectories(s, columns=["num_tokens"])
    typer.echo(json.dumps({
        "store": s.uri, "shards": len(shards), "trajectories": t.num_rows,
        "tokens": int(sum(t.column("num_tokens").to_pylist())), "duplicates_dropped": count_duplicates(s),
    }, indent=2))


# Command groups register themselves on `app` when imported.
from trajstore.cli import commands  # noqa: E402,F401


def main() -> None:  # pragma: no cover - console entry
    app()

"""The ``traj`` command: thin wrappers that parse options, call one library function and render.

Conventions every command follows (``tests/cli/test_conventions.py`` checks them on every
registered command, so new commands inherit them by using what is defined here):

- **Register** on :data:`app` (or on a sub-app made with :class:`TrajTyper`), so that usage lines
  read ``traj stats [OPTIONS] STORE`` and ``traj ingest [OPTIONS] PATHS...`` (argument metavars are
  the upper-cased parameter names) and flags show no ``<bool>`` value.
- **Boolean switches** are declared as pairs, ``typer.Option(False, "--follow/--no-follow")``:
  ``--follow`` and ``--no-follow`` work; there is no ``--follow yes``. Flags that only pick
  what to show (``traj stats --staleness``) stay single flags.
- **Output**: ``--format table|json|csv`` selects the OUTPUT format on every command
  (:data:`FormatOption`; ``table`` for people, the default; ``json``/``csv`` for programs).
  Input formats have their own option names (``traj ingest --input-format``).
- **Rendering** goes through :mod:`trajstore.display`: :func:`~trajstore.display.render_tables`
  for tables (key columns first and in every part of a wide table, constant columns in the
  title, empty tables as one line, layout from the terminal width),
  :func:`~trajstore.display.render_record` for one summary object, and
  :func:`~trajstore.display.print_command` for a command the user should copy (own line,
  unstyled, never wrapped). Numbers use the display module's formats (shares ``0.250``).
- **Stores** are the first argument (:data:`StoreArgument`), remote ones take
  ``--storage-option key=value`` (:data:`StorageOptions`, :func:`parse_storage_options`);
  read-only commands open them with :func:`open_existing_store`.
- **Errors**: :func:`friendly_errors` turns known errors into one line on stderr, exit code 1
  (``TRAJ_TRACEBACK=1`` shows the traceback); bad usage exits 2. A missing optional
  dependency is a :class:`~trajstore.errors.MissingExtraError` naming the ``pip install``.
- **Progress and notes** go to stderr, results to stdout.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from typer.core import TyperCommand, TyperGroup

from trajstore.display import OutputFormat
from trajstore.errors import TrajstoreError, one_line


def _tidy_params(command: Any, ctx: Any) -> None:
    """Upper-case argument metavars (``STORE``, ``PATHS...``; an argument taking several values
    ends in ``...``); flags take no value, so no type."""
    for p in command.get_params(ctx):
        if p.param_type_name == "argument":
            name = p.metavar or p.name.upper()
            p.metavar = name + ("..." if p.nargs != 1 and not name.endswith("...") else "")
        elif getattr(p, "is_flag", False) and not getattr(p, "count", False) and p.metavar is None:
            p.metavar = ""


class TrajCommand(TyperCommand):
    """A typer command whose help reads ``Usage: traj stats [OPTIONS] STORE`` and lists flags as
    ``--follow/--no-follow`` without a ``<bool>`` value."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        _tidy_params(self, ctx)
        pieces = [self.options_metavar] if self.options_metavar else []
        for p in self.get_params(ctx):
            if p.param_type_name == "argument":
                pieces.append(p.metavar if p.required else f"[{p.metavar}]")
        return pieces

    def format_help(self, ctx: Any, formatter: Any) -> None:
        _tidy_params(self, ctx)
        return super().format_help(ctx, formatter)


class TrajGroup(TyperGroup):
    """The group counterpart of :class:`TrajCommand` (``--help`` shows no ``<bool>``)."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        _tidy_params(self, ctx)
        return super().format_help(ctx, formatter)


class TrajTyper(typer.Typer):
    """``typer.Typer`` whose commands are :class:`TrajCommand` and groups :class:`TrajGroup`.
    Make sub-apps (``traj bench ...``) with this class too."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("cls", TrajGroup)
        kwargs.setdefault("pretty_exceptions_enable", False)
        super().__init__(**kwargs)

    def command(self, name: str | None = None, *, cls: type[TyperCommand] | None = None,
                **kwargs: Any) -> Callable[[Any], Any]:
        return super().command(name, cls=cls or TrajCommand, **kwargs)


app = TrajTyper(
    name="traj",
    help="trajstore: trajectory data platform and SAO trainer for asynchronous agentic RL.",
    no_args_is_help=True,
)

STORE_HELP = "store URI: local directory or s3://bucket/prefix"

StoreArgument = Annotated[str, typer.Argument(help=STORE_HELP, show_default=False)]
"""The store every store command takes first."""

FormatOption = Annotated[OutputFormat, typer.Option(
    "--format", help="output format: table (for people), json or csv (for programs)", case_sensitive=False)]
"""``--format table|json|csv``: the output format, the same on every command (default ``table``)."""

StorageOptions = Annotated[list[str], typer.Option(
    "--storage-option", metavar="KEY=VALUE",
    help="fsspec option key=value for remote stores, e.g. endpoint_url=http://... "
    "(repeatable)", show_default=False)]
"""``--storage-option key=value`` (repeatable); parse with :func:`parse_storage_options`."""


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


def parse_storage_options(items: list[str] | None) -> dict[str, Any]:
    """``key=value`` strings to fsspec options; ``true``/``false`` become booleans.

    Raises:
        ValueError: an item has no ``=``.
    """
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--storage-option {item!r}: expected key=value")
        out[key] = {"true": True, "false": False}.get(value.lower(), value)
    return out


def open_existing_store(uri: str, storage_options: dict[str, Any] | None = None, *,
                        missing_ok: bool = False) -> Any:
    """Open a store that a read-side command inspects (:func:`trajstore.store.open_existing_store`):
    a local directory or remote prefix that does not exist, or one that is not a store (a folder
    of logs, ``/tmp``), is an error, exit status :data:`EXIT_ERROR` (it would otherwise audit an
    empty store without a word). An empty directory is an empty store."""
    from trajstore.store import open_existing_store as open_checked

    return open_checked(uri, storage_options=storage_options, missing_ok=missing_ok)


@app.command("schema")
@friendly_errors
def schema_cmd(fmt: FormatOption = OutputFormat.table) -> None:
    """The trajectory schema: its columns and those of the training records (--format json: the
    JSON description that schemas/ holds)."""
    import json

    from trajstore.display import TableData, render_tables
    from trajstore.schema import schema_json

    text = schema_json()
    if fmt is OutputFormat.json:
        sys.stdout.write(text)
        return
    doc = json.loads(text)

    def type_name(t: Any) -> str:  # nested types: large_list<int32>, large_list<struct>
        if not isinstance(t, dict):
            return str(t)
        item = t.get("item")
        return f"{t.get('type')}<{'struct' if isinstance(item, dict) else type_name(item)}>" if item else str(t["type"])

    cols = ["name", "type", "nullable", "doc"]
    render_tables([TableData(f"schema.{name}", cols,
                             [(f.get("name"), type_name(f.get("type")), f.get("nullable"), f.get("doc"))
                              for f in doc.get(key, [])], keys=["name"], wrap=["doc"])
                   for name, key in (("trajectories", "fields"), ("run_steps", "run_steps_fields"),
                                     ("run_consumed", "run_consumed_fields"))], fmt)


@app.command("info")
@friendly_errors
def info_cmd(store: StoreArgument, fmt: FormatOption = OutputFormat.table,
             storage_option: StorageOptions = []) -> None:  # noqa: B006 - typer reads the default
    """Shards, trajectories, tokens and duplicates in a store (unreadable shards named once on stderr)."""
    from trajstore.display import render_record
    from trajstore.reader import summarize_store

    s = summarize_store(open_existing_store(store, parse_storage_options(storage_option)))
    for message in s.skipped:
        typer.echo(f"warning: {message}", err=True)
    render_record(f"store {s.store}", {
        "store": s.store, "shards": s.shards, "trajectories": s.trajectories, "tokens": s.tokens,
        "duplicates_dropped": s.duplicates_dropped, "skipped_shards": len(s.skipped),
        "schema_versions": {f"v{k}": n for k, n in sorted(s.schema_versions.items())},
    }, fmt)


# Command groups register themselves on `app` when imported.
from trajstore.cli import commands  # noqa: E402,F401


def main() -> None:  # pragma: no cover - console entry
    app()

"""The ``traj`` command: thin wrappers that parse options, call one library function and render.

Conventions every command follows (``tests/cli/test_conventions.py`` checks them on every
registered command, so new commands inherit them by using what is defined here):

- **Register** on :data:`app` (or on a sub-app made with :class:`TrajTyper`), so that usage lines
  read ``traj stats [OPTIONS] STORE`` and ``traj ingest [OPTIONS] PATHS...`` (argument metavars are
  the upper-cased parameter names) and flags show no ``<bool>`` value. Help texts (docstrings)
  may wrap in the source: :func:`unwrap_help` joins each paragraph's lines.
- **Boolean switches** are declared as pairs, ``typer.Option(False, "--follow/--no-follow")``:
  ``--follow`` and ``--no-follow`` work; there is no ``--follow yes``. Flags that only pick
  what to show (``traj stats --staleness``) stay single flags.
- **Output**: ``--format table|json|csv`` selects the OUTPUT format on every command
  (:data:`FormatOption`; ``table`` for people, the default; ``json``/``csv`` for programs).
  Input formats have their own option names (``traj ingest --input-format``).
- **Rendering** goes through :mod:`trajstore.cli.display`: :func:`~trajstore.cli.display.render_tables`
  for tables (key columns first and in every part of a wide table, constant columns in the
  title, empty tables as one line, layout from the terminal width),
  :func:`~trajstore.cli.display.render_record` for one summary object, and
  :func:`~trajstore.cli.display.print_command` for a command the user should copy (own line,
  unstyled, never wrapped). Numbers use :mod:`trajstore.cli.cells`' formats (shares ``0.250``).
- **Typed configs are the options**: a command whose library call takes a pydantic config
  declares no option of its own for it; :mod:`trajstore.cli.config_options` generates one flag
  per field (help, default and choices from the model), as ``traj train`` does.
- **Stores** are the first argument (:data:`StoreArgument`), remote ones take
  ``--storage-option key=value`` (:data:`StorageOptions`, :func:`parse_storage_options`);
  read-only commands open them with :func:`open_existing_store`.
- **Errors**: :func:`friendly_errors` turns known errors into one line on stderr
  (``TRAJ_TRACEBACK=1`` shows the traceback). A missing optional dependency is a
  :class:`~trajstore.errors.MissingExtraError` naming the ``pip install``.
- **Exit status**, the same on every command (README "Exit status"): 0 done; 1
  (:data:`EXIT_ERROR`) an error, one line on stderr (no store or not a store at the path, an
  invalid ``--where``, a failed query, a refused checkpoint, an uncaught exception), and also
  (:data:`EXIT_REFUSED`, the same value, as issue 12 specifies) ``traj ingest`` stored every
  record it could but refused some, each refusal listed; 2 (:data:`EXIT_USAGE`) bad usage
  (unknown option, bad option value, missing input path), one ``error:`` line too, click's own
  usage errors included (:class:`TrajGroup`); 130 (:data:`EXIT_INTERRUPTED`) stopped by Ctrl-C
  (``traj ingest`` says on one line how many trajectories it stored before, each whole); 143
  ``traj train`` stopped at once by a second SIGTERM / Ctrl-C (the first finishes the step,
  checkpoints and exits 0).
- **Warnings** of the library (:class:`~trajstore.errors.TrajstoreWarning`, e.g. a corrupt shard
  skipped) print as one ``warning: ...`` line on stderr each, never as Python's
  ``file:line: Category`` text.
- **Progress and notes** go to stderr, results to stdout.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import re
import shutil
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypeVar

import typer
from typer.core import TyperCommand, TyperGroup

import trajstore
import trajstore.cli
from trajstore.cli.display import OutputFormat
from trajstore.errors import TrajstoreError, TrajstoreWarning, one_line, os_error_line


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
        with _plain_help_when_narrow(self):
            return super().format_help(ctx, formatter)

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        _refuse_conflicting_repeats(self, ctx, args)
        return super().parse_args(ctx, args)


def _refuse_conflicting_repeats(command: Any, ctx: Any, args: Sequence[str]) -> None:
    """An option that takes one value, given twice with different values (``--store a --store b``),
    is bad usage: click silently kept the last one, so a command line pasted together from two
    sources wrote into a store its user did not see. The same value twice is harmless and
    accepted; repeatable options (``--storage-option``) are not concerned, and a later flag
    overrides an earlier one as usual (``--follow ... --no-follow``: an alias's default turned off)."""
    by_name = {}
    for p in command.get_params(ctx):
        if (p.param_type_name == "option" and not p.multiple and not getattr(p, "count", False)
                and not getattr(p, "is_flag", False)):
            for name in (*p.opts, *p.secondary_opts):
                by_name[name] = p
    seen: dict[str, tuple[str, str]] = {}  # param name -> (what was given, its value)
    i = 0
    while i < len(args) and args[i] != "--":
        name, eq, value = args[i].partition("=")
        p = by_name.get(name) if name.startswith("-") else None
        if p is not None:
            if eq:
                given = args[i]
            else:  # `--betas 0.9 0.95` takes two values
                value = " ".join(args[i + 1:i + 1 + max(p.nargs, 1)])
                given = f"{name} {value}"
                i += max(p.nargs, 1)
            if p.name in seen and seen[p.name][1] != value:
                raise _click_exceptions().UsageError(
                    f"option {max(p.opts, key=len)} given twice with different values ({seen[p.name][0]}, {given}): "
                    "give it once", ctx=ctx)
            seen.setdefault(p.name, (given, value))
        i += 1


PLAIN_HELP_BELOW_COLUMNS = 120
"""Terminals narrower than this get click's plain help layout instead of typer's rich panels.

typer's options panel is a six-column table (name, short name, ``--no-`` name, short ``--no-``,
type, help) that rich shrinks to the terminal: at 80 columns ``traj train --help`` cut option
names to ``--micro-batch-s…`` and wrapped help texts to 16 characters. Click's layout puts a long
option's help on the next line instead, so every name stays whole at any width."""


@contextlib.contextmanager
def _plain_help_when_narrow(command: Any) -> Any:
    narrow = shutil.get_terminal_size().columns < PLAIN_HELP_BELOW_COLUMNS
    saved = command.rich_markup_mode
    if narrow:
        command.rich_markup_mode = None
    try:
        yield
    finally:
        command.rich_markup_mode = saved


def usage_error_line(e: Any) -> str:
    """A click usage error (unknown option, bad option value, missing argument) as one line,
    worded as our own bad-usage errors are (``invalid option --limit: ...``)."""
    click = _click_exceptions()
    param = getattr(e, "param", None)
    is_option = getattr(param, "param_type_name", "") == "option"
    name = None
    if param is not None:
        name = max(param.opts, key=len) if is_option and param.opts else (
            (param.metavar or (param.name or "").upper()).removesuffix("..."))
    if isinstance(e, click.MissingParameter) and name:
        return f"missing {'option' if is_option else 'argument'} {name}"
    if isinstance(e, click.BadParameter):
        hint = e.param_hint if e.param_hint is not None else name
        if hint:
            hint = " / ".join(hint) if isinstance(hint, (list, tuple)) else str(hint).replace("'", "")
            kind = "option" if is_option or hint.startswith("-") else "argument"
            return f"invalid {kind} {hint}: {one_line(e.message).removeprefix('Value error, ')}"
    text = one_line(e.format_message()).removesuffix(".")
    return text[:1].lower() + text[1:] if text[1:2].islower() else text


class TrajGroup(TyperGroup):
    """The group counterpart of :class:`TrajCommand` (``--help`` shows no ``<bool>``).

    Click's own usage errors (``--limit -1``, an unknown option, a missing argument, a
    ``typer.BadParameter`` raised by a command) print as one ``error: ...`` line on stderr, exit
    status :data:`EXIT_USAGE`, as the commands' own bad-usage errors do, not as typer's boxed
    usage panel."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        _tidy_params(self, ctx)
        with _plain_help_when_narrow(self):
            return super().format_help(ctx, formatter)

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        with _one_line_click_errors():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: Any) -> Any:
        with _one_line_click_errors():
            return super().invoke(ctx)


def _click_exceptions() -> Any:
    """The module of click's exception classes that typer raises (typer >= 0.20 vendors click as
    ``typer._click``; earlier versions use click itself)."""
    return sys.modules[typer.BadParameter.__module__]


@contextlib.contextmanager
def _one_line_click_errors() -> Any:
    click = _click_exceptions()
    try:
        yield
    except click.ClickException as e:
        if type(e).__name__ == "NoArgsIsHelpError" or os.environ.get("TRAJ_TRACEBACK"):
            raise  # `traj` alone prints its help
        line = usage_error_line(e) if isinstance(e, click.UsageError) else one_line(e.format_message())
        typer.echo(f"error: {line}", err=True)
        raise typer.Exit(e.exit_code) from None


class TrajTyper(typer.Typer):
    """``typer.Typer`` whose commands are :class:`TrajCommand` and groups :class:`TrajGroup`.
    Make sub-apps (``traj bench ...``) with this class too."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("cls", TrajGroup)
        kwargs.setdefault("pretty_exceptions_enable", False)
        super().__init__(**kwargs)

    def command(self, name: str | None = None, *, cls: type[TyperCommand] | None = None,
                **kwargs: Any) -> Callable[[Any], Any]:
        def decorator(f: Any) -> Any:
            text = kwargs.get("help") or inspect.getdoc(f)
            kw = {**kwargs, "help": unwrap_help(text)} if text else kwargs
            return super(TrajTyper, self).command(name, cls=cls or TrajCommand, **kw)(f)

        return decorator


def unwrap_help(text: str) -> str:
    """A help text whose source lines are joined within each paragraph (paragraphs stay apart):
    rich keeps single newlines, so a docstring wrapped at 100 columns in the source printed as
    hard breaks ('... (--format json: the' / 'JSON description ...') in ``traj --help``."""
    paragraphs = [" ".join(line.strip() for line in p.splitlines()) for p in re.split(r"\n\s*\n", text.strip())]
    return "\n\n".join(p for p in paragraphs if p)


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


EXIT_ERROR = 1
"""Exit status of a command that failed with an error (one line on stderr)."""
EXIT_USAGE = 2
"""Exit status of bad usage: unknown option, bad option value, missing input path (click's own)."""
EXIT_INTERRUPTED = 130
"""Exit status of a command stopped by Ctrl-C (SIGINT), as shells report it (128 + 2)."""
EXIT_REFUSED = 1
"""Exit status of ``traj ingest`` when some records were refused and every other one was stored.

The same value as :data:`EXIT_ERROR`, as the ingest contract fixes it (0 every record stored or
deliberately skipped, 1 any record refused, 2 usage): scripts tell the two apart by stderr, where
each refusal is listed and an error is one ``error:`` line."""

F = TypeVar("F", bound=Callable[..., Any])

def _package_dirs() -> tuple[str, ...]:
    """Folders of trajstore, trajstore.cli and trajstore.trainer (found without importing the trainer)."""
    import importlib.util

    spec = importlib.util.find_spec("trajstore.trainer")
    trainer = list(spec.submodule_search_locations or []) if spec is not None else []
    return tuple(d.rstrip(os.sep) + os.sep for d in [os.path.dirname(trajstore.__file__ or ""),
                                                      os.path.dirname(trajstore.cli.__file__ or ""), *trainer])


_PACKAGE_DIRS = _package_dirs()


def _is_ours(category: type[Warning], filename: str) -> bool:
    """A warning the library issued on purpose (shown as one line), not a third-party one."""
    return issubclass(category, TrajstoreWarning) or (
        issubclass(category, UserWarning) and filename.startswith(_PACKAGE_DIRS))


@contextlib.contextmanager
def one_line_warnings() -> Any:
    """Within the block, the library's warnings print as ``warning: <one line>`` on stderr, each
    distinct text once; other warnings print as Python prints them."""
    seen: set[str] = set()
    with warnings.catch_warnings():
        original = warnings.showwarning

        def show(message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None,
                 line: Any = None) -> None:
            if not _is_ours(category, filename):
                original(message, category, filename, lineno, file, line)
                return
            text = one_line(str(message))
            if text not in seen:
                seen.add(text)
                typer.echo(f"warning: {text}", err=True)

        warnings.showwarning = show
        yield


class InvalidOptionError(ValueError):
    """A command-line option has a bad value: one line on stderr, exit status :data:`EXIT_USAGE`
    (bad usage, like click's own checks), not :data:`EXIT_ERROR`."""


def invalid_options(error: Any, renamed: dict[str, str] | None = None) -> InvalidOptionError:
    """One :class:`InvalidOptionError` for a pydantic ``ValidationError`` raised while a command
    built its config from its options: ``invalid option --port: Input should be greater than or
    equal to 0 (got -1); ...``.

    Args:
        error: the ``pydantic.ValidationError``.
        renamed: config fields whose flag is not the derived one. A field's flag is derived as
            ``--`` + its name with ``_`` as ``-`` and a seconds suffix ``_s`` dropped
            (``hold_timeout_s`` -> ``--hold-timeout``).
    """
    def flag(loc: tuple) -> str:
        field = next((str(p) for p in reversed(loc) if isinstance(p, str)), "")
        if not field:
            return "option"
        return (renamed or {}).get(field) or "--" + field.removesuffix("_s").replace("_", "-")

    def problem(err: dict[str, Any]) -> str:
        msg = one_line(str(err["msg"])).removeprefix("Value error, ")  # a validator's own text
        got = repr(err.get("input"))
        return f"{flag(tuple(err['loc']))}: {msg}" + ("" if got in msg else f" (got {got})")

    return InvalidOptionError("invalid option " + "; ".join(problem(err) for err in error.errors()))


def friendly_errors(fn: F) -> F:
    """Turn known errors into one clear line on stderr and exit status :data:`EXIT_ERROR`
    (click exits :data:`EXIT_USAGE` for bad usage), and the library's warnings into one line
    each (:func:`one_line_warnings`)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with one_line_warnings():
                return fn(*args, **kwargs)
        except InvalidOptionError as e:
            if os.environ.get("TRAJ_TRACEBACK"):
                raise
            typer.echo(f"error: {one_line(str(e))}", err=True)
            raise typer.Exit(EXIT_USAGE) from None
        except (TrajstoreError, ValueError) as e:
            if os.environ.get("TRAJ_TRACEBACK"):
                raise
            typer.echo(f"error: {one_line(str(e))}", err=True)
            raise typer.Exit(EXIT_ERROR) from None
        except OSError as e:  # a path the system refused: name it and the reason, not '[Errno 1] ...'
            if os.environ.get("TRAJ_TRACEBACK") or isinstance(e, BrokenPipeError):
                raise  # `traj sql ... | head`: click ends quietly on a closed pipe
            typer.echo(f"error: {one_line(os_error_line(e))}", err=True)
            raise typer.Exit(EXIT_ERROR) from None

    return wrapper  # type: ignore[return-value]


def is_local_uri(uri: str) -> bool:
    """True for a local path or ``file://`` URL (no fsspec option applies to it)."""
    from fsspec.core import split_protocol

    return split_protocol(uri)[0] in (None, "file", "local")


def parse_storage_options(items: list[str] | None, store: str | None = None) -> dict[str, Any]:
    """``key=value`` strings to fsspec options; ``true``/``false`` become booleans.

    Args:
        items: the ``--storage-option`` values.
        store: the store they are for. When it is a local path the options are ignored (``{}``)
            with one ``warning:`` line on stderr: they apply only to remote stores, and were
            silently accepted.

    Raises:
        InvalidOptionError: an item has no ``=`` (a ``ValueError``; exit status 2 in a command).
    """
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidOptionError(f"invalid option --storage-option: expected key=value (got {item!r})")
        out[key] = {"true": True, "false": False}.get(value.lower(), value)
    if out and store is not None and is_local_uri(store):
        typer.echo(f"warning: --storage-option applies only to remote stores (s3://...); ignored for the local "
                   f"store {store} ({', '.join(out)})", err=True)
        return {}
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
def schema_cmd(fmt: FormatOption = OutputFormat.table,
               diff: tuple[int, int] | None = typer.Option(
                   None, "--diff", metavar="VERSION VERSION",
                   help="what changed between two schema versions (e.g. --diff 1 2): columns and span fields "
                   "added, removed, retyped, or whose meaning changed")) -> None:
    """The trajectory schema: its columns and those of the training records (--format json: the
    JSON description that schemas/ holds)."""
    import json

    from trajstore.cli.display import render_tables
    from trajstore.schema import schema_json
    from trajstore.tables import TableData

    if diff is not None:
        from trajstore.schema_diff import schema_diff

        a, b = diff
        try:
            changes = schema_diff(a, b)
        except ValueError as e:
            raise InvalidOptionError(f"invalid option --diff: {e}") from None
        render_tables([TableData(f"schema.diff_v{a}_v{b}", ["change", "field", "before", "after"],
                                 [(c.change, c.field, c.before, c.after) for c in changes], keys=["change", "field"],
                                 wrap=["before", "after"], empty_note=f"schema v{a} and v{b} are the same")], fmt)
        return
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
    from trajstore.cli.display import render_record
    from trajstore.reader import summarize_store

    s = summarize_store(open_existing_store(store, parse_storage_options(storage_option, store)))
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

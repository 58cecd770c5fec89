"""The typer classes every ``traj`` command and command group is made of (:class:`TrajTyper`,
:class:`TrajCommand`, :class:`TrajGroup`): usage lines that read ``traj stats [OPTIONS] STORE``,
flags without a ``<bool>`` value, help texts unwrapped and laid out whole at any terminal width,
click's usage errors as one ``error:`` line, and an option given twice with different values
refused. Each command module makes one :class:`TrajTyper` of its commands; :mod:`trajstore.cli.main`
adds them to the ``traj`` app."""

from __future__ import annotations

import contextlib
import inspect
import os
import re
import shutil
import sys
from collections.abc import Callable, Sequence
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from trajstore.cli.commands import OLD_SPELLINGS, summary_of
from trajstore.errors import one_line


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
        args = respell(self.name, args)
        _refuse_store_option(self, args)
        _refuse_conflicting_repeats(self, ctx, args)
        return super().parse_args(ctx, args)


def _refuse_store_option(command: Any, args: list[str]) -> None:
    """A ``--store`` given to a command whose first argument is the store (``traj stats --store S``)
    is refused with the spelling that works, rather than click's "no such option" with a guess at a
    similar name (``--storage-option``).

    Raises:
        UsageError: ``--store`` or ``--store=S`` before any ``--``.
    """
    first = next((p for p in command.params if p.param_type_name == "argument"), None)
    if first is None or first.name != "store":
        return
    for arg in args:
        if arg == "--":
            return
        if arg == "--store" or arg.startswith("--store="):
            raise click_exceptions().UsageError(f"no option --store: the store is the first argument "
                                   f"(traj {command.name} STORE ...)")


def respell(command: str | None, args: list[str]) -> list[str]:
    """`args` with each old spelling of an option of `command` (:data:`OLD_SPELLINGS`) replaced by
    the current one (``--run-id r`` and ``--run-id=r`` both), one ``warning:`` line per old
    spelling used. An option that is now the first argument (``--store S``: ``STORE``) is
    removed and its value put in front of the other arguments, so that every positional argument
    given stays in its place after it (``traj ingest LOGS --store S`` is ``traj ingest S LOGS``).
    Arguments after ``--`` are left alone.

    Raises:
        click.UsageError: such an option without a value, or given twice with different values.
    """
    renamed = OLD_SPELLINGS.get(command or "", {})
    if not renamed:
        return args
    out: list[str] = []
    front: list[str] = []  # the value of an option that is now the first argument
    warned: set[str] = set()
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            out += args[i:]
            break
        old, eq, value = arg.partition("=")
        new = renamed.get(old)
        i += 1
        if new is None:
            out.append(arg)
            continue
        if new.startswith("-"):
            if old not in warned:
                warned.add(old)
                typer.echo(f"warning: {old} is now {new} (the old spelling will be removed)", err=True)
            out.append(new + eq + value)
            continue
        if not eq:  # `--store S`
            if i >= len(args):
                raise click_exceptions().UsageError(f"option {old} requires an argument")
            value = args[i]
            i += 1
        if front and front[0] != value:
            raise click_exceptions().UsageError(
                f"option {old} given twice with different values ({old} {front[0]}, {old} {value}): give it once")
        if old not in warned:
            warned.add(old)
            typer.echo(f"warning: {old} is now the first argument {new}: traj {command} {value} ... "
                       "(the old spelling will be removed)", err=True)
        front[:1] = [value]
    return front + out


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
                raise click_exceptions().UsageError(
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
    click = click_exceptions()
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


def click_exceptions() -> Any:
    """The module of click's exception classes that typer raises (typer >= 0.20 vendors click as
    ``typer._click``; earlier versions use click itself)."""
    return sys.modules[typer.BadParameter.__module__]


@contextlib.contextmanager
def _one_line_click_errors() -> Any:
    click = click_exceptions()
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
            kw = {**kwargs, "help": unwrap_help(text)} if text else dict(kwargs)
            if self.info.name is None:  # a command module's top-level commands: the listed summary
                kw.setdefault("short_help", summary_of(name or f.__name__))
            return super(TrajTyper, self).command(name, cls=cls or TrajCommand, **kw)(f)

        return decorator

    def add_typer(self, typer_instance: typer.Typer, **kwargs: Any) -> None:
        if self.info.name is None and kwargs.get("name"):
            kwargs.setdefault("short_help", summary_of(kwargs["name"]))
        super().add_typer(typer_instance, **kwargs)


def unwrap_help(text: str) -> str:
    """A help text whose source lines are joined within each paragraph (paragraphs stay apart):
    rich keeps single newlines, so a docstring wrapped at 100 columns in the source printed as
    hard breaks ('... (--format json: the' / 'JSON description ...') in ``traj --help``."""
    paragraphs = [" ".join(line.strip() for line in p.splitlines()) for p in re.split(r"\n\s*\n", text.strip())]
    return "\n\n".join(p for p in paragraphs if p)


def _print_version(value: bool) -> None:
    if value:
        from trajstore import __version__  # the package's light __init__ (metadata only)

        typer.echo(f"traj (trajstore) {__version__}")
        raise typer.Exit()


def add_root_options(app: typer.Typer) -> None:
    """Give the ``traj`` group its own options (``traj --version``); both entry points call it."""

    @app.callback()
    def root(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                          help="Print trajstore's version and exit.")) -> None:
        """trajstore: trajectory data platform and SAO trainer for asynchronous agentic RL."""

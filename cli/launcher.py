"""The installed ``traj`` entry point: each command's module is imported only when it runs.

:mod:`trajstore.cli.main` imports every command module, and with them pyarrow, DuckDB, polars,
pydantic and the HTTP stack: about 1.5 s before ``traj --help`` printed a line. Here the ``traj``
group knows its commands from :data:`trajstore.cli.commands.COMMANDS` (name, module, summary):
``traj --help`` lists them without importing any, and ``traj stats ...`` imports only
:mod:`trajstore.cli.audit`. The commands themselves are the very objects :mod:`~trajstore.cli.main`
assembles, so options, help and behaviour cannot differ (``tests/cli/test_launcher.py`` compares
the two). ``bench/startup.py`` measures the start-up times.
"""

from __future__ import annotations

import gc
import importlib
from typing import Any

import typer

from trajstore.cli.app import TrajCommand, TrajGroup, TrajTyper, add_root_options
from trajstore.cli.commands import COMMANDS


class LazyTrajGroup(TrajGroup):
    """The ``traj`` group whose subcommands are imported on first use.

    Listing (``traj --help``, shell completion) uses each command's summary; resolving a command
    to run it or show its own help imports its module and returns the command typer built there."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, name: str) -> Any:
        entry = COMMANDS.get(name)
        if entry is None:
            return None
        if getattr(ctx, "_traj_listing", False):  # the group's own help: the summary is all it shows
            return TrajCommand(name=name, short_help=entry.summary, help=entry.summary)
        # A command's imports (pyarrow, DuckDB, pydantic, rich...) allocate several hundred thousand
        # objects that live as long as the process; the cyclic collector's passes over them during
        # the import free nothing and cost about 0.1 s CPU (bench/startup.py). Collect nothing
        # while importing, then freeze what was imported out of every later collection.
        gc.disable()
        try:
            module = importlib.import_module(entry.module)
        finally:
            gc.freeze()
            gc.enable()
        return typer.main.get_group(module.commands).get_command(ctx, name)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        ctx._traj_listing = True
        try:
            return super().format_help(ctx, formatter)
        finally:
            ctx._traj_listing = False


launcher_app = TrajTyper(
    name="traj",
    cls=LazyTrajGroup,
    help="trajstore: trajectory data platform and SAO trainer for asynchronous agentic RL.",
    no_args_is_help=True,
)
add_root_options(launcher_app)


def main() -> Any:
    """Run ``traj`` (the ``[project.scripts]`` entry point)."""
    return launcher_app()

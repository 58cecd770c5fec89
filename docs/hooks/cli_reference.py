"""MkDocs hook: the pages generated on every build, so that they cannot drift from their source.

- ``reference.md``, the command reference, from the ``traj`` app itself
  (:data:`trajstore.cli.main.app`);
- ``index.md``, the site's home page, from ``README.md`` (its links into ``docs/`` made relative
  to the site), so the README's first-day path and exit statuses are written once.

Each command's help is click's own plain help text (typer's rich panels switched off, as
``cli/app.py`` does on narrow terminals), at a fixed width so the page does not depend on the
terminal that builds it. The pages exist only in the build (``File.generated``): nothing is
written into ``docs/``, so there is no generated file to commit or to go stale.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer.main
from mkdocs.structure.files import File, Files

from trajstore.cli.main import app

PAGE = "reference.md"
README = Path(__file__).resolve().parents[2] / "README.md"
WIDTH = 100
"""Columns the help text is wrapped to (the code blocks of the site's theme show about this many)."""


def _commands(group: Any, prefix: str) -> list[tuple[str, Any]]:
    """Every command under the click group ``group`` as ``(full name, command)``, depth first, in
    listing order (typer ships its own copy of click, so the types are its, not ``click``'s)."""
    ctx = group.context_class(group, info_name=prefix)
    out: list[tuple[str, Any]] = []
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is None or cmd.hidden:
            continue
        full = f"{prefix} {name}"
        out.append((full, cmd))
        if hasattr(cmd, "list_commands"):  # a group (traj bench)
            out += _commands(cmd, full)
    return out


def _help(cmd: Any, name: str) -> str:
    saved = getattr(cmd, "rich_markup_mode", None)
    cmd.rich_markup_mode = None  # click's plain layout: typer's panels are drawn for a terminal
    try:
        return cmd.get_help(cmd.context_class(cmd, info_name=name, terminal_width=WIDTH, max_content_width=WIDTH))
    finally:
        cmd.rich_markup_mode = saved


def render() -> str:
    """The reference page's Markdown: the ``traj`` group's help, then one section per command."""
    root = typer.main.get_command(app)
    parts = ["# Command reference", "",
             "Generated from the `traj` command itself when the site is built (`docs/hooks/cli_reference.py`): "
             "each section is the command's `--help`.", "",
             "```text", _help(root, "traj"), "```", ""]
    for name, cmd in _commands(root, "traj"):
        parts += [f"## `{name}`", "", "```text", _help(cmd, name), "```", ""]
    return "\n".join(parts)


def home() -> str:
    """The README as the site's home page: ``](docs/x.md)`` links become ``](x.md)``."""
    return re.sub(r"\]\(docs/", "](", README.read_text())


def on_files(files: Files, config: Any) -> Files:
    """Add the generated pages to the site's files."""
    files.append(File.generated(config, PAGE, content=render()))
    files.append(File.generated(config, "index.md", content=home()))
    return files

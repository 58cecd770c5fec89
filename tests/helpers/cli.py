"""What the CLI tests share: a terminal width to render at and the non-blank lines of an output."""

from __future__ import annotations

WIDTH_120 = {"COLUMNS": "120"}
"""Environment of a CliRunner call rendered at 120 columns."""
WIDTH_80 = {"COLUMNS": "80"}
"""Environment of a CliRunner call rendered at 80 columns (a default terminal, 80x24)."""


def nonblank_lines(text: str) -> list[str]:
    """The lines of `text` that are not blank."""
    return [ln for ln in text.splitlines() if ln.strip()]

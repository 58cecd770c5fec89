"""Wording shared by the messages of the store, the trainer and ``traj``: a count with its noun
in the right number (``1 iteration``, ``2 iterations``)."""

from __future__ import annotations


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 iteration``, ``2 iterations``, ``0 batches`` (`many`: an irregular plural); thousands
    separated by commas (``12,000 tokens``)."""
    return f"{n:,} {word if n == 1 else many or word + 's'}"

"""Wording shared by the messages of the store, the trainer and ``traj``: a count with its noun
in the right number (``1 iteration``, ``2 iterations``), and the words of the reasons a stored
trajectory is not trained (``traj train``'s data line and ``traj stats --coverage`` use the same)."""

from __future__ import annotations

from typing import Final

MARKED_NOT_TRAINABLE: Final[str] = "marked not trainable"
"""A row stored ``trainable = false`` (why in ``not_trainable_reason``)."""
WITHOUT_REWARD: Final[str] = "without a reward"
"""A row whose reward is null or NaN."""
TEXT_ONLY: Final[str] = "text only: needs --behaviour-logprobs initial-policy"
"""A row without the engine's tokens or log-probs (a text log): trainable, but ``traj train``
refuses it unless ``--behaviour-logprobs initial-policy`` computes its behaviour log-probs."""
WITHOUT_ENGINE_LOGPROB: Final[str] = "without an engine log-prob on any action token"
"""An engine row none of whose action tokens has a log-prob."""
UNREPRODUCIBLE_LOGPROBS: Final[str] = "with log-probs the trainer cannot reproduce"
"""An engine row with an action span whose log-probs the trainer cannot reproduce."""


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 iteration``, ``2 iterations``, ``0 batches`` (`many`: an irregular plural); thousands
    separated by commas (``12,000 tokens``)."""
    return f"{n:,} {word if n == 1 else many or word + 's'}"

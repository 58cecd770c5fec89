"""Token ids back to text for ``traj view``: the trajectory's own tokenizer (its ``tokenizer``
column, or ``traj view --tokenizer``) through :func:`trajstore.hub.load_tokenizer`, offline; when
it cannot be loaded, the ids themselves, with the reason shown on the page."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from trajstore.errors import TrajstoreError
from trajstore.hub import load_tokenizer


class Decoder:
    """Tokenizers by name, loaded once (a GGUF conversion takes tens of seconds the first time).

    Args:
        override: decode every trajectory with this tokenizer instead of its own.
    """

    def __init__(self, override: str | None = None):
        self.override = override
        self._cache: dict[str, tuple[Any, str | None]] = {}
        self._lock = threading.Lock()

    def tokenizer(self, name: str | None) -> tuple[Any, str | None]:
        """(tokenizer or None, why there is none) for a trajectory's tokenizer name."""
        name = self.override or name
        if not name:
            return None, "the trajectory names no tokenizer: token ids are shown"
        with self._lock:
            if name not in self._cache:
                try:
                    self._cache[name] = (load_tokenizer(name), None)
                except (TrajstoreError, OSError, ValueError) as e:
                    self._cache[name] = (None, f"tokenizer {name!r} cannot be loaded ({e}): token ids are shown; "
                                               "traj view --tokenizer names one to use")
            return self._cache[name]

    def warm(self, names: Sequence[str]) -> None:
        """Load these tokenizers now (a page that needs one then does not wait for it)."""
        for name in ([self.override] if self.override else names):
            self.tokenizer(name)

    @staticmethod
    def pieces(tok: Any, ids: Sequence[int]) -> list[str]:
        """The text of each token on its own (a character split over several tokens shows as
        U+FFFD in each), or ``⟨id⟩`` without a tokenizer."""
        if tok is None:
            return [f"⟨{i}⟩" for i in ids]
        return list(tok.batch_decode([[int(i)] for i in ids], skip_special_tokens=False,
                                     clean_up_tokenization_spaces=False))

    @staticmethod
    def text(tok: Any, ids: Sequence[int]) -> str:
        """The text of consecutive tokens (a span), or their ids without a tokenizer."""
        if tok is None:
            return " ".join(f"⟨{int(i)}⟩" for i in ids)
        return str(tok.decode([int(i) for i in ids], skip_special_tokens=False, clean_up_tokenization_spaces=False))

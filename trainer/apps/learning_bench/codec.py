"""A character vocabulary for the benchmark's tiny models: one token per character plus
begin-of-sequence and end-of-action tokens. Its name is recorded in the store's ``tokenizer``
column, so the trainer's tokenizer check compares ids against exactly this vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trajstore.errors import TrajstoreError

CHAR_TOKENIZER_NAME = "trajstore-char-v1"
"""Tokenizer identity of :class:`CharCodec` (the ``tokenizer`` column and the trainer's check)."""

ALPHABET = "0123456789abcdef<>=?RWGS|"
"""Characters with their own token: hex digits (numbers), ``<`` / ``>`` / ``=`` (guess feedback),
``?`` (invalid action), ``R`` / ``W`` (right / wrong), ``G`` / ``S`` (task tags), ``|`` (end of prompt)."""

BOS, EOS = "<s>", "</a>"
"""Special tokens: begin of sequence (id 0) and end of action (id 1, the stop token)."""


class CodecError(TrajstoreError):
    """Text with a character outside :data:`ALPHABET`."""


@dataclass(frozen=True)
class CharCodec:
    """Maps characters to ids and back. Ids: 0 = BOS, 1 = EOS, 2.. = :data:`ALPHABET` in order.

    Attributes:
        name: the tokenizer identity (:data:`CHAR_TOKENIZER_NAME`).
    """

    name: str = CHAR_TOKENIZER_NAME
    bos_token_id: int = 0
    eos_token_id: int = 1

    @property
    def vocab_size(self) -> int:
        """Number of ids (tokens): 2 special + len(ALPHABET)."""
        return 2 + len(ALPHABET)

    def encode(self, text: str) -> list[int]:
        """Ids of `text`, one per character, no special tokens.

        Raises:
            CodecError: a character is not in :data:`ALPHABET` (named with its position).
        """
        out = []
        for i, ch in enumerate(text):
            j = ALPHABET.find(ch)
            if j < 0:
                raise CodecError(f"character {ch!r} at position {i} of {text!r} is not in the benchmark alphabet")
            out.append(j + 2)
        return out

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`; BOS / EOS render as ``<s>`` / ``</a>``.

        Raises:
            CodecError: an id outside ``[0, vocab_size)``.
        """
        parts = []
        for i in ids:
            if i == self.bos_token_id:
                parts.append(BOS)
            elif i == self.eos_token_id:
                parts.append(EOS)
            elif 2 <= i < self.vocab_size:
                parts.append(ALPHABET[i - 2])
            else:
                raise CodecError(f"token id {i} is outside the benchmark vocabulary [0, {self.vocab_size})")
        return "".join(parts)

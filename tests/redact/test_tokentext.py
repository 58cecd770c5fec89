"""Token ids as bytes (trajstore/redact/tokentext.py): SmolLM2's ids give back the text they encode
byte for byte, character offsets map to bytes, a character range maps to the tokens covering it
(widened to whole UTF-8 characters), and a tokenizer whose bytes cannot be recovered is refused."""

from __future__ import annotations

import numpy as np
import pytest

from trajstore.redact.tokentext import TokenBytes, UnsupportedTokenizerError, char_to_byte
from trajstore.redact.trajectory import _covering


@pytest.mark.parametrize("text", ["plain ascii", "ünïcödé 日本語 🙂", "<|im_start|>user\nhi<|im_end|>\n", "a\tb  c\n\n"])
def test_smollm2_ids_give_back_their_text(smol_tokenizer, text):
    tb = TokenBytes(smol_tokenizer, "smol")
    assert tb.kind == "byte_level"
    ids = tb.encode_plain(text)
    assert tb.bytes_of(ids) == text.encode("utf-8")
    off = tb.offsets(ids)
    assert off[0] == 0 and off[-1] == len(text.encode("utf-8"))
    assert all(tb.bytes_of(ids[j:j + 1]) == text.encode()[off[j]:off[j + 1]] for j in range(len(ids)))
    again, exact = tb.encode_exact(text)
    assert exact and np.array_equal(again, ids)


def test_char_to_byte_counts_utf8_lengths():
    assert char_to_byte("abc") is None  # ASCII: the character offsets are the byte offsets
    # a (1) ü (2) 日 (3) 🙂 (4) and a surrogate escape of a stray byte (1)
    text = "aü日🙂" + b"\xff".decode("utf-8", "surrogateescape")
    assert char_to_byte(text).tolist() == [0, 1, 3, 6, 10, 11]


def test_covering_tokens_widen_to_whole_characters():
    # tokens: "ab" | first byte of ü | second byte of ü | "d"   (bytes a b c3 bc d)
    blob = b"ab\xc3\xbcd"
    off = np.array([0, 2, 3, 4, 5])
    assert _covering(blob, off, 2, 4, 0, 4) == (1, 3)   # ü: its two tokens
    assert _covering(blob, off, 4, 5, 0, 4) == (3, 4)   # d
    assert _covering(blob, off, 3, 5, 0, 4) == (1, 4)   # from inside ü: back to its first byte
    assert _covering(blob, off, 1, 2, 0, 4) == (0, 1)   # b: the token "ab" (ü starts a new character)
    assert _covering(blob, off, 0, 1, 1, 4) == (1, 3)   # clamped into the span [1, 4), then ü whole


class _LossyTokenizer:
    """Byte ids whose single-id decode loses partial characters (as a slow tokenizer's would)."""

    def __len__(self) -> int:
        return 256

    def convert_ids_to_tokens(self, ids):
        return [str(i) for i in ids]

    def encode(self, text, add_special_tokens=False):
        return list(text.encode("utf-8"))

    def decode(self, ids):
        return bytes(ids).decode("utf-8", "replace")


def test_a_tokenizer_whose_bytes_cannot_be_recovered_is_refused():
    with pytest.raises(UnsupportedTokenizerError, match="lossy: the bytes of its token ids cannot be recovered"):
        TokenBytes(_LossyTokenizer(), "lossy")

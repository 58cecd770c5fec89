"""Token ids as bytes and text, for one tokenizer: the bytes every id stands for (so a character
range of decoded text maps to the token range that covers it, the "offset mapping" of stored ids,
which re-encoding the text would not give back), and encoding a replacement text."""

from __future__ import annotations

import functools
import json
from typing import Any

import numpy as np

from trajstore.errors import TrajstoreError
from trajstore.hub import load_tokenizer

_SELF_TEST = "Hello wörld, ünïcode 日本語 🙂 x=1\n\ttabs  and  spaces; sk_live_ [x]@y.io"
"""Text every tokenizer must give back byte for byte through :class:`TokenBytes`."""


class UnsupportedTokenizerError(TrajstoreError):
    """The bytes of a tokenizer's ids cannot be recovered exactly, so spans cannot be rewritten."""


@functools.cache
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet (the printable character each byte is written as), inverted."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def _decoder_kind(tok: Any) -> str:
    """``byte_level`` (GPT-2, Llama 3, Qwen, SmolLM2), ``sentencepiece`` (``▁`` for spaces, ``<0xNN>``
    byte fallback: Llama 2, Mistral) or ``other`` (each id decoded alone)."""
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None:
        return "other"
    decoder = json.loads(backend.to_str()).get("decoder") or {}
    kinds = {decoder.get("type")} | {d.get("type") for d in decoder.get("decoders") or []}
    if "ByteLevel" in kinds:
        return "byte_level"
    if kinds & {"Metaspace", "ByteFallback", "Replace"}:
        return "sentencepiece"
    return "other"


class TokenBytes:
    """The bytes each token id of `tok` stands for, and encoding text back to ids.

    Args:
        tok: a transformers tokenizer (fast ones: byte-level or SentencePiece vocabularies).
        name: what to call it in errors.

    Raises:
        UnsupportedTokenizerError: joining the bytes of its ids does not give back the text they
            encode (checked on a sample with accents, CJK, an emoji and whitespace runs).
    """

    def __init__(self, tok: Any, name: str):
        self.tok = tok
        self.name = name
        self.kind = _decoder_kind(tok)
        size = len(tok)
        pieces = tok.convert_ids_to_tokens(list(range(size)))
        added = {i: t.content for i, t in getattr(tok, "added_tokens_decoder", {}).items()}
        table: list[bytes] = []
        bd = _byte_decoder()
        for i, p in enumerate(pieces):
            if i in added:
                table.append(added[i].encode("utf-8"))
            elif p is None:
                table.append(b"")
            elif self.kind == "byte_level":
                table.append(bytes(bd[c] for c in p) if all(c in bd for c in p) else p.encode("utf-8"))
            elif self.kind == "sentencepiece":
                if len(p) == 6 and p.startswith("<0x") and p.endswith(">"):
                    table.append(bytes([int(p[3:5], 16)]))
                else:
                    table.append(p.replace("\u2581", " ").encode("utf-8"))
            else:
                table.append(tok.decode([i]).encode("utf-8"))
        self.table = table
        self.lengths = np.fromiter((len(b) for b in table), dtype=np.int64, count=len(table))
        ids = self.encode_plain(_SELF_TEST)
        got = self.bytes_of(ids)
        want = _SELF_TEST.encode("utf-8")
        if got != want and got.lstrip(b" ") != want:  # SentencePiece adds a space before the first word
            raise UnsupportedTokenizerError(
                f"tokenizer {name}: the bytes of its token ids cannot be recovered exactly ({self.kind} decoder), "
                "so its spans cannot be redacted token by token")

    def encode_plain(self, text: str) -> np.ndarray:
        """`text` as ids, no special tokens added, int32 (K,)."""
        return np.asarray(self.tok.encode(text, add_special_tokens=False), dtype=np.int32)

    def bytes_of(self, ids: np.ndarray) -> bytes:
        """The bytes `ids` stand for (ids outside the vocabulary stand for none)."""
        table, n = self.table, len(self.table)
        return b"".join([table[i] if 0 <= i < n else b"" for i in ids.tolist()])

    def offsets(self, ids: np.ndarray) -> np.ndarray:
        """Byte offset of each token in :meth:`bytes_of` (`ids`), int64 (K + 1,): token j is
        ``bytes[offsets[j]:offsets[j + 1]]``."""
        ok = (ids >= 0) & (ids < len(self.lengths))
        lens = np.where(ok, self.lengths[np.where(ok, ids, 0)], 0)
        out = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(lens, out=out[1:])
        return out

    def encode_exact(self, text: str) -> tuple[np.ndarray, bool]:
        """`text` as ids and whether they stand for exactly its UTF-8 bytes (False: a SentencePiece
        vocabulary added a leading space that could not be removed)."""
        ids = self.encode_plain(text)
        want = text.encode("utf-8")
        if self.bytes_of(ids) == want:
            return ids, True
        if len(ids) and self.bytes_of(ids[:1]).startswith(b" ") and not want.startswith(b" "):
            head = self.bytes_of(ids[:1])[1:]  # "▁foo" for "foo": the same piece without its space
            rest = ids[1:]
            if not head:
                return rest, self.bytes_of(rest) == want
        return ids, False


def char_to_byte(text: str) -> np.ndarray | None:
    """Byte offset (UTF-8, surrogate escapes 1 byte) of each character of `text`, int64 (len + 1,);
    None when `text` is ASCII (offsets are the character offsets)."""
    if text.isascii():
        return None
    cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    lens = 1 + (cps >= 0x80).astype(np.int64) + (cps >= 0x800) + (cps >= 0x10000)
    lens[(cps >= 0xDC80) & (cps <= 0xDCFF)] = 1  # a byte that is not UTF-8, kept by surrogateescape
    out = np.zeros(len(text) + 1, dtype=np.int64)
    np.cumsum(lens, out=out[1:])
    return out


@functools.lru_cache(maxsize=8)
def token_bytes_for(name: str) -> TokenBytes:
    """:class:`TokenBytes` of the tokenizer `name` (:func:`trajstore.hub.load_tokenizer`), cached.

    Raises:
        TrajstoreError: the tokenizer cannot be loaded (not found offline, transformers missing).
        UnsupportedTokenizerError: its ids' bytes cannot be recovered.
    """
    return TokenBytes(load_tokenizer(name), name)

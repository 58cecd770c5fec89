"""trainer/apps/learning_bench/codec.py: the character codec round trip and its errors."""

from __future__ import annotations

import pytest

from trajstore.trainer.apps.learning_bench.codec import CharCodec, CodecError


def test_codec_round_trip_and_errors() -> None:
    c = CharCodec()
    ids = c.encode("G|5<")
    # ids are 2 + position in ALPHABET "0123456789abcdef<>=?RWGS|": G=22, |=24, 5=5, <=16
    assert ids == [24, 26, 7, 18]
    assert c.decode([0, *ids, 1]) == "<s>G|5<</a>"
    assert c.vocab_size == 27
    with pytest.raises(CodecError, match="'x' at position 1"):
        c.encode("Gx")

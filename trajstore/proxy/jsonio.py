"""JSON as ``traj proxy`` reads and writes it: strict parsing of what clients send (no NaN or
Infinity, which the upstream, the store and SDKs refuse), and orjson for the upstream's traffic
with the standard library as the fallback for what orjson cannot handle."""

from __future__ import annotations

import json
import math
from typing import Any

import orjson


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON (RFC 8259 has no NaN or Infinity)")


def _finite_float(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise ValueError(f"number {text[:40]} is out of the float range")
    return x


def strict_json_loads(raw: bytes | str) -> Any:
    """``json.loads`` that refuses NaN, Infinity and numbers that overflow to infinity (Python
    accepts them; the upstream, the store and the client's SDK do not).

    Raises:
        ValueError: invalid or non-strict JSON, with the reason.
    """
    return json.loads(raw, parse_constant=_refuse_constant, parse_float=_finite_float)


def fast_loads(raw: bytes) -> Any:
    """Parse an upstream's JSON: orjson (about 4x faster than ``json`` on a response with ids and
    log-probs), else the standard library, which also reads NaN, Infinity and integers beyond
    64 bits (an upstream may send them; the recorder decides what they mean)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


def fast_dumps(obj: Any) -> bytes:
    """Compact JSON bytes (orjson; the standard library for what orjson cannot write, e.g. an
    integer beyond 64 bits a client passed through)."""
    try:
        return orjson.dumps(obj)
    except TypeError:  # orjson.JSONEncodeError
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()

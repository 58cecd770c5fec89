"""Request bodies as trajstore's HTTP servers read them: strict JSON (RFC 8259) and nothing that
would fail later, where it would be a 500 or a row the store refuses: no NaN or Infinity, no number
that overflows to infinity, no invalid UTF-8 and no lone UTF-16 surrogate (``"\\ud800"`` parses in
Python, then cannot be encoded, sent upstream or stored), no nesting deeper than
:data:`MAX_JSON_DEPTH` (Python's parser recurses; 100,000 ``[`` were a ``RecursionError``)."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from starlette.requests import Request

from trajstore.http.limits import BodyError, read_body

MAX_JSON_DEPTH = 128
"""Deepest nesting of arrays and objects accepted (an OpenAI request with tool schemas has about 10)."""

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
"""A ``\\uD800``-``\\uDFFF`` escape: only a body with one can hold a lone surrogate once parsed."""


_JSON_TYPES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON (RFC 8259 has no NaN or Infinity)")


def _finite_float(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise ValueError(f"number {text[:40]} is out of the float range")
    return x


def _check_tree(value: Any, *, strings: bool) -> None:
    """Refuse nesting deeper than :data:`MAX_JSON_DEPTH` and (with `strings`) strings or keys
    holding a lone surrogate. Iterative: the value may be as deep as the parser allowed."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, (dict, list)):
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
            items = v.values() if isinstance(v, dict) else v
            stack.extend((x, depth) for x in items)
            if strings and isinstance(v, dict):
                stack.extend((k, depth) for k in v)
        elif strings and isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(f"string {v[:40]!r} holds a lone UTF-16 surrogate (not Unicode text)") from None


def strict_json_loads(raw: bytes | str) -> Any:
    """Parse strict JSON (see the module docstring). Integers keep their full size (the routes
    check their range, naming the field).

    Raises:
        ValueError: not strict JSON, with the reason (``not UTF-8``, ``NaN is not JSON``,
            ``nested deeper than 128 levels``, ...).
    """
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"not UTF-8 (byte {e.start})") from None
    try:
        value = json.loads(raw, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    strings = _SURROGATE_ESCAPE.search(raw) is not None
    if strings or raw.count("[") + raw.count("{") > MAX_JSON_DEPTH:  # else it cannot be too deep
        _check_tree(value, strings=strings)
    return value


async def read_json_object(request: Request, limit: int, *, empty_is_object: bool = False) -> dict[str, Any]:
    """The request body as a strict JSON object.

    Args:
        limit: the largest body accepted (bytes).
        empty_is_object: an empty body is ``{}`` (else it is refused).

    Raises:
        BodyError: 413 beyond `limit`; 400 when the body is not a strict JSON object (the
            message says why).
    """
    raw = await read_body(request, limit)
    if not raw and empty_is_object:
        return {}
    try:
        body = strict_json_loads(raw)
    except ValueError as e:
        raise BodyError(400, f"request body is not a JSON object: {e}") from None
    if not isinstance(body, dict):
        raise BodyError(400, f"request body is not a JSON object (a JSON {_JSON_TYPES.get(type(body), 'value')})")
    return body

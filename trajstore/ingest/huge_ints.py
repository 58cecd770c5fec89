"""JSON integers with more digits than Python converts: a stand-in (:class:`HugeInt`) so the
rest of a document can still be read, and the one-line reason that refuses the record holding
one, naming its field.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class HugeInt:
    """Stands in for a JSON integer with more digits than Python converts
    (``sys.get_int_max_str_digits()``, 4300 by default), so the rest of a document can be read
    and the record holding it refused with the field's name."""

    digits: int


def _huge_int_limit() -> int:
    return sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 0


def _parse_int(s: str) -> int | HugeInt:
    limit = _huge_int_limit()
    n = len(s) - s.startswith("-")
    return HugeInt(n) if limit and n > limit else int(s)


def is_int_limit(e: ValueError) -> bool:
    """Whether a ``json.loads`` error is Python's refusal to convert an integer of too many
    digits (read the document again with :func:`loads_with_huge_ints`), not a syntax error."""
    return not isinstance(e, json.JSONDecodeError) and "integer string conversion" in str(e)


def find_huge_int(v: Any, where: str = "") -> tuple[str, int] | None:
    """(field path, digits) of the first :class:`HugeInt` in `v` (``messages[2].content``,
    ``reward``; ``""`` when `v` is one), or None."""
    if isinstance(v, HugeInt):
        return where, v.digits
    if isinstance(v, dict):
        for k, x in v.items():
            if isinstance(x, (dict, list, HugeInt)):
                hit = find_huge_int(x, f"{where}.{k}" if where else str(k))
                if hit:
                    return hit
    elif isinstance(v, list):
        for i, x in enumerate(v):
            if isinstance(x, (dict, list, HugeInt)):
                hit = find_huge_int(x, f"{where}[{i}]")
                if hit:
                    return hit
    return None


def huge_int_reason(hit: tuple[str, int]) -> str:
    """The one-line reason for a record refused because of :func:`find_huge_int`'s `hit`."""
    where, digits = hit
    return (f"field {where or '(the whole value)'} is an integer of {digits} digits: too large for any field "
            f"(numbers are read up to {_huge_int_limit()} digits)")


def loads_with_huge_ints(text: str) -> Any:
    """``json.loads`` with :class:`HugeInt` stand-ins for integers too long to convert (slower:
    used only once the fast parse has met one)."""
    try:
        return json.loads(text, parse_int=_parse_int)
    except RecursionError:
        raise ValueError("JSON nested too deeply to parse") from None

"""Reading the JSON values of a log record and naming what is wrong with one: fields stored as
JSON-encoded strings, time stamps, lists ordered by their ids, and the short descriptions
(``a string ('ls -la')``) the parsers' error messages use.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from typing import Any

from trajstore.ingest.huge_ints import find_huge_int, huge_int_reason, is_int_limit, loads_with_huge_ints
from trajstore.ingest.records import RecordError


def json_field(value: Any, field: str) -> Any:
    """A field that datasets store either as JSON or as a JSON-encoded string (Hugging Face rows
    often keep the chat as a string): a string is decoded, anything else returned as is.

    Raises:
        RecordError: the string is not valid JSON.
    """
    if isinstance(value, str):
        try:
            return json.loads(value)
        except RecursionError:
            raise RecordError(f"{field} is a string of JSON nested too deeply to parse") from None
        except ValueError as e:
            if is_int_limit(e):
                hit = find_huge_int(loads_with_huge_ints(value))
                if hit:
                    sep = "" if hit[0].startswith("[") or not hit[0] else "."
                    raise RecordError(huge_int_reason((f"{field}{sep}{hit[0]}", hit[1]))) from None
            raise RecordError(f"{field} is a string that is not JSON ({e})") from None
    return value


def json_type(v: Any) -> str:
    """What `v` is, in JSON words with a short excerpt, for error messages: ``a string ('ls -la')``,
    ``an object (keys: name, arguments)``, ``a number (3)``, ``null``."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"a boolean ({str(v).lower()})"
    if isinstance(v, str):
        return f"a string ({clip_value(v)})"
    if isinstance(v, dict):
        keys = ", ".join(map(str, list(v)[:5])) + (", ..." if len(v) > 5 else "")
        return f"an object (keys: {keys})" if v else "an empty object"
    if isinstance(v, (int, float)):
        return f"a number ({clip_value(v)})"
    if isinstance(v, (list, tuple)):
        return f"a list of {len(v)}"
    return f"a {type(v).__name__}"


def order_by_id(items: list[Any], *, key: str = "id", what: str = "event") -> tuple[list[Any], int]:
    """`items` in the order of their integer `key` when every object item carries one (OpenHands
    V0 event ids, ATIF ``step_id``): a log written or merged out of order is read in the order
    it happened. Items of other shapes (id-less events, ``[action, observation]`` pairs) are
    returned unchanged. An exact repeat of an item is dropped.

    Returns:
        (ordered items, number of items that were out of order or repeated).

    Raises:
        RecordError: two different items share an id (the order cannot be known).
    """
    ids = [it.get(key) if isinstance(it, dict) else None for it in items]
    if not items or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        return items, 0
    first: dict[int, int] = {}
    keep: list[int] = []
    for n, i in enumerate(ids):
        if i in first:
            if items[first[i]] != items[n]:
                raise RecordError(f"{what}s {first[i]} and {n} share {key} {i} with different content: "
                                  "their order cannot be known")
            continue
        first[i] = n
        keep.append(n)
    ordered = sorted(keep, key=lambda n: ids[n])
    moved = len(items) - len(keep) + sum(1 for a, b in zip(ordered, keep) if a != b)
    return [items[n] for n in ordered], moved


def text_or_none(v: Any) -> str | None:
    """`v` when it is a string with something besides whitespace, else None: an empty model name
    or id in a log means unknown, and is stored as null (so ``IS NULL`` filters find it)."""
    return v if isinstance(v, str) and v.strip() else None


def blank_to_none(v: Any) -> Any:
    """None for an empty or all-whitespace string, else `v` unchanged (other types are checked
    where they are stored)."""
    return None if isinstance(v, str) and not v.strip() else v


def parse_time(v: Any) -> datetime | None:
    """A UTC datetime from an ISO string or a POSIX time in seconds; None when absent, unparsable
    or not after the epoch (0 is a clock never set, as NeMo Gym's ``created_at: 0.0``, not 1970)."""
    try:
        if isinstance(v, bool) or v is None:
            return None
        if isinstance(v, (int, float)):
            return datetime.fromtimestamp(float(v), tz=timezone.utc) if v > 0 else None
        if isinstance(v, str) and v:
            d = datetime.fromisoformat(v.replace("Z", "+00:00"))
            return d.replace(tzinfo=timezone.utc) if d.tzinfo is None else d.astimezone(timezone.utc)
    except (ValueError, OverflowError, OSError):
        return None
    return None


def clip_value(v: Any, n: int = 40) -> str:
    """`v` as a short repr for an error line (a huge integer is described, never converted)."""
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 200:
        try:
            return f"an integer of {len(str(abs(v)))} digits"
        except ValueError:  # more digits than Python converts
            return f"an integer of more than {sys.get_int_max_str_digits()} digits"
    r = repr(v)
    return r if len(r) <= n else r[:n] + "..."

"""Logged outcomes as a :class:`~trajstore.ingest.records.Reward`: a boolean-ish ``resolved``
(:func:`bool_reward`) or a numeric score (:func:`float_reward`); a value of neither kind is the
record's error, never a silent null reward.
"""

from __future__ import annotations

import math
from typing import Any

from trajstore.ingest.records import RecordError, Reward
from trajstore.ingest.values import clip_value

TRUE_SPELLINGS: frozenset[str] = frozenset({"true", "1", "yes"})
FALSE_SPELLINGS: frozenset[str] = frozenset({"false", "0", "no"})
"""String spellings of an outcome (compared lower-cased, stripped): SWE-smith / SWE-agent rows and
CSV-derived datasets write ``resolved: "true"``."""


def bool_reward(v: Any, field: str = "resolved") -> Reward:
    """A boolean-ish outcome as reward 1.0 / 0.0: True/False, 1/0, or the strings of
    :data:`TRUE_SPELLINGS` / :data:`FALSE_SPELLINGS` (the raw value is kept as logged);
    None or an empty string is no reward.

    Args:
        v: the logged value.
        field: its name in the input (``resolved``, ``target``, ...), for the error.

    Raises:
        RecordError: any other value (``resolved is 'maybe': expected true/false or 1/0``):
            never stored as a silent null reward.
    """
    if isinstance(v, bool):
        return Reward(1.0 if v else 0.0, v, field=field)
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v in (0, 1):
        return Reward(float(v), v, field=field)
    if v is None or (isinstance(v, str) and not v.strip()):
        return Reward(None, v or None, field=field)
    if isinstance(v, str) and v.strip().lower() in TRUE_SPELLINGS | FALSE_SPELLINGS:
        return Reward(1.0 if v.strip().lower() in TRUE_SPELLINGS else 0.0, v, field=field)
    raise RecordError(f"{field} is {clip_value(v)}: expected true/false or 1/0")


def float_reward(v: Any, field: str = "reward") -> Reward:
    """A numeric reward: a finite number, a bool (1.0 / 0.0), or a string holding either
    (``"0.5"``, ``"true"``; the raw value is kept as logged); None or an empty string is no
    reward.

    Args:
        v: the logged value.
        field: its name in the input (``reward``, ``score``, ...), for the error.

    Raises:
        RecordError: NaN, an infinity, a number too large for a float, or a value that is not
            a number (``score is 'n/a': expected a finite number``): never a silent null.
    """
    if isinstance(v, bool):
        return Reward(1.0 if v else 0.0, v, field=field)
    if v is None or (isinstance(v, str) and not v.strip()):
        return Reward(None, v or None, field=field)
    x: float | None = None
    if isinstance(v, (int, float)):
        try:
            x = float(v)
        except OverflowError:
            raise RecordError(f"{field} is {clip_value(v)}: too large for a reward (a finite number)") from None
    elif isinstance(v, str):
        s = v.strip().lower()
        if s in ("true", "false"):
            return Reward(1.0 if s == "true" else 0.0, v, field=field)
        try:
            x = float(s)
        except ValueError:
            raise RecordError(f"{field} is {clip_value(v)}: expected a finite number") from None
    else:
        raise RecordError(f"{field} is a {type(v).__name__} ({clip_value(v)}): expected a finite number")
    if not math.isfinite(x):
        raise RecordError(f"{field} is {clip_value(v)}: expected a finite number")
    return Reward(x, v, field=field)

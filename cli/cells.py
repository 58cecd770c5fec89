"""How one value prints in ``traj``'s table output: the number format of a column (shares with
three decimals, other floats with one number of decimals per column, never a false zero), plain
text for times, lists and missing values, and values made JSON-able for ``json`` / ``csv``.

Number format (the ``table`` output; JSON and CSV keep full precision):

- shares (columns named ``share*``, ``*_share``, ``*_frac``, ``*_fraction``, ``masked*``) always
  have :data:`SHARE_DECIMALS` decimals: ``0.000``, ``0.250``, ``1.000``;
- other float columns get one number of decimals per column from their largest magnitude: 3
  between 0.1 and 10, one fewer per power of ten above (``35.00``, ``777.6``, ``14160``), one more
  per power of ten below (``0.0145``), at most :data:`MAX_DECIMALS`; a value that would show
  fewer than two significant digits at its column's decimals gets its own (``1505`` above
  ``0.498``, never ``0``); integer columns print as integers. Scientific notation only for a
  non-zero value too small for :data:`MAX_DECIMALS` (``-2.76e-09``, never ``-0.000000``);
- missing values print as ``-``, times as ``YYYY-MM-DD HH:MM:SS+00:00``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

SHARE_DECIMALS: int = 3
"""Decimals of every share (a fraction in [0, 1]) in table output."""
MAX_DECIMALS: int = 6
"""At most this many decimals in a float column (smaller values round to 0.000000)."""

_SHARE_NAME = re.compile(r"(^|_)(share|frac|fraction)(_|$)|^masked")


def is_share_column(name: str) -> bool:
    """True when the column holds a share in [0, 1] by its name (the last ``/`` part):
    ``share_with_logprob``, ``share``, ``masked_below``, ``perf/data_wait_frac``."""
    return bool(_SHARE_NAME.search(name.rsplit("/", 1)[-1]))


SIZE_TEXT = re.compile(r"^-?[0-9][0-9.,]* ?(?:[kKMGTP]i?)?B$")
"""A size already formatted for people (``6.4 KB``, ``512 B``, ``1.5 GiB``): aligned right like numbers."""


def as_number(v: Any) -> float | int | None:
    """`v` as a number when it is one (a whole ``Decimal`` as an int), else None (booleans too)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, decimal.Decimal):  # DuckDB's SUM of integers, DECIMAL columns
        return int(v) if v.is_finite() and v.as_tuple().exponent >= 0 else float(v)
    if isinstance(v, (int, float)):
        return v
    return None


def format_value(v: Any) -> str:
    """One cell outside a column context (text, times, lists); numbers as :func:`column_formatter`
    would print a column holding only `v`."""
    return column_formatter("", [v])(v)


def _plain(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dt.datetime):
        return v.isoformat(sep=" ", timespec="seconds")
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(format_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return json.dumps(jsonable(v), separators=(",", ":"))
    if isinstance(v, bytes):
        return v.hex()
    return str(v)


def _decimals(values: Iterable[float | int]) -> int:
    """Decimals for a float column, from its largest magnitude m: 3 for m in [0.1, 10) (like
    shares), one fewer per power of ten above (35.0 -> 2: ``35.00``; 29710 -> 0: ``29710``), one
    more per power of ten below 0.1 (0.0145 -> 4: ``0.0145``), at most MAX_DECIMALS. A float
    column keeps its decimals even when every value is whole (``8.000``): the type says it is
    a measurement, and the same column never prints ``1`` in one run and ``1.000`` in another."""
    biggest = max((abs(float(x)) for x in values if math.isfinite(x)), default=0.0)
    if biggest == 0.0:
        return SHARE_DECIMALS
    e = math.floor(math.log10(biggest))
    return max(0, min(MAX_DECIMALS, SHARE_DECIMALS - e if e >= 0 else SHARE_DECIMALS - 1 - e))


def column_formatter(name: str, values: Sequence[Any], *, share: bool | None = None) -> Callable[[Any], str]:
    """The cell formatter of one column: shares with SHARE_DECIMALS decimals, other float columns
    with one shared number of decimals (see :func:`_decimals`), ints as they are, missing as ``-``.

    Args:
        share: the column holds shares in [0, 1]; None: decide by its name (:func:`is_share_column`).
    """
    nums = [as_number(v) for v in values]
    floats = [x for x in nums if isinstance(x, float)]
    share_col = bool(floats) and (is_share_column(name) if share is None else share)
    if share_col:
        places = SHARE_DECIMALS
    elif floats:
        places = _decimals(x for x in nums if x is not None)
    else:
        places = None

    def fmt(v: Any) -> str:
        x = as_number(v)
        if x is None:
            return _plain(v)
        if isinstance(x, float) and not math.isfinite(x):
            return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
        if places is None:
            return str(x)
        if not share_col and x != 0 and abs(x) < 10 ** (1 - places):
            # fewer than two significant digits at the column's decimals (0.498 next to 1504.7
            # would print 0): this value gets its own, as a column holding only it would
            own = _decimals([x])
            if abs(x) < 10 ** (1 - own):  # below MAX_DECIMALS' reach (a KL of -2.8e-9): never a false 0
                return f"{x:.2e}"
            return f"{x:.{own}f}"
        return f"{x:.{places}f}"

    return fmt


def jsonable(v: Any) -> Any:
    """`v` as JSON-able data: non-finite floats -> None, times -> ISO strings, Decimal -> float."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (dt.datetime, dt.date)):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):  # DuckDB's SUM of integers, DECIMAL columns
        return int(v) if v.is_finite() and v.as_tuple().exponent >= 0 else float(v)
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    return v

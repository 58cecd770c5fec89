"""trajstore/cli/cells.py: how one value is printed (no scientific notation, fixed decimals)."""

from __future__ import annotations

import datetime as dt

from trajstore.cli.cells import column_formatter


def _fmt(name: str, values: list) -> list[str]:
    f = column_formatter(name, values)
    return [f(v) for v in values]


def test_float_columns_never_use_scientific_notation():
    # largest |value| 29710.4 has 5 digits before the point -> 0 decimals; 14162.3 -> "14162"
    assert _fmt("observation_tokens_mean", [14162.3, 29710.4, 115.2]) == ["14162", "29710", "115"]
    # largest 35.0 (2 digits) -> 3 - 1 = 2 decimals
    assert _fmt("turns_mean", [35.0, 9.8, 3.15]) == ["35.00", "9.80", "3.15"]
    # largest 0.52 (in [0.1, 1)) -> 3 decimals, like shares
    assert _fmt("ratio_mean", [0.5086, -0.2796]) == ["0.509", "-0.280"]
    # largest 0.0145 is 10^-2 -> 3 + 1 = 4 decimals
    assert _fmt("loss", [0.0145, 0.0031]) == ["0.0145", "0.0031"]
    # a value that would keep fewer than two significant digits gets its own decimals: a mixed
    # column of step metrics (loss 0.498 next to 1504.7 tokens/s) printed the loss as "0"
    assert _fmt("value", [1504.74, 0.498, 0.004, 0.0]) == ["1505", "0.498", "0.00400", "0"]
    assert _fmt("loss", [0.0145, 0.00001]) == ["0.0145", "0.000010"]
    # too small for MAX_DECIMALS: scientific, never a false zero (a KL of -2.8e-9 read -0.000000)
    assert _fmt("policy/kl_k3", [-2.7625694585769722e-09]) == ["-2.76e-09"]
    assert _fmt("value", [3.5, 3e-9, 0.0]) == ["3.500", "3.00e-09", "0.000"]
    assert _fmt("share", [0.0001, 0.5]) == ["0.000", "0.500"]  # shares keep their 3 decimals
    # a float column keeps its decimals when its values happen to be whole (largest 8 -> 3)
    assert _fmt("data/trajectories", [8.0, 4.0]) == ["8.000", "4.000"]
    assert _fmt("p50", [0.0, 1.0]) == ["0.000", "1.000"]
    assert _fmt("x", [float("nan"), 1.5]) == ["nan", "1.500"]
    assert _fmt("n", [3, None, 12]) == ["3", "-", "12"]
    import decimal  # DuckDB's SUM over integers: a whole Decimal is an integer ("18", not "18.00")
    assert _fmt("s", [decimal.Decimal(18), decimal.Decimal(3)]) == ["18", "3"]


def test_other_values():
    t = dt.datetime(2026, 7, 1, 12, 30, 5, 123456, tzinfo=dt.timezone.utc)
    assert _fmt("wall_time", [t]) == ["2026-07-01 12:30:05+00:00"]
    assert _fmt("shards", [["a", "b"]]) == ["[a, b]"]
    assert _fmt("flag", [True, False]) == ["true", "false"]

"""trajstore/audit/percentiles.py: weighted percentiles equal DuckDB's quantile_disc on the
expanded data and nearest rank by hand."""

from __future__ import annotations

import numpy as np
import pytest

from trajstore.audit.percentiles import weighted_percentiles_sql


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_weighted_percentiles_equal_quantile_disc_on_expanded_data(conn, seed):
    rng = np.random.default_rng(seed)
    vals = rng.integers(0, 30, size=200)
    weights = rng.integers(1, 5, size=200)
    conn.execute("CREATE OR REPLACE TEMP TABLE h AS SELECT * FROM (SELECT unnest(?) AS v, unnest(?) AS w)",
                 [vals.tolist(), weights.tolist()])
    hist = "(SELECT v, sum(w) AS w FROM h GROUP BY v)"
    got = conn.execute(weighted_percentiles_sql(hist, (), "v", "w", "")).fetchall()[0]
    expanded = np.repeat(vals, weights)
    ref = conn.execute("SELECT quantile_disc(x, [0.5, 0.9, 0.99]) FROM (SELECT unnest(?) AS x)",
                       [expanded.tolist()]).fetchall()[0][0]
    # Nearest rank by hand with numpy: sorted[ceil(p N / 100) - 1].
    s = np.sort(expanded)
    by_hand = [int(s[-(-p * len(s) // 100) - 1]) for p in (50, 90, 99)]
    assert list(got[:3]) == ref == by_hand
    assert got[3] == expanded.max() and got[4] == pytest.approx(expanded.mean())

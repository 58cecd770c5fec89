"""trainer/apps/learning_bench/compare.py: two runs' claims side by side, by hand."""

from __future__ import annotations

import math

import pytest

from trajstore.trainer.apps.learning_bench.compare import compare_runs, comparison_table


def _claim(key: str, diffs: list[float], p_holm: float, verdict: str, metric: str = "auc") -> dict:
    return {"key": key, "metric": metric, "arm": "a", "ref": "sao", "task": "chain", "verdict": verdict,
            "interval": {"mean": sum(diffs) / len(diffs), "diffs": diffs}, "test": {"p_holm": p_holm}}


def test_directions_holm_and_labels_are_compared_row_by_row() -> None:
    a = {"claims": [_claim("x", [-1.0, -2.0, -3.0], 0.01, "reproduced"),
                    _claim("y", [1.0, 2.0, 3.0], 0.20, "inconclusive"),
                    _claim("z", [1.0, 1.0, 4.0], 0.03, "not reproduced", metric="corr"),
                    _claim("only-a", [0.0, 1.0], 0.5, "inconclusive")]}
    b = {"claims": [_claim("x", [-3.0, -2.0, -1.0], 0.02, "reproduced"),
                    _claim("y", [-1.0, -2.0, -3.0], math.nan, "not testable (no arm discriminates)"),
                    _claim("z", [-1.0, -1.0, -4.0], 0.04, "not reproduced", metric="corr")]}
    cmp = compare_runs(a, b)
    rows = {r["key"]: r for r in cmp["rows"]}
    assert set(rows) == {"x", "y", "z"}  # a claim in one run only is left out
    assert rows["x"]["significant"] == "both" and rows["x"]["same_direction"] and rows["x"]["same_label"]
    assert rows["x"]["r"] == pytest.approx(-1.0)  # the same values in the opposite seed order
    assert rows["y"]["significant"] == "neither" and not rows["y"]["same_direction"]
    assert rows["z"]["significant"] == "opposite" and rows["z"]["same_label"] and rows["z"]["r"] == pytest.approx(-1.0)
    c = cmp["counts"]
    assert (c["claims"], c["same_label"], c["same_direction"]) == (3, 2, 1)
    assert (c["significant_both"], c["significant_opposite"], c["significant_a"], c["significant_b"]) == (1, 1, 2, 2)
    assert c["r_training"] == pytest.approx((-1.0, -1.0)) and c["r_quality"] == pytest.approx((-1.0, -1.0))
    md = comparison_table(cmp, a="main", b="idle")
    assert "| a - sao (chain) | auc | -2.000, 0.010, reproduced | -2.000, 0.020, reproduced | yes | both | -1.00 |" in md
    assert "3 claims in both runs: the same verdict label on 2, the same direction of the mean difference on 1" in md

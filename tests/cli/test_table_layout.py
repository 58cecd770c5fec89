"""trajstore/cli/table_layout.py: the key columns a wide table repeats in every part."""

from __future__ import annotations

from trajstore.cli.table_layout import infer_keys


def test_infer_keys_is_the_shortest_unique_leading_run():
    rows = [("r1", 0, 0.5), ("r1", 1, 0.4), ("r2", 0, 0.3)]
    assert infer_keys(["run_id", "step", "loss"], rows) == ("run_id", "step")
    assert infer_keys(["source", "n"], [("a", 1), ("b", 1)]) == ("source",)
    assert infer_keys(["x"], [(1,)]) == ()  # one row needs no key
    assert infer_keys(["loss", "step"], [(0.5, 1), (0.4, 2)]) == ()  # a float is no key

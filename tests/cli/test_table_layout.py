"""trajstore/cli/table_layout.py: the key columns a wide table repeats in every part."""

from __future__ import annotations

from trajstore.cli.table_layout import infer_keys


def test_infer_keys_is_the_shortest_unique_leading_run():
    rows = [("r1", 0, 0.5), ("r1", 1, 0.4), ("r2", 0, 0.3)]
    assert infer_keys(["run_id", "step", "loss"], rows) == ("run_id", "step")
    assert infer_keys(["source", "n"], [("a", 1), ("b", 1)]) == ("source",)
    assert infer_keys(["x"], [(1,)]) == ()  # one row needs no key
    assert infer_keys(["loss", "step"], [(0.5, 1), (0.4, 2)]) == ()  # a float is no key


def test_a_whole_table_stays_one_table_with_its_ids_cut_in_the_middle():
    # the short overview of `traj stats` must fit 80x24: no transposing, no parts; run ids that
    # differ only at their end stay told apart
    from rich.console import Console

    from trajstore.cli.table_layout import print_inline, print_table
    from trajstore.tables import TableData

    ids = [f"an-experiment-with-a-long-name-seed{k}" for k in range(3)]  # 36 characters each
    table = TableData("t", ["run_id", "n", "staleness", "masked"], [(r, 10 * k, 1.5 + k, 0.25 * k) for k, r in enumerate(ids)])
    console = Console(width=60, record=True)
    print_table(console, table, whole=True)
    lines = console.export_text().splitlines()
    assert len(lines) == 1 + 3 + 3 + 1 and max(len(ln) for ln in lines) <= 60, lines  # title, head, rows, bottom
    # widths: n 2 ("10"), staleness 9, masked 6, each +3 (padding and border), +1 (right border):
    # 60 - 27 - 3 = 30 characters for the ids: the first 15, "…", the last 14
    assert [ln.split("│")[1].strip() for ln in lines[4:7]] == [
        f"an-experiment-w…ong-name-seed{k}" for k in range(3)]
    console = Console(width=40, record=True)
    print_inline(console, TableData("totals", ["shards", "trajectories", "episodes"], [(3, 15, 9)]))
    assert console.export_text().splitlines() == ["totals: shards 3, trajectories 15,", "  episodes 9"]

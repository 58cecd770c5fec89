"""trajstore/cli/table_layout.py: the key columns a wide table repeats in every part."""

from __future__ import annotations

import pytest

from trajstore.cli.table_layout import infer_keys, print_fields, print_inline, print_table


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


# walkthrough: the export summary's field names took the whole width when a not-trainable reason
# (a key of not_trainable_left_out) was long, leaving the value column zero characters wide
LONG_REASON = ("engine tokenizer 'acme/very-long-model-name-v3' unnamed in the source log and the context "
               "redacted by traj redact before the store was frozen for the release, so no token of these "
               "trajectories can be trusted to match what the engine sampled at the time of the rollout")


@pytest.mark.parametrize("width", [80, 200])
def test_print_fields_always_shows_the_values(width):
    from rich.console import Console


    console = Console(width=width, record=True)
    print_fields(console, "export trl", {"target": "trl", "exported": "12",
                                         f"not_trainable_left_out.{LONG_REASON}": "7",
                                         "note": "a value " * 40})
    text = console.export_text()
    lines = text.splitlines()
    assert max(len(ln) for ln in lines) <= width, text
    rows = {ln.split("│")[1].strip(): ln.split("│")[2].strip() for ln in lines if ln.count("│") == 3}
    assert rows["target"] == "trl" and rows["exported"] == "12", text
    assert "7" in [v for v in rows.values()], text  # the long field's value is printed
    assert all(len(ln.split("│")[2]) >= 3 for ln in lines if ln.count("│") == 3), text  # a value column
    assert rows["note"].startswith("a value a value"), text  # a long value wraps in its column


def test_export_summary_with_a_long_not_trainable_reason_shows_its_values(tmp_path):
    import json

    from typer.testing import CliRunner

    from tests.helpers.export import three_turn_trajectories, write_store
    from trajstore.cli.main import app

    t1, t2 = three_turn_trajectories()
    nt = t1.model_copy(update={"trajectory_id": "nt", "not_trainable_reason": LONG_REASON})
    store = write_store(tmp_path / "s", [t1, nt, t2])
    for width in (80, 200):
        out = tmp_path / f"o{width}"
        res = CliRunner().invoke(app, ["export", store, "--to", "trl", "--output", str(out), "--allow-secrets",
                                       "--without", "logprobs", "--without", "rewards"], env={"COLUMNS": str(width)})
        assert res.exit_code == 0, res.output
        rows = {ln.split("│")[1].strip(): ln.split("│")[2].strip() for ln in res.stdout.splitlines()
                if ln.count("│") == 3}
        assert rows.get("target") == "trl" and rows.get("exported") == "2", res.stdout
        assert "1" in rows.values(), res.stdout  # the count of the long reason
        assert json.loads((out / ".trajstore" / "export.json").read_text())["trajectories"]["exported"] == 2

"""trajstore/view/show.py's row conversion: the same Python values as ``to_pylist`` (time-zone-aware
timestamps, nested ones in spans included), and ``traj show``'s fetch path imports no pandas
(pyarrow imports it for any aware timestamp, ``pa.array`` or ``to_numpy``: ~0.7 s of a new
process)."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timezone

import numpy as np

from tests.helpers.small_shards import trajectory_table, write_small_shards
from trajstore import read_trajectories_by_id
from trajstore.convert import trajectories_to_table
from trajstore.store import open_store
from trajstore.view.show import first_row


def test_first_row_matches_to_pylist_with_nested_timestamps(tmp_store: str, make_trajectory) -> None:  # noqa: ANN001
    t = make_trajectory(np.random.default_rng(3), trajectory_id="x")
    when = datetime(2026, 3, 4, 5, 6, 7, 890_000, tzinfo=timezone.utc)
    t.spans[-1] = t.spans[-1].model_copy(update={"started_at": when, "ended_at": when})
    open_store(tmp_store).write_table(trajectories_to_table([t]))
    table = read_trajectories_by_id(tmp_store, ["x"])
    row = first_row(table)
    assert row == table.to_pylist()[0]
    assert row["spans"][-1]["started_at"] == when and row["created_at"].utcoffset().total_seconds() == 0


CHILD = """
import sys
from trajstore.view.show import show_trajectory
t = show_trajectory(sys.argv[1], "t00005", tokenizer="no-such-tokenizer")  # decoding (transformers) aside
assert t.row["trajectory_id"] == "t00005" and t.tokenizer_note
print("pandas" in sys.modules, "numpy.ma" in sys.modules)
"""


def test_showing_a_trajectory_imports_no_pandas(tmp_store: str) -> None:
    store = open_store(tmp_store)
    write_small_shards(store, trajectory_table(12), per_shard=4)
    store.list_shards()  # a store in use: its shard index written (writing one builds it with pa.array)
    for _ in range(2):  # the first run writes the store's id lookup file, the second reads it
        out = subprocess.run([sys.executable, "-c", CHILD, tmp_store], capture_output=True, text=True, check=True)
        assert out.stdout.split() == ["False", "False"], out.stderr

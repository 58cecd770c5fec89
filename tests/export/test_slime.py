"""trajstore/export/slime.py: the Sample dicts of the three-turn store, written by hand from the
table in tests/helpers/export.py. slime is not on the package registry (its Sample.from_dict cannot
be called here); the row keys are checked against the Sample fields read from its source."""

from __future__ import annotations

import json

import numpy as np

from tests.helpers.export import UNCHECKED
from trajstore.export import ExportOptions, export_store

F = np.float32

SLIME_SAMPLE_FIELDS = {"group_index", "index", "tokens", "response_length", "loss_mask", "rollout_log_probs",
                       "reward", "weight_versions", "status", "metadata"}
"""Fields of slime.utils.types.Sample (THUDM/slime@624b824) the export fills; from_dict takes them by name."""


def test_slime_sample_rows(store, tmp_path, read_out):
    out = tmp_path / "slime"
    export_store(store, "slime", str(out), UNCHECKED)
    rows = read_out(out, "part-00000.parquet")
    assert set(rows) == SLIME_SAMPLE_FIELDS
    assert rows["index"] == [0, 1] and rows["group_index"] == [None, None]
    assert rows["tokens"] == [[11, 12, 13, 21, 22, 31, 41, 42, 43, 51, 52, 61], [14, 23]]  # prompt + response
    assert rows["response_length"] == [9, 1]
    assert rows["loss_mask"] == [[1, 1, 0, 1, 1, 1, 0, 0, 1], [1]]
    assert rows["rollout_log_probs"] == [[F(-0.1), F(-0.2), 0.0, F(-0.3), F(-0.4), F(-0.5), 0.0, 0.0, F(-0.6)],
                                         [F(-0.7)]]
    assert rows["reward"] == [1.0, 0.5]
    assert rows["weight_versions"] == [["3", "4", "4"], ["5"]]  # one per engine call
    assert rows["status"] == ["completed", "truncated"]
    assert json.loads(rows["metadata"][0]) == {"trajectory_id": "t1", "source": "sdk", "model": "m",
                                               "group_id": "g1", "prompt_id": "p1", "episode_id": "t1",
                                               "parent_trajectory_id": None, "fork_point": None, "link_kind": None,
                                               "abandoned": None}


def test_slime_offsets_index_across_files(store, tmp_path, read_out):
    out = tmp_path / "slime"
    r = export_store(store, "slime", str(out), ExportOptions(allow_secrets=True, rows_per_file=1))
    assert r.files == ["part-00000.parquet", "part-00001.parquet"]
    assert read_out(out, "part-00001.parquet")["index"] == [1]

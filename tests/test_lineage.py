"""trajstore/lineage.py: the episode a trajectory belongs to when it names none (expected ids
written by hand from the metadata the proxy and ingest wrote before schema v3)."""

from __future__ import annotations

import json

import pyarrow as pa

from trajstore.lineage import episode_id_column, episode_id_of


def test_episode_id_of_reads_the_split_episode_or_falls_back_to_the_trajectory() -> None:
    part = {"episode": {"id": "sess.ab12", "part": 2, "parts": 3, "change": "context"}}  # traj proxy's split part
    assert episode_id_of("sess.ab12.1", part) == "sess.ab12"
    assert episode_id_of("t", {"episode": "ep-7"}) == "ep-7"  # a plain string names the episode too
    for meta in (None, {}, {"episode": {"id": 5}}, {"episode": {"id": ""}}, {"episode": ""}, {"episode": [1]},
                 {"other": {"episode": "x"}}):
        assert episode_id_of("t", meta) == "t", meta


def test_episode_id_column_matches_the_rule_row_by_row() -> None:
    metas = [None, json.dumps({"episode": {"id": "e1", "part": 1}}), '{"episode": "e2"}', "not json \"episode\"",
             json.dumps({"turns": 3}), json.dumps({"episode": {"id": 7}})]
    ids = [f"t{i}" for i in range(len(metas))]
    got = episode_id_column(pa.chunked_array([ids[:3], ids[3:]]), pa.array(metas, pa.string()))
    assert got.to_pylist() == ["t0", "e1", "e2", "t3", "t4", "t5"]
    assert episode_id_column(pa.array(ids), None).to_pylist() == ids

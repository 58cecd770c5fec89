"""``traj redact`` with a secret in the context a child shares with its parent (the child in
another shard than its parent): the marker's length differs from the secret's, and the child's
``fork_point`` is recomputed so that tokens[:fork_point] are still the parent's."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.helpers.secrets import SECRETS, byte_tokenizer_dir
from trajstore.builder import TrajectoryBuilder
from trajstore.reader import read_trajectories
from trajstore.redact import redact_store
from trajstore.redact.lineage import common_prefix
from trajstore.store import open_store
from trajstore.validation import validate_files
from trajstore.writer import write_trajectories


def _ids(text: str) -> list[int]:
    return [b + 4 for b in text.encode()]


def _traj(tok: str, tid: str, prompt: str, action: str, parent=None, fork=None):
    b = TrajectoryBuilder(trajectory_id=tid, tokenizer=tok)
    b.add_prompt(_ids(prompt), role="user")
    b.add_action(_ids(action), [-0.1] * len(_ids(action)), policy_version=0)
    t = b.finish()
    if parent is not None:
        t = t.model_copy(update={"episode_id": "ep", "parent_trajectory_id": parent.trajectory_id, "fork_point": fork,
                                 "link_kind": "fork"})
    return t


def test_a_child_sharing_a_redacted_prefix_keeps_a_true_fork_point(tmp_path: Path) -> None:
    tok = byte_tokenizer_dir(tmp_path / "tok")
    shared = f"deploy with {SECRETS['aws_access_key']} then "
    parent = _traj(tok, "ep.1", shared + "build", " ok")
    child = _traj(tok, "ep.2", shared + "test", " done", parent, len(_ids(shared)))
    short = _traj(tok, "ep.3", shared + "lint", " fine", parent, 6)  # claims less than it shares: kept
    store = open_store(str(tmp_path / "store"))
    write_trajectories(store, [parent])
    write_trajectories(store, [child, short])  # another shard
    result = redact_store(store)
    assert result.fork_points_fixed == 1
    rows = {r["trajectory_id"]: r for r in read_trajectories(str(tmp_path / "store")).to_pylist()}
    p, c = np.asarray(rows["ep.1"]["tokens"]), np.asarray(rows["ep.2"]["tokens"])
    assert rows["ep.2"]["fork_point"] == common_prefix(c, p) == len(_ids(shared)) + 5  # the marker is 5 longer
    assert rows["ep.3"]["fork_point"] == 6
    assert validate_files([str(tmp_path / "store")]).ok

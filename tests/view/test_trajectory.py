"""trajstore/view/trajectory.py: what a trajectory's page holds, checked against the stored rows:
the engine's log-prob and policy version of each action token, staleness against a run (by hand
from the known store), tool calls linked to the observations that answer them, the flags, the
episode's parts, and a run's per-token annotations placed on the right action tokens."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.view import TRAINED_RUN, write_episode_store, write_trained_store
from trajstore import audit, read_trajectories_by_id
from trajstore.schema import ACTION_LOGPROBS_COLUMN
from trajstore.view.config import ViewConfig
from trajstore.view.decode import Decoder
from trajstore.view.index import StoreIndex
from trajstore.view.trajectory import TrajectoryNotFound, load_trajectory


@pytest.fixture
def known(known_store) -> StoreIndex:
    return StoreIndex(ViewConfig(store=known_store.uri))


def test_numbers_of_the_action_tokens(known):
    p = load_trajectory(known, Decoder(), "A", run="r1")
    assert [s.kind for s in p.spans] == ["prompt", "action", "observation", "action"]
    # A: actions of 3 tokens (v5) and 1 token (v7), log-prob -0.5 each; r1 trained it at v8
    assert p.numbers["lp"] == [-0.5] * 4 and p.numbers["pv"] == [5, 5, 5, 7]
    assert p.numbers["st"] == [3, 3, 3, 1]
    assert p.action_index == [-1, -1, 0, 1, 2, -1, -1, 3]
    assert "step 0 as version 8" in p.staleness_note
    d = load_trajectory(known, Decoder(), "D", run="r1")  # not trained by r1: lag behind its newest v9
    assert d.numbers["lp"] == [None, None, None] and d.numbers["pv"] == [3, 3, None]
    assert d.numbers["st"] == [6, 6, None] and "has not trained it" in d.staleness_note
    assert {name for name, _ in d.flags} >= {"no engine log-probs", "no reward", "text only"}
    # walkthrough: traj show said `trainable true` of a text-only row that stats --coverage listed as not
    # trainable; both now say what it needs in the same words
    assert "needs --behaviour-logprobs initial-policy" in dict(d.flags)["text only"]
    e = load_trajectory(known, Decoder(), "E")
    assert ("not trainable" in {name for name, _ in e.flags}) and e.numbers["lp"] == []
    assert load_trajectory(known, Decoder(), "B").run == "r1"  # default: the newest run that trained it
    with pytest.raises(TrajectoryNotFound):
        load_trajectory(known, Decoder(), "nope")


def test_tool_calls_flags_and_parts(tmp_path):
    index = StoreIndex(ViewConfig(store=write_episode_store(tmp_path / "s")))
    solo = load_trajectory(index, Decoder(), "solo")
    action, obs = solo.spans[1], solo.spans[2]
    assert action.answers == [("tc-1", 2), ("tc-2", None)] and obs.answered == 1
    assert solo.lineage is None  # alone in its episode
    assert solo.tokenizer_note and solo.spans[0].text == "⟨1⟩ ⟨2⟩"  # no tokenizer named: ids shown
    p2 = load_trajectory(index, Decoder(), "e1-p2")
    assert [(n.trajectory_id, n.link_kind) for n in p2.lineage.roots] == [
        ("e1-p1", None), ("e1-p2", "condensation"), ("e1-p3", "condensation")]


def test_annotations_land_on_their_action_tokens(tmp_path):
    root = write_trained_store(tmp_path / "s")
    index = StoreIndex(ViewConfig(store=root))
    conn = audit.connect(root)
    # each annotation's action index from the spans view: the span's logprob_start + offset in the span
    rows = conn.sql('SELECT a.trajectory_id, s.logprob_start + a.position - s.start, a.trainer_logprob, a.ratio, '
                    'a.band, a.advantage, a.value, a."return", a.rollout_logprob FROM token_annotations a JOIN spans '
                    's ON s.trajectory_id = a.trajectory_id AND a.position >= s.start AND a.position < s."end" '
                    f"WHERE a.run_id = '{TRAINED_RUN}'").fetchall()
    tid = rows[0][0]
    mine = [r for r in rows if r[0] == tid]
    p = load_trajectory(index, Decoder(), tid)
    assert p.run == TRAINED_RUN and p.annotation_step is not None
    for _, a, tlp, ratio, band, adv, value, ret, blp in mine:
        got = [p.numbers[k][a] for k in ("tlp", "ratio", "band", "adv", "value", "ret", "blp")]
        assert [np.float32(x) for x in got[:2]] == [np.float32(tlp), np.float32(ratio)]
        assert got[2] == band and np.float32(got[3]) == np.float32(adv) and np.float32(got[4]) == np.float32(value)
        assert np.float32(got[5]) == np.float32(ret) and np.float32(got[6]) == np.float32(blp)
    annotated = {a for _, a, *_ in mine}
    assert all(p.numbers["tlp"][a] is None for a in range(len(p.numbers["tlp"])) if a not in annotated)
    stored = read_trajectories_by_id(root, [tid])[ACTION_LOGPROBS_COLUMN][0].values.to_numpy()
    assert [np.float32(x) for x in p.numbers["lp"]] == list(stored)  # shown = stored, bit for bit

"""trajstore/audit/lineage_views.py and lineage.py: the ``lineages`` and ``episodes`` views and
``traj stats --lineage``, and the episode counts of the reward, status, staleness and overview
reports, against values counted by hand from the lineage store (tests/helpers/stores.py,
build_lineage_store)."""

from __future__ import annotations

import pytest

from tests.helpers.relations import rows
from tests.helpers.stores import build_lineage_store
from trajstore import audit


@pytest.fixture
def conn(tmp_path):
    build_lineage_store(str(tmp_path / "store"))
    return audit.connect(str(tmp_path / "store"))


def test_lineages_view(conn):
    got = {r["lineage_id"]: r for r in rows(audit.sql(conn, "SELECT * FROM lineages"))}
    assert sorted(got) == ["f", "g", "p", "r", "s"]
    r = got["r"]  # r -> w (context rewrite) -> c (continuation)
    assert (r["episode_id"], r["parent_trajectory_id"], r["link_kind"], r["parts"], r["context_rewrites"],
            r["continuations"]) == ("E1", None, None, 3, 1, 1)
    # tokens 8 + 6 + 8, actions 2 + 1 + 1, action tokens 4 + 1 + 2, shared prefixes 3 + 6; c is the latest part
    assert (r["tokens"], r["actions"], r["action_tokens"], r["shared_prefix_tokens"], r["status"]) == (
        22, 4, 7, 9, "completed")
    assert (got["s"]["link_kind"], got["s"]["fork_point"], got["s"]["parent_trajectory_id"], got["s"]["parts"]) == (
        "subagent", 2, "r", 1)
    assert (got["g"]["link_kind"], got["g"]["fork_point"], got["g"]["status"], got["g"]["reward"]) == (
        "fork", 4, "truncated", 0.5)
    assert got["p"]["episode_id"] == "p"  # a plain trajectory is its own episode


def test_episodes_view(conn):
    got = {r["episode_id"]: r for r in rows(audit.sql(conn, "SELECT * FROM episodes"))}
    e1 = got["E1"]
    assert (e1["trajectories"], e1["lineages"], e1["roots"], e1["subagents"], e1["forks"], e1["context_rewrites"],
            e1["continuations"]) == (4, 2, 1, 1, 0, 1, 1)
    assert (e1["tokens"], e1["shared_prefix_tokens"], e1["status"], e1["statuses"]) == (
        29, 11, "completed", ["aborted", "completed"])
    assert (got["p"]["trajectories"], got["p"]["lineages"]) == (1, 1)
    assert (got["E3"]["trajectories"], got["E3"]["lineages"], got["E3"]["forks"], got["E3"]["tokens"]) == (2, 2, 1, 12)


def test_lineage_report(conn):
    rep = audit.lineage_report(conn)
    (tot,) = rows(rep.totals)
    assert (tot["episodes"], tot["trajectories"], tot["lineages"], tot["split_episodes"],
            tot["lineages_per_episode_max"], tot["trajectories_per_episode_max"], tot["tokens"],
            tot["shared_prefix_tokens"]) == (3, 7, 5, 2, 2, 4, 45, 15)
    assert (tot["lineages_per_episode_mean"], tot["trajectories_per_episode_mean"], tot["shared_prefix_share"]) == (
        pytest.approx(5 / 3), pytest.approx(7 / 3), pytest.approx(15 / 45))
    kinds = {r["link_kind"]: (r["trajectories"], r["tokens"], r["fork_point_max"], r["shared_prefix_tokens"])
             for r in rows(rep.by_link_kind)}
    assert kinds == {"root": (3, 17, None, 0), "subagent": (1, 7, 2, 2), "context_rewrite": (1, 6, 3, 3),
                     "continuation": (1, 8, 6, 6), "fork": (1, 7, 4, 4)}
    assert [(r["lineages"], r["episodes"]) for r in rows(rep.lineages_per_episode)] == [(1, 1), (2, 2)]
    # the sub-agent left out: E1 is one lineage of 3 trajectories
    (tot,) = rows(audit.lineage_report(conn, where="link_kind IS DISTINCT FROM 'subagent'").totals)
    assert (tot["episodes"], tot["trajectories"], tot["lineages"], tot["shared_prefix_tokens"]) == (3, 6, 4, 13)


def test_reward_status_staleness_and_overview_count_episodes(conn):
    (rw,) = rows(audit.reward_report(conn).by_source)
    assert (rw["trajectories"], rw["episodes"]) == (7, 3)
    st = {r["status"]: (r["trajectories"], r["episodes"]) for r in rows(audit.status_report(conn).by_source)}
    assert st == {"completed": (5, 3), "aborted": (1, 1), "truncated": (1, 1)}
    (by_run,) = rows(audit.staleness_report(conn).by_run)
    assert (by_run["consumed"], by_run["consumed_episodes"]) == (4, 1)
    (un,) = rows(audit.staleness_report(conn).unconsumed)
    assert (un["trajectories"], un["episodes"]) == (3, 2)  # p, f, g
    (tot,) = rows(audit.overview_report(conn).totals)
    assert (tot["trajectories"], tot["episodes"]) == (7, 3)

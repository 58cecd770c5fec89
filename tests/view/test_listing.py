"""trajstore/view/listing.py (and the index it reads, trajstore/view/index.py): every filter,
sort and page of the list, checked against the known store's table (tests/helpers/stores.py),
the expected rows written out by hand from it; episodes from the metadata of a split episode."""

from __future__ import annotations

import pytest

from tests.helpers.view import write_episode_store
from trajstore.view.config import ViewConfig
from trajstore.view.index import StoreIndex
from trajstore.view.listing import ListQuery, ListQueryError, list_page


@pytest.fixture
def index(known_store) -> StoreIndex:
    return StoreIndex(ViewConfig(store=known_store.uri))


def ids(index: StoreIndex, **params: str) -> list[str]:
    page = list_page(index, ListQuery.from_params(params))
    assert page.error is None, page.error
    return [r[page.columns.index("trajectory_id")] for r in page.rows]


def test_the_index_holds_each_trajectory_once(index):
    snap = index.snapshot
    assert snap.trajectories == 6  # A..F; the second copy of B is not listed
    assert dict(snap.sources) == {"sdk": 4, "openhands": 2}
    assert snap.runs == ["r1", "r2"] and snap.run_versions == {"r1": 9, "r2": 10}
    assert snap.has_lineage  # schema v3: the lineage columns are there (no row links a parent here)


@pytest.mark.parametrize(("params", "expected"), [
    ({"source": "sdk"}, {"A", "B", "E", "F"}),
    ({"status": "completed"}, {"A", "C", "F"}),
    ({"reward_min": "0", "reward_max": "0.5"}, {"B", "F"}),  # B's first copy has reward 0.0
    ({"tokens_min": "6"}, {"A", "C", "F"}),  # 8, 10, 6 tokens
    ({"version_min": "5"}, {"A", "B", "F"}),  # oldest versions 5, 6, 6
    ({"version_max": "6"}, {"B", "C", "D"}),  # newest versions 6, 4, 3
    ({"flag": "no_reward"}, {"D", "E"}),
    ({"flag": "no_logprobs"}, {"D", "E"}),  # neither of D's actions has a log-prob; E has no action at all
    ({"flag": "not_trainable"}, {"E"}),  # no action token
    ({"flag": "multi_version"}, {"A", "F"}),  # v5..v7, v6..v8
    ({"where": "num_actions = 2 AND reward > 0"}, {"A", "F"}),
    ({"where": "reward_raw IS NOT NULL"}, {"A", "B", "C", "F"}),  # a column the index leaves out
    ({"source": "sdk", "where": "num_tokens < 6"}, {"B", "E"}),
])
def test_filters(index, params, expected):
    assert set(ids(index, **params)) == expected


def test_staleness_against_a_run(index):
    # r1 trained A, B at v8 and C at v9 (its newest version): staleness = that version - oldest
    # policy version; D and F were not trained by r1: 9 - 3, 9 - 6; E has no version.
    page = list_page(index, ListQuery.from_params({"run": "r1", "sort": "staleness"}))
    got = {r[0]: (r[page.columns.index("staleness")], r[page.columns.index("trained_step")]) for r in page.rows}
    assert got == {"A": (3, 0), "B": (2, 0), "C": (5, 1), "D": (6, None), "E": (None, None), "F": (3, None)}
    assert [r[0] for r in page.rows][:2] == ["D", "C"] and page.rows[-1][0] == "E"  # descending, none last
    assert set(ids(index, run="r1", staleness_min="3", staleness_max="5")) == {"A", "C", "F"}


def test_sort_order_and_pages(index):
    ascending = ids(index, sort="reward", order="asc")  # -1, 0, 0.5, 1, then no reward (D, E) last
    assert ascending[:4] == ["C", "B", "F", "A"] and set(ascending[4:]) == {"D", "E"}
    index.cfg.page_size = 4
    first = list_page(index, ListQuery.from_params({"sort": "num_tokens", "order": "desc"}))
    # tokens: C 10, A 8, F 6, E 5, D 5, B 3 (D and E tie: row order decides)
    assert (first.total, first.pages, [r[0] for r in first.rows][:3]) == (6, 2, ["C", "A", "F"])
    last = list_page(index, ListQuery.from_params({"sort": "num_tokens", "order": "desc", "page": "9"}))
    assert last.page == 2 and [r[0] for r in last.rows][-1] == "B"  # a page past the end shows the last


@pytest.mark.parametrize(("params", "message"), [
    ({"where": "bogus_column = 1"}, "bogus_column"),
    ({"where": "reward > 0) UNION SELECT 1 --"}, "where: "),  # refused, never run
    ({"flag": "no_such_flag"}, "flag"),
    ({"sort": "staleness"}, "choose a run"),
    ({"run": "nope"}, "not a run"),
])
def test_bad_filters_are_a_message_not_a_crash(index, params, message):
    page = list_page(index, ListQuery.from_params(params))
    assert page.rows == [] and message in page.error


def test_unparseable_values_name_the_field():
    with pytest.raises(ListQueryError, match="reward_min: 'x' is not a number"):
        ListQuery.from_params({"reward_min": "x"})
    with pytest.raises(ListQueryError, match="page"):
        ListQuery.from_params({"page": "0"})


def test_episodes_from_the_metadata_of_a_split_episode(tmp_path):
    index = StoreIndex(ViewConfig(store=write_episode_store(tmp_path / "s")))
    page = list_page(index, ListQuery.from_params({"mode": "episodes", "sort": "trajectories"}))
    rows = [dict(zip(page.columns, r)) for r in page.rows]
    assert page.total == 2
    e1 = rows[0]
    # e1: parts 1..3 with 4 + 3 + (1, 3, 5) + 2 tokens = 10, 12, 14; reward the largest (3.0)
    assert (e1["episode"], e1["trajectories"], e1["first_trajectory_id"], e1["num_tokens"], e1["reward"]) == (
        "e1", 3, "e1-p1", 36, 3.0)
    assert rows[1]["episode"] == "solo" and rows[1]["trajectories"] == 1
    # a filter applies to the trajectories, then they are grouped
    page = list_page(index, ListQuery.from_params({"mode": "episodes", "reward_min": "2"}))
    assert [(dict(zip(page.columns, r))["episode"], dict(zip(page.columns, r))["trajectories"])
            for r in page.rows] == [("e1", 2)]


def test_a_fixed_where_restricts_everything(known_store):
    index = StoreIndex(ViewConfig(store=known_store.uri, where="source = 'openhands'"))
    assert index.snapshot.trajectories == 2 and set(ids(index)) == {"C", "D"}


def test_episodes_of_a_store_without_splits_are_its_trajectories(index):
    assert index.snapshot.episodes == index.snapshot.trajectories == 6
    page = list_page(index, ListQuery.from_params({"mode": "episodes", "source": "sdk", "sort": "reward"}))
    rows = [dict(zip(page.columns, r)) for r in page.rows]
    # sdk: A 1.0, F 0.5, B 0.0, E none (last)
    assert [(r["episode"], r["trajectories"], r["first_trajectory_id"]) for r in rows] == [
        ("A", 1, "A"), ("F", 1, "F"), ("B", 1, "B"), ("E", 1, "E")]

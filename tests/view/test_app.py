"""trajstore/view/app.py through Starlette's test client: the list page and its filters, the
transcript and Tokens views, the JSON listing, errors as pages, the optional token (as the
proxy's), an S3 store served by moto, and the lineage tree once the store has lineage columns."""

from __future__ import annotations

import json
import re

import pytest
from starlette.testclient import TestClient

from tests.helpers.view import write_episode_store
from trajstore.view import ViewConfig, create_app
from trajstore.view.index import INDEX_TABLE


def listed(html: str) -> list[str]:
    return re.findall(r'<tr class="row" data-id="([^"]+)"', html)


@pytest.fixture
def client(known_store) -> TestClient:
    return TestClient(create_app(ViewConfig(store=known_store.uri)))


def test_list_page_and_filters(client):
    r = client.get("/")
    assert r.status_code == 200 and sorted(listed(r.text)) == list("ABCDEF")
    assert sorted(listed(client.get("/?source=openhands").text)) == ["C", "D"]
    r = client.get("/?run=r1&sort=staleness")
    assert listed(r.text)[:2] == ["D", "C"] and "staleness (r1)" in r.text
    assert 'href="/t/A?run=r1"' in r.text  # a row opens with the run chosen
    page = client.get("/api/list?status=completed&sort=reward").json()
    assert [row["trajectory_id"] for row in page["rows"]] == ["A", "F", "C"] and page["total"] == 3


def test_bad_filters_show_on_the_page(client):
    r = client.get("/?where=nope%20%3D%201")
    assert r.status_code == 200 and "nope" in r.text and 'class="error"' in r.text and listed(r.text) == []
    r = client.get("/?tokens_min=ten")
    assert "tokens_min: &#39;ten&#39; is not a whole number" in r.text
    assert client.get("/api/list?tokens_min=ten").status_code == 400


def test_transcript_and_tokens_views(client):
    r = client.get("/t/A")
    assert r.status_code == 200 and r.text.count('class="span kind-') == 4
    assert 'id="token-ids"' not in r.text  # the transcript sends no per-token data
    r = client.get("/t/A?view=tokens&run=r1")
    numbers = json.loads(re.search(r'<script id="numbers" type="application/json">(.*?)</script>', r.text).group(1))
    assert numbers["lp"] == [-0.5] * 4 and numbers["pv"] == [5, 5, 5, 7] and numbers["st"] == [3, 3, 3, 1]
    assert len(re.findall(r'class="t a" data-i="\d+" data-a="\d+"', r.text)) == 4
    assert len(re.findall(r'class="t" data-i=', r.text)) == 4  # prompt and observation tokens
    # annotations the run did not record: their colourings are offered, disabled, with the reason
    assert re.search(r'data-mode="tlp" title="run r1 recorded no per-token annotations[^"]*" disabled', r.text)
    assert client.get("/t/nope").status_code == 404
    assert client.get("/t/A?run=nope").status_code == 404
    assert client.get("/t/A?view=sideways").status_code == 400


def test_token_works_as_the_proxys(known_store):
    c = TestClient(create_app(ViewConfig(store=known_store.uri, token="s3cret")))
    assert c.get("/").status_code == 401 and c.get("/t/A").status_code == 401
    assert c.get("/health").status_code == 200
    assert c.get("/", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert c.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
    r = c.get("/?token=s3cret&source=sdk", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/?source=sdk"  # the token leaves the URL
    assert c.get("/t/A").status_code == 200  # the cookie now carries it
    c.cookies.clear()
    assert c.get("/?token=nope").status_code == 401


def test_token_refusals_are_401s_in_the_error_shape_and_the_scheme_takes_any_case(known_store):
    # "bearer <token>" was a 401 (RFC 9110: the scheme is case-insensitive), and a token with a
    # character beyond ASCII in the URL or the cookie was a 500 (hmac.compare_digest refuses such text)
    c = TestClient(create_app(ViewConfig(store=known_store.uri, token="s3cret")))
    assert c.get("/", headers={"Authorization": "bearer s3cret"}).status_code == 200
    for r in (c.get("/?token=caf%C3%A9"), c.get("/", headers={"Cookie": "traj_view_token=caf\u00e9".encode()}),
              c.get("/")):
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", r.text
        assert "open /?token=<token> once in the browser" in r.json()["error"]["message"]
    c = TestClient(create_app(ViewConfig(store=known_store.uri, token="caf\u00e9")))
    assert c.get("/?token=caf%C3%A9", follow_redirects=False).status_code == 303


def test_the_json_listing_refuses_in_the_error_shape(client):
    for q in ("tokens_min=ten", "where=nope%20%3D%201"):
        r = client.get(f"/api/list?{q}")
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error", r.text
        assert r.json()["error"]["message"].startswith(q.split("=")[0].replace("tokens_min", "tokens_min:"))
    r = client.get("/nowhere")
    assert r.status_code == 404 and r.json()["error"]["code"] == 404
    assert client.get("/", headers=[(f"x-h{i}", "v") for i in range(101)]).status_code == 431


def test_episodes_mode_links_the_first_part(tmp_path):
    c = TestClient(create_app(ViewConfig(store=write_episode_store(tmp_path / "s"))))
    r = c.get("/?mode=episodes")
    assert 'href="/t/e1-p1"' in r.text and ">e1<" in r.text
    r = c.get("/t/e1-p3")
    assert re.findall(r'<li class="(current)?">\s*(?:<span[^>]*>[^<]*</span>)?\s*<a href="/t/([^"?]+)', r.text) == [
        ("", "e1-p1"), ("", "e1-p2"), ("current", "e1-p3")]


def test_lineage_tree_when_the_store_has_lineage_columns(tmp_path):
    """Schema v3's lineage columns (episode_id, parent_trajectory_id, fork_point, link_kind), set
    in the index by hand, draw the episode's tree from the links."""
    app = create_app(ViewConfig(store=write_episode_store(tmp_path / "s")))
    index = app.state.index
    index.conn.execute(
        f"CREATE OR REPLACE TEMP TABLE {INDEX_TABLE} AS SELECT * EXCLUDE (episode, ek, episode_id, parent_trajectory_id, fork_point, link_kind), 'ep' AS episode_id, "
        "CASE trajectory_id WHEN 'e1-p2' THEN 'e1-p1' WHEN 'e1-p3' THEN 'e1-p1' WHEN 'solo' THEN 'e1-p3' END "
        "AS parent_trajectory_id, CASE trajectory_id WHEN 'e1-p2' THEN 4 END AS fork_point, "
        "CASE trajectory_id WHEN 'solo' THEN 'subagent' WHEN 'e1-p1' THEN NULL ELSE 'fork' END AS link_kind, "
        f"'ep' AS episode, hash('ep') AS ek FROM {INDEX_TABLE}")
    index.snapshot.has_lineage = True
    r = TestClient(app).get("/t/solo")
    tree = re.search(r'<ul class="tree" id="lineage">(.*?)</ul>\s*\n', r.text, re.S).group(1)
    order = re.findall(r'<a href="/t/([^"?]+)', tree)
    assert order == ["e1-p1", "e1-p2", "e1-p3", "solo"]
    assert "forks at 4" in tree and "subagent" in tree
    assert r.text.count("<ul>") >= 2  # solo nested under e1-p3, under e1-p1


@pytest.mark.s3
def test_an_s3_store(s3_store_uri, build_store):
    uri, opts = s3_store_uri
    build_store(uri, opts)
    c = TestClient(create_app(ViewConfig(store=uri, storage_options=opts)))
    assert sorted(listed(c.get("/").text)) == list("ABCDEF")
    r = c.get("/t/C?view=tokens")
    numbers = json.loads(re.search(r'<script id="numbers" type="application/json">(.*?)</script>', r.text).group(1))
    assert numbers["lp"] == [-0.5] * 6 and numbers["pv"] == [4] * 6


def test_links_printed_by_stats_and_sql_open_the_page(tmp_path, make_trajectory):
    """`traj stats --view-url` (Python) and `traj sql --view-url` (DuckDB) encode an id alike, and
    the app serves that path."""
    import duckdb
    import numpy as np

    import trajstore as ts
    from trajstore.view.links import view_link, with_view_link_columns

    tid = "odd:id=1+x"
    uri = str(tmp_path / "s")
    ts.write_trajectories(uri, [make_trajectory(np.random.default_rng(0), trajectory_id=tid)])
    by_python = view_link("http://v", tid)
    by_duckdb = with_view_link_columns(duckdb.sql(f"SELECT '{tid}' AS trajectory_id"), "http://v").fetchall()
    assert by_duckdb == [(tid, by_python)]
    r = TestClient(create_app(ViewConfig(store=uri))).get(by_python.removeprefix("http://v"))
    assert by_python == "http://v/t/odd:id%3D1%2Bx"
    assert r.status_code == 200 and re.search(r'<h1 id="tid">(.*?)</h1>', r.text).group(1) == tid


def test_a_trajectory_in_an_unreadable_shard_names_the_shard(tmp_path):
    """The page of an id whose shard became unreadable names that shard, not just "no trajectory"."""
    uri = write_episode_store(tmp_path / "s")
    client = TestClient(create_app(ViewConfig(store=uri)))
    for shard in (tmp_path / "s" / "trajectories").glob("*.parquet"):
        shard.write_bytes(shard.read_bytes()[:200])
    r = client.get("/t/solo")
    assert r.status_code == 404 and "could not be read and may hold it" in r.text
    assert any(s.name in r.text for s in (tmp_path / "s" / "trajectories").glob("*.parquet"))

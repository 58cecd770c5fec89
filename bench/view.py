"""``traj view`` benchmark: the list page of a store of a million trajectories, timed on the
server (target: under 1 s).

    python bench/view.py                          # 1,000,000 trajectories, best of 5
    python bench/view.py --count 200000 --repeat 3
    python bench/view.py --store /tmp/big --keep  # reuse (or keep) the generated store

The store holds N short trajectories (bench/audit.py's generator: 16 tokens, 3 sources, half of
them consumed by run ``bench``) in shards of the writer's default flush size (1,024 rows). The
app is built once (``StoreIndex``: the store's DuckDB views and the in-memory index of the
listing's columns; its time is reported as ``startup_s``), then each page is requested through
Starlette's test client in the same process, so a time is the server's: query, template and
response, no network or browser. Pages: the default list, sorted by reward, a deep page, filters,
an ingest flag, a ``--where`` the index answers and one it cannot (read from the shards), episodes,
and staleness against a run (the first request of a run or of the episodes builds a table once:
reported apart as ``first_s``), and a trajectory's transcript and Tokens view.

The same first page is also asked of DuckDB directly over the Parquet files (``read_parquet``
of every shard, count plus ORDER BY ... LIMIT 50), alternating with the app's request: the
``bare_s`` baseline shows what the index saves. Target: every list page under 1 s (best of
``--repeat``). Prints one JSON object and the targets; exit status 0 even when one is missed
(a measurement, not a test).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from typing import Any

import duckdb
from starlette.testclient import TestClient

from trajstore.store import TRAJECTORIES_DIR, open_store
from trajstore.view import ViewConfig, create_app
from trajstore.view.index import StoreIndex

LIST_TARGET_S = 1.0

PAGES: dict[str, str] = {
    "default": "/",
    "sort_reward": "/?sort=reward",
    "deep_page": "/?sort=reward&page=9000",
    "filter_source_reward": "/?source=sdk&reward_min=0.5&status=completed",
    "flag_multi_version": "/?flag=multi_version&sort=num_tokens",
    "where_index": "/?where=num_actions+%3D+2+AND+reward+%3C+0",
    "episodes": "/?mode=episodes",
    "episodes_filtered": "/?mode=episodes&source=sdk&page=100",
    "staleness_run": "/?run=bench&sort=staleness",
    "staleness_filter": "/?run=bench&staleness_min=50&page=100",
    "where_shards": "/?where=reward_raw+IS+NULL+AND+reward+%3E+2",
}
"""List pages timed (name -> URL). ``where_shards`` names a column the index leaves out, so it is
answered from the shards (the slow path, reported but not held to the target)."""
OFF_TARGET = {"where_shards"}


def _audit_bench() -> Any:
    """bench/audit.py (its vectorised store generator and ``best_of``), imported by path."""
    spec = importlib.util.spec_from_file_location("trajstore_bench_audit", os.path.join(os.path.dirname(__file__),
                                                                                         "audit.py"))
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


AUDIT_BENCH = _audit_bench()
best_of = AUDIT_BENCH.best_of


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--count", type=int, default=1_000_000, help="trajectories in the generated store")
    ap.add_argument("--repeat", type=int, default=5, help="best of this many requests per page")
    ap.add_argument("--store", default=None, help="store folder (generated when missing; default: a temp folder)")
    ap.add_argument("--keep", action="store_true", help="keep the generated store")
    args = ap.parse_args()

    root = args.store or os.path.join(tempfile.mkdtemp(prefix="trajstore-view-bench-"), "store")
    out: dict[str, Any] = {"when": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                           "cpus": os.cpu_count(), "duckdb": duckdb.__version__}
    try:
        if not os.path.isdir(os.path.join(root, TRAJECTORIES_DIR)):
            t = time.perf_counter()
            out["store"] = AUDIT_BENCH.build_count_store(root, args.count)
            out["build_s"] = round(time.perf_counter() - t, 1)
        t = time.perf_counter()
        index = StoreIndex(ViewConfig(store=root))
        out["startup_s"] = round(time.perf_counter() - t, 2)
        out["trajectories"] = index.snapshot.trajectories
        client = TestClient(create_app(ViewConfig(store=root), index=index))
        files = [s.path for s in open_store(root).list_shards(TRAJECTORIES_DIR)]
        bare = duckdb.connect()
        src = "read_parquet([" + ", ".join(f"'{f}'" for f in files) + "])"

        def bare_page() -> None:
            bare.sql(f"SELECT count(*) FROM {src}").fetchall()
            bare.sql(f"SELECT trajectory_id, source, status, reward, num_tokens, num_action_tokens, num_actions, "
                     f"min_policy_version, max_policy_version, created_at FROM {src} ORDER BY created_at DESC, "
                     f"trajectory_id LIMIT 50").fetchall()

        pages: dict[str, Any] = {}
        for name, url in PAGES.items():
            t = time.perf_counter()
            r = client.get(url)
            first = time.perf_counter() - t
            assert r.status_code == 200 and 'class="error"' not in r.text, (url, r.text[:2000])
            pages[name] = {"url": url, "first_s": round(first, 3),
                           "best_s": round(best_of(lambda url=url: client.get(url), args.repeat), 3)}
        # the default page against DuckDB over the Parquet files, alternately in the same run
        app_s, bare_s = [], []
        for _ in range(args.repeat):
            app_s.append(best_of(lambda: client.get("/"), 1))
            bare_s.append(best_of(bare_page, 1))
        out["default_vs_bare"] = {"app_s": round(min(app_s), 3), "bare_s": round(min(bare_s), 3),
                                  "ratio": round(min(app_s) / min(bare_s), 3)}
        tid = index.query("SELECT trajectory_id FROM _view_index LIMIT 1 OFFSET 777777 % (SELECT count(*) "
                          "FROM _view_index)")[1][0][0]
        for name, url in (("trajectory", f"/t/{tid}"), ("tokens", f"/t/{tid}?view=tokens&run=bench")):
            assert client.get(url).status_code == 200
            pages[name] = {"url": url, "best_s": round(best_of(lambda url=url: client.get(url), args.repeat), 3)}
        out["pages"] = pages
    finally:
        if not args.keep and args.store is None:
            shutil.rmtree(os.path.dirname(root), ignore_errors=True)
    print(json.dumps(out, indent=2))
    print("\ntargets:")
    for name in PAGES:
        if name in OFF_TARGET:
            continue
        v = out["pages"][name]["best_s"]
        print(f"  {'MET ' if v < LIST_TARGET_S else 'MISS'}  list page {name:<22} {v:7.3f} s  (target < {LIST_TARGET_S} s)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()

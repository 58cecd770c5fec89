"""``traj stats --staleness`` against a hand-written DuckDB query computing the same numbers over the
same files (target: within 2x at 1M trajectories).

    python bench/staleness.py                     # builds bench/audit.py's count store of 1M trajectories
    python bench/staleness.py --store /tmp/a1m    # an existing count store

Both run as a fresh process, as a user would (interpreter start and imports included), best of
``--repeat`` rounds, alternately (one run of each side per round: A, B, A, B, ...): **traj stats** = ``traj stats STORE --staleness --format json``;
**hand-written** = ``python -c "import duckdb; ..."`` running :data:`HAND` (the four staleness
tables: per run and per (run, source) nearest-rank token and trajectory percentiles, the
histogram, and the lag of unconsumed data) over ``read_parquet`` of the same shard files and
consumption records. The numbers are checked equal first (the count store has no duplicate ids,
so the hand query needs no dedupe). Exit status 0 even when the target is missed: this is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from audit import build_count_store  # noqa: E402 - bench/audit.py's store

from trajstore.store import TRAJECTORIES_DIR, open_store  # noqa: E402
from trajstore.store.layout import run_consumed_dir  # noqa: E402

TARGET = 2.0


def _pct(hist: str, groups: str, prefix: str) -> str:
    """Nearest-rank p50/p90/p99, max and weighted mean of `hist` (groups, v, w) per `groups`."""
    cols = ", ".join(f"min(v) FILTER (WHERE cum * 100 >= {p} * total) AS {prefix}p{p}" for p in (50, 90, 99))
    return (f"SELECT {groups}, {cols}, max(v) AS {prefix}max, sum(v * w) / sum(w) AS {prefix}mean FROM (SELECT "
            f"{groups}, v, w, sum(w) OVER (PARTITION BY {groups} ORDER BY v ROWS UNBOUNDED PRECEDING) AS cum, "
            f"sum(w) OVER (PARTITION BY {groups}) AS total FROM {hist}) GROUP BY {groups}")


HAND = """
CREATE TEMP TABLE t AS SELECT trajectory_id, source, min_policy_version, max_policy_version, spans FROM {traj};
CREATE TEMP TABLE v AS SELECT trajectory_id, sp.policy_version AS pv, sum(sp."end" - sp.start) AS n
  FROM (SELECT trajectory_id, unnest(spans) AS sp FROM t) WHERE sp.kind = 'action' AND sp.policy_version IS NOT NULL
  GROUP BY ALL;
CREATE TEMP TABLE c AS SELECT c.run_id, c.step, c.trainer_version, c.trajectory_id, t.source
  FROM {consumed} c JOIN t USING (trajectory_id);
CREATE TEMP TABLE tok AS SELECT c.run_id, c.source, c.step, c.trajectory_id, c.trainer_version - v.pv AS s, v.n
  FROM c JOIN v USING (trajectory_id);
CREATE TEMP TABLE tr AS SELECT run_id, any_value(source) AS source, step, trajectory_id, max(s) AS s FROM tok
  GROUP BY run_id, step, trajectory_id;
"""
"""The shared inputs: trajectories' scalars and action spans per version, consumption records."""

TABLES = {
    "by_run": "WITH th AS (SELECT run_id, s AS v, sum(n) AS w FROM tok GROUP BY ALL), "
              "trh AS (SELECT run_id, s AS v, count(*) AS w FROM tr GROUP BY ALL) "
              "SELECT * FROM (SELECT run_id, count(*) AS consumed FROM c GROUP BY ALL) "
              f"JOIN ({_pct('th', 'run_id', 'token_')}) USING (run_id) "
              f"JOIN ({_pct('trh', 'run_id', 'traj_')}) USING (run_id) ORDER BY run_id",
    "by_source": "WITH th AS (SELECT run_id, source, s AS v, sum(n) AS w FROM tok GROUP BY ALL), "
                 "trh AS (SELECT run_id, source, s AS v, count(*) AS w FROM tr GROUP BY ALL) "
                 f"SELECT * FROM ({_pct('th', 'run_id, source', 'token_')}) "
                 f"JOIN ({_pct('trh', 'run_id, source', 'traj_')}) USING (run_id, source) ORDER BY run_id, source",
    "histogram": "SELECT run_id, s AS staleness, sum(n) AS action_tokens, count(DISTINCT (step, trajectory_id)) "
                 "AS x FROM tok GROUP BY ALL ORDER BY ALL",
    "unconsumed": "WITH u AS (SELECT trajectory_id, source, min_policy_version, max_policy_version FROM t "
                  "WHERE min_policy_version IS NOT NULL AND trajectory_id NOT IN (SELECT trajectory_id FROM c)), "
                  "nw AS (SELECT max(pv) AS newest FROM v), "
                  "ul AS (SELECT source, nw.newest - min_policy_version AS v, count(*) AS w FROM u, nw GROUP BY ALL) "
                  f"SELECT * FROM ({_pct('ul', 'source', 'lag_')}) ORDER BY source",
}
"""The four result tables (the report's by_run, by_source, histogram and unconsumed lag)."""

CHILD = r"""
import duckdb, json, sys
spec = json.loads(sys.argv[1])
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")
con.execute(spec["setup"])
print(json.dumps({k: con.sql(q).fetchall() for k, q in spec["tables"].items()}, default=str))
"""


def files_sql(files: list[str]) -> str:
    return "read_parquet([" + ", ".join(f"'{f}'" for f in files) + "])"


def best_alternately(fns: list, repeat: int) -> list[float]:  # noqa: ANN001
    """Best wall time of each of `fns` over `repeat` rounds, run alternately (A, B, A, B, ...) so
    that a change in the machine's load falls on both sides alike."""
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trajectories", type=int, default=1_000_000)
    ap.add_argument("--store", default=None)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="trajstore-bench-staleness-"))
    try:
        root = args.store or str(work / "store")
        if args.store is None:
            build_count_store(root, args.trajectories)
        store = open_store(root)
        traj = [s.path for s in store.list_shards(TRAJECTORIES_DIR)]
        cons = [s.path for s in store.list_shards(run_consumed_dir("bench"))]
        spec = json.dumps({"setup": HAND.format(traj=files_sql(traj), consumed=files_sql(cons)), "tables": TABLES})
        ours_cmd = [sys.executable, "-c", "from trajstore.cli.main import app; app()", "stats", root, "--staleness",
                    "--format", "json"]
        hand_cmd = [sys.executable, "-c", CHILD, spec]
        ours = json.loads(subprocess.run(ours_cmd, check=True, capture_output=True, text=True).stdout)
        hand = json.loads(subprocess.run(hand_cmd, check=True, capture_output=True, text=True).stdout)
        o = ours["staleness.by_run"][0]
        h = hand["by_run"][0]
        same = ([o[k] for k in ("consumed", "token_p50", "token_p90", "token_p99", "token_max", "traj_p50", "traj_p90",
                                "traj_p99", "traj_max")] == [h[1], *h[2:6], *h[7:11]])
        t_ours, t_hand = best_alternately([lambda: subprocess.run(ours_cmd, check=True, capture_output=True),
                                           lambda: subprocess.run(hand_cmd, check=True, capture_output=True)],
                                          args.repeat)
        out = {"trajectories": sum(s.num_rows for s in store.list_shards(TRAJECTORIES_DIR)), "shards": len(traj),
               "same_numbers": same, "traj_stats_staleness_s": round(t_ours, 3), "hand_written_duckdb_s": round(t_hand, 3)}
        print(json.dumps(out, indent=2))
        ratio = t_ours / t_hand
        print(f"  {'MET ' if ratio <= TARGET and same else 'MISS'}  traj stats --staleness / hand-written DuckDB "
              f"{ratio:.2f}x (target <= {TARGET}; same numbers: {same})")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

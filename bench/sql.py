"""``traj sql`` output benchmark: 4 M span rows written as CSV by ``traj sql --format csv
--output FILE`` against DuckDB's own ``COPY ... TO`` of the same columns from the same files.

    python bench/sql.py                          # builds bench/audit.py's count store of 1M trajectories
    python bench/sql.py --store /tmp/a1m         # an existing store (4 spans per trajectory there)

Both sides, in the same process and alternately (best of ``--repeat``): **traj sql** = the audit
connection (``audit.connect``: listing, views) plus :func:`trajstore.audit.export.write_result` of
``SELECT trajectory_id, span_index, kind, start, "end", num_tokens, policy_version FROM spans``;
**COPY** = a plain DuckDB connection running ``COPY (<the same columns by unnest over
read_parquet of the same shard files>) TO 'x.csv' (HEADER)``. Also the whole command in a fresh
process (``traj sql ... --output``), for what a user waits. Target: traj sql within 1.5x of COPY.
Exit status 0 even when the target is missed: this is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).parent))
from audit import build_count_store  # noqa: E402 - bench/audit.py's store

from trajstore import audit  # noqa: E402
from trajstore.audit.export import write_result  # noqa: E402
from trajstore.store import TRAJECTORIES_DIR, open_store  # noqa: E402

TARGET = 1.5
QUERY = 'SELECT trajectory_id, span_index, kind, start, "end", num_tokens, policy_version FROM spans'


def copy_sql(files: list[str], out: str) -> str:
    src = "read_parquet([" + ", ".join(f"'{f}'" for f in files) + "])"
    return ("COPY (SELECT trajectory_id, span_index, sp.kind AS kind, sp.start AS start, sp.\"end\" AS \"end\", "
            "sp.\"end\" - sp.start AS num_tokens, sp.policy_version AS policy_version FROM (SELECT trajectory_id, "
            f"unnest(range(len(spans))) AS span_index, unnest(spans) AS sp FROM {src})) TO '{out}' (HEADER)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trajectories", type=int, default=1_000_000)
    ap.add_argument("--store", default=None, help="an existing store (default: build one in a temp dir)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="trajstore-bench-sql-"))
    try:
        root = args.store or str(work / "store")
        if args.store is None:
            build_count_store(root, args.trajectories)
        files = [s.path for s in open_store(root).list_shards(TRAJECTORIES_DIR)]
        ours_out, copy_out = str(work / "ours.csv"), str(work / "copy.csv")
        best = {"traj_sql_s": float("inf"), "duckdb_copy_s": float("inf")}
        rows = 0
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            conn = audit.connect(root)
            with open(ours_out, "wb") as fh:
                rows = write_result(audit.sql(conn, QUERY), "csv", fh)
            conn.close()
            best["traj_sql_s"] = min(best["traj_sql_s"], time.perf_counter() - t0)
            t0 = time.perf_counter()
            plain = duckdb.connect()
            plain.execute(copy_sql(files, copy_out))
            plain.close()
            best["duckdb_copy_s"] = min(best["duckdb_copy_s"], time.perf_counter() - t0)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "from trajstore.cli.main import app; app()", "sql", root, QUERY,
                        "--format", "csv", "--output", ours_out], check=True, stderr=subprocess.DEVNULL)
        cli_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import duckdb, sys; duckdb.connect().execute(sys.argv[1])",
                        copy_sql(files, copy_out)], check=True)
        copy_cli_s = time.perf_counter() - t0
        out = {"span_rows": rows, "shards": len(files), "bytes_ours": os.path.getsize(ours_out),
               "bytes_copy": os.path.getsize(copy_out), **{k: round(v, 3) for k, v in best.items()},
               "fresh_process_traj_sql_s": round(cli_s, 3), "fresh_process_duckdb_copy_s": round(copy_cli_s, 3)}
        print(json.dumps(out, indent=2))
        ratio = best["traj_sql_s"] / best["duckdb_copy_s"]
        print(f"  {'MET ' if ratio <= TARGET else 'MISS'}  traj sql --format csv / DuckDB COPY  {ratio:.2f}x "
              f"(target <= {TARGET}); fresh processes {cli_s / copy_cli_s:.2f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

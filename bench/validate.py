"""`traj validate` throughput and peak memory on a synthetic store of N trajectories.

    python bench/validate.py [--rows N] [--shard-rows N] [--row-group-rows N] [--store DIR]

Builds (or reuses, with --store) a store of N synthetic agent trajectories (prompt, then
alternating action / observation spans, ~1.2k tokens each; 10k rows per shard, 1k per row group,
as a busy store's shards are), then runs :func:`trajstore.validation.validate_files` over it in a
fresh child process and prints rows/s and the child's peak RSS (VmHWM), with the RSS of
a child that only imported trajstore as the baseline. Bounded memory means the peak stays flat as
N grows (it holds one row group, plus 8 bytes per row for the duplicate-id check).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from trajstore import TrajectoryBuilder
from trajstore.convert import trajectories_to_table
from trajstore.store.layout import SHARD_SUFFIX, TRAJECTORIES_DIR


def _template(rows: int, seed: int = 0) -> pa.Table:
    """`rows` distinct SDK-built trajectories (prompt 200 tokens, 5 turns of 100-token actions and
    100-token observations)."""
    rng = np.random.default_rng(seed)
    trajs = []
    for i in range(rows):
        b = TrajectoryBuilder(trajectory_id=f"bench-{i}", prompt_id=f"task-{i % 50}", tokenizer="t", model="m")
        b.add_prompt(rng.integers(0, 50_000, 200), role="user")
        for turn in range(5):
            b.add_action(rng.integers(0, 50_000, 100), -rng.random(100).astype(np.float32), policy_version=turn // 2,
                         sampling={"temperature": 1.0, "top_p": 1.0})
            b.add_observation(rng.integers(0, 50_000, 100))
        b.set_reward(float(i % 2), raw=bool(i % 2))
        trajs.append(b.finish())
    return trajectories_to_table(trajs)


def build_store(root: Path, rows: int, shard_rows: int, row_group_rows: int) -> None:
    """A store of `rows` trajectories: one SDK-built shard's rows, written again with new ids."""
    shards_dir = root / TRAJECTORIES_DIR
    shards_dir.mkdir(parents=True, exist_ok=True)
    template = _template(min(shard_rows, rows))
    ids = template.schema.get_field_index("trajectory_id")
    written = 0
    shard = 0
    while written < rows:
        n = min(shard_rows, rows - written)
        t = template.slice(0, n).set_column(ids, template.schema.field(ids),
                                            pa.array([f"bench-{written + k}" for k in range(n)], pa.string()))
        pq.write_table(t, shards_dir / f"{shard:06d}{SHARD_SUFFIX}", row_group_size=row_group_rows)
        written += n
        shard += 1


def _peak_rss_mb() -> float:
    """This process's peak RSS (MiB): VmHWM, which exec resets (ru_maxrss keeps the forking
    parent's peak on Linux, so a child spawned by the process that built the store reported it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # elsewhere: ru_maxrss (KiB on Linux)


def _child(store: str | None) -> None:
    """Validate `store` (or only import, when None) and print a JSON line of figures."""
    from trajstore.validation import validate_files

    out: dict[str, float] = {}
    if store is not None:
        t0 = time.perf_counter()
        report = validate_files([store])
        dt = time.perf_counter() - t0
        out = {"rows": report.rows, "seconds": dt, "rows_per_s": report.rows / dt, "problems": report.num_problems}
    out["peak_rss_mb"] = _peak_rss_mb()
    print(json.dumps(out))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=100_000, help="trajectories in the synthetic store")
    p.add_argument("--shard-rows", type=int, default=10_000, help="rows per shard")
    p.add_argument("--row-group-rows", type=int, default=1_000, help="rows per Parquet row group")
    p.add_argument("--store", help="store folder (reused when it already holds shards; default: a temp dir)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--baseline", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child or a.baseline:
        _child(a.child)
        return
    root = Path(a.store or tempfile.mkdtemp(prefix="trajstore-bench-validate-"))
    if not list((root / TRAJECTORIES_DIR).glob(f"*{SHARD_SUFFIX}")):
        t0 = time.perf_counter()
        build_store(root, a.rows, a.shard_rows, a.row_group_rows)
        print(f"built {a.rows} rows in {time.perf_counter() - t0:.1f} s at {root}", file=sys.stderr)

    def child(*args: str) -> dict:
        r = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=True)
        return json.loads(r.stdout.splitlines()[-1])

    base = child("--baseline")
    fig = child("--child", str(root))
    size_mb = sum(f.stat().st_size for f in (root / TRAJECTORIES_DIR).glob(f"*{SHARD_SUFFIX}")) / 2**20
    print(f"traj validate: {fig['rows']} rows ({size_mb:.0f} MiB of Parquet) in {fig['seconds']:.1f} s = "
          f"{fig['rows_per_s']:.0f} rows/s; peak RSS {fig['peak_rss_mb']:.0f} MiB "
          f"(import only: {base['peak_rss_mb']:.0f} MiB); problems: {fig['problems']}")


if __name__ == "__main__":
    main()

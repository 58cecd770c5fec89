"""`traj redact` throughput (trajectories/s) on the fixture store, next to the floor any text-level
scan of stored tokens pays, in the same run.

    python bench/redact.py [--repeat N]

Ingests ../shared/fixtures/trajectories into a temporary store (as bench/ingest.py does), loads the
tokenizer once (its load is not timed), then times, alternately, N times each:

- **read + decode** (the baseline): read every shard, rebuild the trajectories and decode each
  one's tokens with the tokenizer (``tokenizer.decode``), what any scanner of token text needs;
- **check**: :func:`trajstore.redact.find_secrets` over the store (``traj redact --dry-run``);
- **redact**: :func:`trajstore.redact.redact_store` on a fresh copy of the store (``traj redact``),
  including the atomic rewrite of the shards holding findings.

Prints the median of each as trajectories/s and tokens/s and the ratio to the baseline, and what
the check found. Rows without a tokenizer (engine ids of an unnamed tokenizer) are counted as
scanned trajectories, though only their metadata and raw reward are read.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from trajstore.convert import table_to_trajectories
from trajstore.hub import load_tokenizer
from trajstore.ingest import ingest_paths
from trajstore.reader import read_shard
from trajstore.redact import find_secrets, redact_store
from trajstore.redact.tokentext import token_bytes_for
from trajstore.store import open_store

FIX = Path(__file__).resolve().parents[1] / ".." / "shared" / "fixtures" / "trajectories"


def _baseline(uri: str) -> None:
    store = open_store(uri)
    for shard in store.list_shards():
        for t in table_to_trajectories(read_shard(store, shard)):
            if t.tokenizer:
                load_tokenizer(t.tokenizer).decode(t.tokens.tolist(), skip_special_tokens=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        src = f"{d}/store"
        rep = ingest_paths([str(FIX)], src)
        store = open_store(src)
        table_rows = sum(s.num_rows for s in store.list_shards())
        tokens = sum(len(t.tokens) for s in store.list_shards() for t in table_to_trajectories(read_shard(store, s)))
        for name in {t.tokenizer for s in store.list_shards() for t in table_to_trajectories(read_shard(store, s))
                     if t.tokenizer}:
            token_bytes_for(name)  # loaded once, as a long-running command would; not timed
        times: dict[str, list[float]] = {"read + decode (baseline)": [], "check": [], "redact": []}
        for i in range(args.repeat):
            t0 = time.perf_counter()
            _baseline(src)
            times["read + decode (baseline)"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            report = find_secrets(src)
            times["check"].append(time.perf_counter() - t0)
            copy = f"{d}/copy{i}"
            shutil.copytree(src, copy)
            t0 = time.perf_counter()
            result = redact_store(copy)
            times["redact"].append(time.perf_counter() - t0)
            shutil.rmtree(copy)
    print(f"fixture store: {rep.trajectories_written} trajectories ingested, {table_rows} rows, {tokens:,} tokens, "
          f"repeats: {args.repeat}")
    print(f"check found {len(report.findings)} secret(s) {report.by_kind()} in "
          f"{len({(f.shard, f.row) for f in report.findings})} trajectories; {len(report.unscanned)} rows without a "
          f"tokenizer; redact rewrote {len(result.shards_rewritten)} shard(s), {result.trajectories_redacted} "
          "trajectories")
    base = statistics.median(times["read + decode (baseline)"])
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"{name:26s} {table_rows / m:8.1f} trajectories/s {tokens / m:12,.0f} tokens/s  ({m:.3f} s, "
              f"{m / base:.2f}x the baseline; range {min(ts):.3f}-{max(ts):.3f} s)")


if __name__ == "__main__":
    main()

"""Audit benchmarks: how report time grows with the number of trajectories, and that it does
not grow with tokens per trajectory.

    python bench/audit.py                                  # both parts, counts 20k, 200k, 1M
    python bench/audit.py --part count --counts 20000,200000
    python bench/audit.py --part tokens                    # the column-pruning check only

**count**: stores of N short trajectories (16 tokens: prompt 6, action 4,
observation 3, action 3; 3 sources; half of them consumed by a run over N / 64 steps), written
in shards of the writer's default flush size (1,024 rows). Tables are built directly as Arrow
(vectorised), and the first rows are checked against the SDK encoder, so generation does not
dominate. For each N and each report of ``traj stats`` it times the report (every table
fetched, on a connection built once) against a bare DuckDB query over the same Parquet columns
in the same run (``read_parquet`` of the same files, one cheap aggregate per column), and the
end-to-end command ``traj stats STORE --staleness`` in a fresh process (imports, listing,
connect, queries). Targets: time grows at most linearly in N (per-trajectory time at the
largest N <= 1.25x the one at the smallest); each report within 3x of its bare query;
``traj stats --staleness`` over 1M trajectories under 10 s.

**tokens**: at a fixed number of trajectories, 10x more tokens per trajectory must
leave ``staleness_report`` time within 1.5x (it reads scalars and spans, never tokens or
log-probs).

Prints one JSON object per part and a summary of the targets. Exit status 0 even when a
target is missed: this is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import trajstore as ts
from trajstore import audit
from trajstore.convert import trajectories_to_table
from trajstore.schema import ACTION_LOGPROBS_COLUMN, CONSUMED_SCHEMA, SCHEMA_VERSION, TRAJECTORY_SCHEMA
from trajstore.store import TRAJECTORIES_DIR, open_store
from trajstore.store.layout import run_consumed_dir
from trajstore.writer import DEFAULT_FLUSH_ROWS

TOKENS_TARGET_RATIO = 1.5
REPORT_TARGET_RATIO = 3.0
LINEAR_TARGET = 1.25
STALENESS_1M_TARGET_S = 10.0
T0 = datetime(2026, 7, 1, tzinfo=timezone.utc)

# Per-trajectory layout of the count benchmark: (kind, tokens) per span.
LAYOUT = (("prompt", 6), ("action", 4), ("observation", 3), ("action", 3))
SOURCES = ("sdk", "openhands", "swe-agent")


# -- count scale: vectorised synthetic stores ------------------------------------------------


def _ids(prefix: str, start: int, n: int) -> pa.Array:
    return pa.array([f"{prefix}{i:08d}" for i in range(start, start + n)], pa.string())


def short_table(start: int, n: int, rng: np.random.Generator) -> pa.Table:
    """`n` schema-v3 rows with the fixed LAYOUT, ids ``t<start..start+n>``, random versions,
    rewards and sources. Every derived column is consistent with the spans."""
    lens = np.array([k for _, k in LAYOUT], np.int64)
    per_tok, n_spans = int(lens.sum()), len(LAYOUT)
    act = np.array([kind == "action" for kind, _ in LAYOUT])
    n_act = int(lens[act].sum())
    v0 = rng.integers(0, 100, n)
    bump = rng.integers(0, 2, n)
    tokens = pa.LargeListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int64) * per_tok),
                                           pa.array(rng.integers(0, 49_152, n * per_tok, dtype=np.int32)),
                                           type=TRAJECTORY_SCHEMA.field("tokens").type)
    logprobs = pa.LargeListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int64) * n_act),
                                             pa.array((-rng.exponential(1.0, n * n_act)).astype(np.float32)),
                                             type=TRAJECTORY_SCHEMA.field(ACTION_LOGPROBS_COLUMN).type)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    act_idx = np.flatnonzero(act)
    pv = np.full((n, n_spans), -1, np.int64)
    pv[:, act_idx[0]] = v0
    pv[:, act_idx[1]] = v0 + bump
    lp_start = np.full(n_spans, -1, np.int64)
    lp_start[act] = np.cumsum(lens[act]) - lens[act]
    span_type = TRAJECTORY_SCHEMA.field("spans").type
    fields = {f.name: f for f in span_type.value_type}
    total = n * n_spans

    def col(name: str, values: Any, mask: Any = None) -> pa.Array:
        return pa.array(values, type=fields[name].type, mask=mask)

    children = {
        "kind": col("kind", np.tile(np.array([k for k, _ in LAYOUT], dtype=object), n)),
        "start": col("start", np.tile(starts, n)), "end": col("end", np.tile(starts + lens, n)),
        "role": col("role", np.tile(np.array(["user", "assistant", "tool", "assistant"], dtype=object), n)),
        "policy_version": col("policy_version", pv.ravel(), pv.ravel() < 0),
        "temperature": col("temperature", np.tile(np.where(act, 1.0, 0.0), n), np.tile(~act, n)),
        "logprob_start": col("logprob_start", np.tile(lp_start, n), np.tile(lp_start < 0, n)),
        "num_missing_logprobs": col("num_missing_logprobs", np.zeros(total, np.int64), np.tile(~act, n)),
    }
    values = pa.StructArray.from_arrays(
        [children.get(f.name, pa.nulls(total, f.type)) for f in span_type.value_type],
        fields=list(span_type.value_type))
    spans = pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32) * n_spans), values, type=span_type)
    reward = rng.normal(size=n)
    reward_mask = rng.random(n) < 0.1
    cols: dict[str, Any] = {
        "trajectory_id": _ids("t", start, n), "prompt_id": _ids("p", start % 997, n),
        "group_id": pa.nulls(n, pa.string()), "schema_version": pa.array(np.full(n, SCHEMA_VERSION, np.int64)),
        "episode_id": _ids("t", start, n), "parent_trajectory_id": pa.nulls(n, pa.string()),
        "fork_point": pa.nulls(n, pa.int64()), "link_kind": pa.nulls(n, pa.string()),
        "source": pa.array(np.array(SOURCES, dtype=object)[np.arange(start, start + n) % len(SOURCES)]),
        "model": pa.array(["policy"] * n), "tokenizer": pa.array(["HuggingFaceTB/SmolLM2-135M-Instruct"] * n),
        "created_at": pa.array(np.full(n, int(T0.timestamp() * 1e6), np.int64),
                               type=TRAJECTORY_SCHEMA.field("created_at").type),
        "status": pa.array(np.array(["completed", "truncated"], dtype=object)[rng.integers(0, 2, n)]),
        "reward": pa.array(reward, mask=reward_mask), "reward_raw": pa.nulls(n, pa.string()),
        "token_source": pa.array(["engine"] * n), "logprob_source": pa.array(["engine"] * n),
        "trainable": pa.array(np.ones(n, bool)), "not_trainable_reason": pa.nulls(n, pa.string()),
        "min_policy_version": pa.array(v0), "max_policy_version": pa.array(v0 + bump),
        "num_tokens": pa.array(np.full(n, per_tok, np.int64)),
        "num_prompt_tokens": pa.array(np.full(n, int(lens[0]), np.int64)),
        "num_action_tokens": pa.array(np.full(n, n_act, np.int64)),
        "num_observation_tokens": pa.array(np.full(n, int(lens[2]), np.int64)),
        "num_actions": pa.array(np.full(n, int(act.sum()), np.int64)),
        "num_observations": pa.array(np.full(n, 1, np.int64)),
        "num_missing_logprobs": pa.array(np.zeros(n, np.int64)),
        "tokens": tokens, ACTION_LOGPROBS_COLUMN: logprobs, "spans": spans, "metadata": pa.nulls(n, pa.string()),
    }
    # a column this generator does not set (one a later schema version added) is null, as not recorded
    return pa.Table.from_arrays([cols.get(f.name, pa.nulls(n, f.type)) for f in TRAJECTORY_SCHEMA],
                                schema=TRAJECTORY_SCHEMA)


def check_generator() -> None:
    """The vectorised rows equal what the SDK writes for the same trajectories."""
    rng = np.random.default_rng(1)
    fast = short_table(0, 8, rng)
    trajs = []
    for row in fast.to_pylist():
        b = ts.TrajectoryBuilder(trajectory_id=row["trajectory_id"], prompt_id=row["prompt_id"],
                                 source=row["source"], model="policy",
                                 tokenizer="HuggingFaceTB/SmolLM2-135M-Instruct")
        toks, lps = row["tokens"], row[ACTION_LOGPROBS_COLUMN]
        b.add_prompt(toks[0:6], role="user")
        b.add_action(toks[6:10], lps[0:4], policy_version=row["spans"][1]["policy_version"],
                     sampling={"temperature": 1.0})
        b.add_observation(toks[10:13])
        b.add_action(toks[13:16], lps[4:7], policy_version=row["spans"][3]["policy_version"],
                     sampling={"temperature": 1.0})
        b.set_reward(row["reward"], raw=None)
        t = b.finish(row["status"], created_at=T0)
        t.reward_raw = None
        trajs.append(t)
    ref = trajectories_to_table(trajs).to_pylist()
    got = fast.to_pylist()
    for r, g in zip(ref, got):
        for s in r["spans"]:  # the SDK also records the call's sampling JSON and top_p etc.; ours only temperature
            for k in ("sampling_params",):
                s[k] = None
        assert r == g, (r, g)


def build_count_store(root: str, n: int, seed: int = 0) -> dict[str, int]:
    rng = np.random.default_rng(seed)
    store = open_store(root)
    shards = 0
    for start in range(0, n, DEFAULT_FLUSH_ROWS):
        store.write_table(short_table(start, min(DEFAULT_FLUSH_ROWS, n - start), rng))
        shards += 1
    # Half of the trajectories consumed by run "bench", 64 per step, trainer version a little ahead.
    consumed_ids = np.arange(0, n, 2)
    m = len(consumed_ids)
    step = consumed_ids // 128
    tv = np.full(m, 110, np.int64) + step // 100
    ids = pa.array([f"t{i:08d}" for i in consumed_ids.tolist()], pa.string())
    table = pa.table({
        "run_id": pa.array(["bench"] * m), "step": pa.array(step), "trainer_version": pa.array(tv),
        "trajectory_id": ids, "rank": pa.array(np.zeros(m, np.int64)),
        "min_policy_version": pa.nulls(m, pa.int64()), "max_policy_version": pa.nulls(m, pa.int64()),
        "staleness_min": pa.nulls(m, pa.int64()), "staleness_max": pa.nulls(m, pa.int64()),
        "num_action_tokens": pa.array(np.full(m, 7, np.int64)),
        "masked_below": pa.array(rng.random(m) * 0.05), "masked_above": pa.array(rng.random(m) * 0.01),
        "ratio_mean": pa.array(1.0 + rng.normal(size=m) * 0.01), "reuse": pa.array(np.zeros(m, np.int64)),
        "consumed_at": pa.array(np.full(m, int(T0.timestamp() * 1e6), np.int64), type=pa.timestamp("us", tz="UTC")),
    }).select(CONSUMED_SCHEMA.names).cast(CONSUMED_SCHEMA)
    per_shard = 64 * 1024
    for a in range(0, m, per_shard):
        store.write_table(table.slice(a, per_shard), subdir=run_consumed_dir("bench"))
    return {"trajectories": n, "trajectory_shards": shards, "consumed": m}


REPORTS: dict[str, Callable[..., Any]] = {
    "overview": audit.overview_report, "staleness": audit.staleness_report, "clip": audit.clip_report,
    "coverage": audit.coverage_report, "rewards": audit.reward_report, "lengths": audit.length_report,
    "statuses": audit.status_report, "duplicates": audit.duplicate_report,
}

_SPANS_READ = ("(SELECT max(sp.kind), max(sp.policy_version), sum(sp.\"end\" - sp.start), "
               "max(sp.num_missing_logprobs) FROM (SELECT unnest(spans) AS sp FROM {t}))")
BASELINES: dict[str, tuple[tuple[str, ...], bool, bool]] = {
    # report -> (scalar columns it reads, reads spans, reads consumed)
    "overview": (("trajectory_id", "source", "trainable", "reward", "num_tokens", "num_action_tokens"), False, True),
    "staleness": (("trajectory_id", "source", "min_policy_version", "max_policy_version"), True, True),
    "clip": (("trajectory_id", "source"), False, True),
    "coverage": (("trajectory_id", "source", "token_source", "logprob_source", "trainable", "reward",
                  "not_trainable_reason"), True, False),
    "rewards": (("trajectory_id", "source", "reward"), False, False),
    "lengths": (("trajectory_id", "source", "num_actions", "num_action_tokens", "num_observation_tokens",
                 "num_tokens"), False, False),
    "statuses": (("trajectory_id", "source", "status"), False, False),
    "duplicates": (("trajectory_id",), False, False),
}
"""The Parquet columns each report reads (from its SQL in trajstore/audit/, one module per report family): the bare
baseline reads exactly those, with one cheap aggregate per column."""


@contextlib.contextmanager
def count_store_bench(description: str, name: str) -> Iterator[tuple[argparse.Namespace, Path, str]]:
    """The command line and store of a benchmark over the count store (``bench/sql.py``,
    ``bench/staleness.py``): yields the arguments (``--trajectories``, ``--store``, ``--repeat``), a
    fresh work folder (removed afterwards) and the store's root, built there unless ``--store``
    names one."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--trajectories", type=int, default=1_000_000)
    ap.add_argument("--store", default=None, help="an existing store (default: build one in a temp dir)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix=f"trajstore-bench-{name}-"))
    try:
        root = args.store or str(work / "store")
        if args.store is None:
            build_count_store(root, args.trajectories)
        yield args, work, root
    finally:
        shutil.rmtree(work, ignore_errors=True)


def print_verdict(out: dict[str, Any], met: bool, line: str) -> None:
    """The measurements as JSON, then one ``MET`` / ``MISS`` line."""
    print(json.dumps(out, indent=2))
    print(f"  {'MET ' if met else 'MISS'}  {line}")


def bare_query(report: str, traj_files: list[str], consumed_files: list[str]) -> str:
    scal, spans, consumed = BASELINES[report]
    t = "read_parquet([" + ", ".join(f"'{f}'" for f in traj_files) + "], filename = true, file_row_number = true)"
    parts = [f"(SELECT {', '.join(f'max({c})' for c in scal)}, max(filename), max(file_row_number) FROM {t})"]
    if spans:
        parts.append(_SPANS_READ.format(t=t))
    if consumed:
        c = "read_parquet([" + ", ".join(f"'{f}'" for f in consumed_files) + "])"
        parts.append(f"(SELECT max(run_id), max(step), max(trainer_version), max(trajectory_id), "
                     f"avg(masked_below), avg(masked_above), max(staleness_max) FROM {c})")
    return "SELECT " + ", ".join(f"(SELECT count(*) FROM {p})" for p in parts)


def best_of(fn: Callable[[], Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def time_reports(root: str, repeat: int) -> dict[str, Any]:
    store = open_store(root)
    traj_files = [s.path for s in store.list_shards(TRAJECTORIES_DIR)]
    cons_files = [s.path for s in store.list_shards(run_consumed_dir("bench"))]
    connect_s = best_of(lambda: audit.connect(root).close(), repeat)
    conn = audit.connect(root)
    bare_conn = __import__("duckdb").connect()
    out: dict[str, Any] = {"connect_s": round(connect_s, 3), "reports": {}}
    for name, fn in REPORTS.items():
        def run(fn: Callable[..., Any] = fn) -> None:
            for rel in fn(conn).tables().values():
                rel.fetchall()
        q = bare_query(name, traj_files, cons_files)
        report_s = best_of(run, repeat)
        bare_s = best_of(lambda q=q: bare_conn.sql(q).fetchall(), repeat)
        out["reports"][name] = {"report_s": round(report_s, 3), "bare_s": round(bare_s, 3),
                                "ratio": round(report_s / bare_s, 2)}
    conn.close()
    bare_conn.close()
    return out


def time_cli_staleness(root: str, repeat: int) -> float:
    cmd = [sys.executable, "-c", "from trajstore.cli.main import app; app()", "stats", root, "--staleness",
           "--format", "json"]

    def run() -> None:
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return best_of(run, repeat)


PHASES_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from trajstore.cli.main import app  # noqa: F401  (what `traj stats` imports)
from trajstore import audit
from trajstore.store import open_store
t1 = time.perf_counter()
s = open_store(sys.argv[1]); s.list_shards(); t2 = time.perf_counter()
conn = audit.connect(s); t3 = time.perf_counter()
rep = audit.staleness_report(conn); t4 = time.perf_counter()
for rel in rep.tables().values():
    rel.fetchall()
t5 = time.perf_counter()
print(json.dumps({"import_s": round(t1 - t0, 2), "list_shards_s": round(t2 - t1, 2), "connect_s": round(t3 - t2, 2),
                  "report_scans_s": round(t4 - t3, 2), "report_tables_s": round(t5 - t4, 2)}))
"""


def staleness_phases(root: str) -> dict[str, float]:
    """Where `traj stats --staleness` spends its time, in a fresh process (see PHASES_CHILD)."""
    out = subprocess.run([sys.executable, "-c", PHASES_CHILD, root], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def count_part(counts: list[int], repeat: int, workdir: str | None) -> dict[str, Any]:
    check_generator()
    base = tempfile.mkdtemp(prefix="trajstore-audit-bench-", dir=workdir)
    results: dict[str, Any] = {}
    try:
        for n in counts:
            root = os.path.join(base, f"n{n}")
            t = time.perf_counter()
            info = build_count_store(root, n)
            info["build_s"] = round(time.perf_counter() - t, 1)
            info.update(time_reports(root, repeat))
            info["cli_staleness_s"] = round(time_cli_staleness(root, max(1, repeat - 1)), 2)
            info["cli_staleness_phases"] = staleness_phases(root)
            results[str(n)] = info
            print(json.dumps({str(n): info}), flush=True)
            shutil.rmtree(root, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return results


def count_targets(results: dict[str, Any]) -> list[tuple[str, float, str, float]]:
    ns = sorted(int(k) for k in results)
    lo, hi = results[str(ns[0])], results[str(ns[-1])]
    checks = []
    for name in REPORTS:
        per_lo = lo["reports"][name]["report_s"] / ns[0]
        per_hi = hi["reports"][name]["report_s"] / ns[-1]
        checks.append((f"{name}: time per trajectory at {ns[-1]:,} / at {ns[0]:,}", per_hi / per_lo, "<=",
                       LINEAR_TARGET))
    for n in ns:
        for name in REPORTS:
            r = results[str(n)]["reports"][name]
            checks.append((f"{name} at {n:,}: report / bare DuckDB query", r["ratio"], "<=", REPORT_TARGET_RATIO))
    big = [n for n in ns if n >= 1_000_000]
    if big:
        checks.append((f"traj stats --staleness over {big[-1]:,} (s)", results[str(big[-1])]["cli_staleness_s"],
                       "<=", STALENESS_1M_TARGET_S))
    return checks


# -- tokens scale --------------------------------------------------------------------------


def build_tokens_store(root: str, n: int, spans: int, span_tokens: int, seed: int = 0) -> int:
    """Write `n` trajectories (prompt + `spans` alternating action/observation spans of
    `span_tokens` tokens) and consume every other one in run `bench`; return total tokens."""
    rng = np.random.default_rng(seed)
    store = open_store(root)
    trajs, consumed, total = [], [], 0
    for i in range(n):
        b = ts.TrajectoryBuilder(trajectory_id=f"t{i:06d}", source=f"src{i % 3}")
        b.add_prompt(rng.integers(0, 49_152, span_tokens, dtype=np.int32))
        v0 = int(rng.integers(0, 100))
        for k in range(spans // 2):
            b.add_action(rng.integers(0, 49_152, span_tokens, dtype=np.int32),
                         -rng.exponential(1.0, span_tokens).astype(np.float32), policy_version=v0 + k // 3)
            b.add_observation(rng.integers(0, 49_152, span_tokens, dtype=np.int32))
        b.set_reward(float(rng.normal()))
        trajs.append(b.finish(created_at=T0))
        total += b.num_tokens
        if i % 2 == 0:
            tv = v0 + spans // 6 + int(rng.integers(0, 8))
            consumed.append(dict(run_id="bench", step=i // 64, trainer_version=tv, trajectory_id=f"t{i:06d}", rank=0,
                                 min_policy_version=v0, max_policy_version=v0 + (spans // 2 - 1) // 3,
                                 staleness_min=tv - v0 - (spans // 2 - 1) // 3, staleness_max=tv - v0,
                                 num_action_tokens=spans // 2 * span_tokens, masked_below=0.01, masked_above=0.0,
                                 ratio_mean=1.0, consumed_at=T0))
    ts.write_trajectories(store, trajs, flush_rows=256)
    store.write_table(pa.Table.from_pylist(consumed, schema=CONSUMED_SCHEMA), subdir=run_consumed_dir("bench"))
    return total


def staleness_seconds(root: str, repeat: int) -> float:
    def run() -> None:
        conn = audit.connect(root)
        for rel in audit.staleness_report(conn).tables().values():
            rel.fetchall()
        conn.close()
    return best_of(run, repeat)


def token_scan_seconds(root: str, repeat: int) -> float:
    def run() -> None:
        conn = audit.connect(root)
        conn.sql("SELECT sum(list_sum(tokens)) FROM _trajectory_rows").fetchall()
        conn.close()
    return best_of(run, repeat)


def tokens_part(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        small, large = os.path.join(tmp, "small"), os.path.join(tmp, "large")
        tok_small = build_tokens_store(small, args.trajectories, args.spans, args.tokens_per_span)
        tok_large = build_tokens_store(large, args.trajectories, args.spans, args.tokens_per_span * args.scale)
        staleness_seconds(small, 1)  # warm-up (imports, page cache)
        s_small, s_large = staleness_seconds(small, args.repeat), staleness_seconds(large, args.repeat)
        t_small, t_large = token_scan_seconds(small, args.repeat), token_scan_seconds(large, args.repeat)
    return {
        "trajectories": args.trajectories, "tokens_small": tok_small, "tokens_large": tok_large,
        "staleness_s_small": round(s_small, 4), "staleness_s_large": round(s_large, 4),
        "staleness_ratio": round(s_large / s_small, 3), "target_ratio_max": TOKENS_TARGET_RATIO,
        "token_scan_s_small": round(t_small, 4), "token_scan_s_large": round(t_large, 4),
        "token_scan_ratio": round(t_large / t_small, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("count", "tokens", "all"), default="all")
    ap.add_argument("--counts", default="20000,200000,1000000", help="trajectory counts of the count part")
    ap.add_argument("--trajectories", type=int, default=2000, help="tokens part: trajectories")
    ap.add_argument("--spans", type=int, default=16, help="tokens part: action + observation spans per trajectory")
    ap.add_argument("--tokens-per-span", type=int, default=64)
    ap.add_argument("--scale", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", default=None, help="where the temporary stores go (default: the system temp dir)")
    args = ap.parse_args()
    print(f"# trajstore audit benchmark ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs "
          f"visible, duckdb {__import__('duckdb').__version__})", flush=True)
    checks: list[tuple[str, float, str, float]] = []
    if args.part in ("count", "all"):
        res = count_part([int(x) for x in args.counts.split(",")], args.repeat, args.workdir)
        checks += count_targets(res)
    if args.part in ("tokens", "all"):
        tok = tokens_part(args)
        print(json.dumps({"tokens": tok}, indent=2), flush=True)
        checks.append(("staleness at 10x tokens / at 1x", tok["staleness_ratio"], "<=", TOKENS_TARGET_RATIO))
    print("\ntargets:")
    for name, value, op, bound in checks:
        ok = value <= bound if op == "<=" else value >= bound
        print(f"  {'MET ' if ok else 'MISS'}  {name:<62} {value:8.2f}  (target {op} {bound})")


if __name__ == "__main__":
    main()

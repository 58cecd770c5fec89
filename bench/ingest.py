"""Ingest throughput next to bare tokenizer throughput on the same text, in the same run.

    python bench/ingest.py [--repeat N] [--breakdown]

Ingests the text-only fixture formats into a fresh temporary store (parse, render, tokenize,
validate, write Parquet) and separately tokenizes the very same stored texts with the bare
tokenizer. The ratio (ingest time / tokenize time) is the overhead of everything but
tokenization; 1.0 would mean ingest costs nothing beyond tokenizing (target: <= 1.5x).

Each repeat times one ingest and then one bare tokenization, back to back, both as wall time and
as the process's CPU time (less sensitive to other jobs on a shared machine). Printed: the median
over the repeats of each, the ratio of the medians, and the median of the per-repeat ratios.

``--breakdown`` profiles one more ingest (cProfile, so slower than the timed runs) and prints
the share of its time in each stage: the chat template (jinja renders), the tokenizer, parsing,
validation and the Parquet write.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import tempfile
import time
from pathlib import Path

from trajstore.hub import load_tokenizer
from trajstore.ingest import ingest_paths, iter_trajectories

FIX = Path(__file__).resolve().parents[1] / ".." / "shared" / "fixtures" / "trajectories"
TEXT_INPUTS = ["openhands/v0_eval_output_multi_swe_bench_v0.35", "openhands/swe-gym_openhands_sampled_trajectories_hf_rows",
               "nebius-swe-agent-trajectories", "swe-agent", "openhands/v0_resolver_output_2024-11"]
STAGES = {
    "chat template (jinja renders)": ("chat_template.py", "render"),
    "tokenizer (encode with offsets)": ("tokenization_utils_base.py", "__call__"),
    "parsing (json + parsers)": ("dispatch.py", "parse_unit"),
    "validation": ("validate.py", "validate_trajectory"),
    "store commit (lock, new ids, Parquet shard)": ("writer.py", "_flush_locked"),
}
"""Stage -> (file, function) whose cumulative time is the stage's (from the cProfile of one ingest)."""


def breakdown(paths: list[str]) -> None:
    with tempfile.TemporaryDirectory() as d:
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        ingest_paths(paths, d + "/store")
        prof.disable()
        total = time.perf_counter() - t0
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    print(f"breakdown of one profiled ingest ({total:.3f} s under cProfile):")
    for stage, (fname, func) in STAGES.items():
        cum = sum(v[3] for (f, _, fn), v in stats.items() if f.endswith(fname) and fn == func)
        print(f"  {stage:40s} {cum:7.3f} s  {100 * cum / total:5.1f}%")


def _timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one call of `fn`."""
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--breakdown", action="store_true", help="also print where one ingest spends its time")
    args = ap.parse_args()
    paths = [str(FIX / p) for p in TEXT_INPUTS]
    tok = load_tokenizer("smollm2-135m")
    trajs = list(iter_trajectories(paths))  # warm-up; also gives the texts and token counts
    texts = [tok.decode(t.tokens.tolist()) for t in trajs]
    n_tokens = sum(len(t.tokens) for t in trajs)
    ingest_t: list[tuple[float, float]] = []
    tok_t: list[tuple[float, float]] = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as d:
            reps = []
            ingest_t.append(_timed(lambda reps=reps: reps.append(ingest_paths(paths, d + "/store"))))
        assert reps[0].trajectories_written == len(trajs)
        tok_t.append(_timed(lambda: [tok(s, add_special_tokens=False) for s in texts]))
    print(f"trajectories: {len(trajs)}  tokens: {n_tokens}  repeats: {args.repeat}")
    for i, clock in enumerate(("wall", "cpu")):
        ing = statistics.median(x[i] for x in ingest_t)
        bare = statistics.median(x[i] for x in tok_t)
        per = sorted(a[i] / b[i] for a, b in zip(ingest_t, tok_t))
        print(f"[{clock}] ingest {n_tokens / ing:10,.0f} tokens/s ({ing:.3f} s)  bare tokenize {n_tokens / bare:10,.0f} "
              f"tokens/s ({bare:.3f} s)  ratio of medians {ing / bare:.2f}x  median ratio "
              f"{statistics.median(per):.2f}x  (range {per[0]:.2f}-{per[-1]:.2f})")
    print("target: ingest/tokenize time <= 1.5x")
    if args.breakdown:
        breakdown(paths)


if __name__ == "__main__":
    main()

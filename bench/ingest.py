"""Ingest throughput next to bare tokenizer throughput on the same text, in the same run.

    python bench/ingest.py [--repeat N] [--breakdown]

Ingests the text-only fixture formats into a fresh temporary store (parse, render, tokenize,
validate, write Parquet) and separately tokenizes the very same stored texts with the bare
tokenizer. The ratio (ingest time / tokenize time) is the overhead of everything but
tokenization; 1.0 would mean ingest costs nothing beyond tokenizing (target: <= 1.5x).

``--breakdown`` profiles one more ingest (cProfile, so slower than the timed runs) and prints
the share of its time in each stage: the chat template (jinja renders), the tokenizer, parsing,
validation and the Parquet write.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import time
from pathlib import Path

from trajstore.hub import load_tokenizer
from trajstore.ingest import ingest_paths, iter_trajectories

FIX = Path(__file__).resolve().parents[1] / ".." / "shared" / "fixtures" / "trajectories"
TEXT_INPUTS = ["openhands/v0_eval_output_multi_swe_bench_v0.35", "openhands/swe-gym_openhands_sampled_trajectories_hf_rows",
               "nebius-swe-agent-trajectories", "swe-agent", "openhands/v0_resolver_output_2024-11"]
STAGES = {
    "chat template (apply_chat_template)": ("tokenization_utils_base.py", "apply_chat_template"),
    "tokenizer (encode)": ("tokenization_utils_base.py", "__call__"),
    "parsing (json + parsers)": ("pipeline.py", "parse_unit"),
    "validation": ("validate.py", "validate_trajectory"),
    "store write (buffer + Parquet flush)": ("writer.py", "write"),
    "store flush on close (Parquet)": ("writer.py", "close"),
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--breakdown", action="store_true", help="also print where one ingest spends its time")
    args = ap.parse_args()
    paths = [str(FIX / p) for p in TEXT_INPUTS]
    tok = load_tokenizer("smollm2-135m")
    trajs = list(iter_trajectories(paths))  # warm-up; also gives the texts and token counts
    texts = [tok.decode(t.tokens.tolist()) for t in trajs]
    n_tokens = sum(len(t.tokens) for t in trajs)
    best_ingest = best_tok = float("inf")
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            rep = ingest_paths(paths, d + "/store")
            best_ingest = min(best_ingest, time.perf_counter() - t0)
        assert rep.trajectories_written == len(trajs)
        t0 = time.perf_counter()
        for s in texts:
            tok(s, add_special_tokens=False)
        best_tok = min(best_tok, time.perf_counter() - t0)
    print(f"trajectories: {len(trajs)}  tokens: {n_tokens}")
    print(f"ingest:        {n_tokens / best_ingest:12,.0f} tokens/s  ({best_ingest:.3f} s)")
    print(f"bare tokenize: {n_tokens / best_tok:12,.0f} tokens/s  ({best_tok:.3f} s)")
    print(f"ratio ingest/tokenize time: {best_ingest / best_tok:.2f}x  (target <= 1.5x)")
    if args.breakdown:
        breakdown(paths)


if __name__ == "__main__":
    main()

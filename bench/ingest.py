"""Ingest throughput next to bare tokenizer throughput on the same text, in the same run.

    python bench/ingest.py [--repeat N]

Ingests the text-only fixture formats into a fresh temporary store (parse, render, tokenize,
validate, write Parquet) and separately tokenizes the very same rendered texts with the bare
tokenizer. The ratio (ingest time / tokenize time) is the overhead of everything but
tokenization; 1.0 would mean ingest costs nothing beyond tokenizing.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from trajstore.hub import load_tokenizer
from trajstore.ingest import ingest_paths, iter_trajectories

FIX = Path(__file__).resolve().parents[1] / ".." / "shared" / "fixtures" / "trajectories"
TEXT_INPUTS = ["openhands/v0_eval_output_multi_swe_bench_v0.35", "openhands/swe-gym_openhands_sampled_trajectories_hf_rows",
               "nebius-swe-agent-trajectories", "swe-agent", "openhands/v0_resolver_output_2024-11"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
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
    print(f"ratio ingest/tokenize time: {best_ingest / best_tok:.2f}x")


if __name__ == "__main__":
    main()

"""Rollout sampling benchmark: episodes played side by side (one left-padded batch per turn)
vs one at a time, same model, same run.

    python bench/rollout.py                       # SmolLM2-135M-Instruct, 4 episodes, 1 thread
    python bench/rollout.py --model tiny-llama    # random tiny model (no weights needed)

Prints sampled action tokens per second of both ways and their ratio. The demo's worker
samples a whole step batch at once because, at batch 1 on CPU, per-token overhead (a
Python call per layer) dominates the arithmetic. Exit status 0 whatever the numbers: this
is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import random
import time

import torch

from trajstore.hub import load_tokenizer
from trajstore.store import open_store
from trajstore.trainer.apps.envs.guess_chat import GuessNumberEnv
from trajstore.trainer.apps.rollout_worker import RolloutWorker, SamplingConfig
from trajstore.trainer.models import load_policy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--episodes", type=int, default=4, help="episodes per measurement")
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tok = load_tokenizer("smollm2-135m")
    tiny = args.model.startswith("tiny-")
    policy = load_policy(args.model, tiny_vocab_size=len(tok), tokenizer="HuggingFaceTB/SmolLM2-135M-Instruct"
                         if tiny else None)
    store = open_store("memory://bench-rollout")  # the worker only reads policies from it here
    results = {}
    for parallel in (1, args.episodes):
        w = RolloutWorker(policy.model, tok, store, run_id="bench", model_name=policy.name,
                          tokenizer_name=policy.tokenizer, sampling=SamplingConfig(max_new_tokens=args.max_new_tokens),
                          seed=0, parallel_episodes=parallel)
        envs = [GuessNumberEnv.sample(random.Random(i)) for i in range(args.episodes)]
        w.run_episodes(envs[:1])  # warm-up
        t0 = time.perf_counter()
        played = [p for i in range(0, len(envs), parallel) for p in w.run_episodes(envs[i:i + parallel])]
        secs = time.perf_counter() - t0
        action_tokens = sum(s.num_tokens for t, _ in played for s in t.spans if s.kind == "action")
        results[parallel] = action_tokens / secs
        print(f"parallel_episodes={parallel}: {len(played)} episodes, {action_tokens} action tokens in "
              f"{secs:.1f}s = {results[parallel]:.1f} tokens/s")
    print(f"side by side / one at a time: {results[args.episodes] / results[1]:.2f}x "
          f"({args.model}, {args.threads} thread(s))")


if __name__ == "__main__":
    main()

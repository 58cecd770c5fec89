"""A rollout worker harness: play guess-the-number with a real model, record every action's
token ids, sampling log-probs and policy version with the writer SDK, and follow the policy
versions a trainer publishes into the same store.

Run: python examples/rollout_worker.py [--store STORE] [--run RUN_ID] [--episodes N]
     (defaults: a new scratch directory under the system temp dir, example-run, 3; the model
     is SmolLM2-135M-Instruct)

Start `traj train STORE --run RUN_ID --follow ...` against the same store and the worker
loads each version it publishes between episodes; without a trainer it samples with the
initial weights (version 0).
"""

from __future__ import annotations

import argparse
import tempfile

import torch

import trajstore
from trajstore.hub import load_tokenizer
from trajstore.trainer.apps.rollout_worker import RolloutWorker, SamplingConfig
from trajstore.trainer.models import load_policy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", help="store URI; default: a new scratch directory (printed)")
    ap.add_argument("--run", dest="run_id", default="example-run", help="training run whose published versions to follow")
    ap.add_argument("--episodes", type=int, default=3, help="episodes to play")
    args = ap.parse_args()
    store = args.store or tempfile.mkdtemp(prefix="trajstore-example-")
    run_id, episodes = args.run_id, args.episodes
    print(f"store: {store}")
    torch.set_num_threads(1)  # batch-1 sampling gains little from more threads

    policy = load_policy("smollm2-135m")  # float32 weights, the canonical name and tokenizer identity
    tokenizer = load_tokenizer("smollm2-135m")
    worker = RolloutWorker(policy.model, tokenizer, store, run_id=run_id, model_name=policy.name,
                           tokenizer_name=policy.tokenizer, sampling=SamplingConfig(max_new_tokens=24), seed=0)
    written = 0
    with trajstore.StoreWriter(store, flush_seconds=5) as writer:
        for s in worker.iter_run(episodes, writer):
            written += 1
            print(f"{s.prompt_id}: reward {s.reward:.3f} in {s.num_actions} turns, policy versions "
                  f"{sorted(set(s.policy_versions))}, {s.num_tokens} tokens, {s.seconds:.1f}s")

    total = trajstore.read_trajectories(store, columns=["trajectory_id"]).num_rows
    print(f"wrote {written} trajectories to {store} ({total} in the store); explore them with:")
    print(f"traj sql {store} \"SELECT prompt_id, reward, num_actions FROM trajectories\"")


if __name__ == "__main__":
    main()

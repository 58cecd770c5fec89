"""A rollout worker harness: play guess-the-number with a real model, record every action's
token ids, sampling log-probs and policy version with the writer SDK, and follow the policy
versions a trainer publishes into the same store.

Run: python examples/rollout_worker.py [STORE] [RUN_ID] [EPISODES]
     (defaults: ./example-store, example-run, 3; the model is SmolLM2-135M-Instruct)

Start `traj train STORE --run-id RUN_ID --follow ...` against the same store and the worker
loads each version it publishes between episodes; without a trainer it samples with the
initial weights (version 0).
"""

from __future__ import annotations

import sys

import torch

import trajstore
from trajstore.hub import load_tokenizer
from trajstore.trainer.models import load_policy
from trajstore.trainer.rollout_worker import RolloutWorker, SamplingConfig


def main() -> None:
    store = sys.argv[1] if len(sys.argv) > 1 else "example-store"
    run_id = sys.argv[2] if len(sys.argv) > 2 else "example-run"
    episodes = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    torch.set_num_threads(1)  # batch-1 sampling gains little from more threads

    policy = load_policy("smollm2-135m")  # float32 weights, the canonical name and tokenizer identity
    tokenizer = load_tokenizer("smollm2-135m")
    worker = RolloutWorker(policy.model, tokenizer, store, run_id=run_id, model_name=policy.name,
                           tokenizer_name=policy.tokenizer, sampling=SamplingConfig(max_new_tokens=24), seed=0)
    with trajstore.StoreWriter(store, flush_seconds=5) as writer:
        for s in worker.iter_run(episodes, writer):
            print(f"{s.prompt_id}: reward {s.reward:.2f} in {s.num_actions} turns, policy versions "
                  f"{sorted(set(s.policy_versions))}, {s.num_tokens} tokens, {s.seconds:.1f}s")

    table = trajstore.read_trajectories(store, columns=["trajectory_id", "reward", "num_actions",
                                                        "min_policy_version", "max_policy_version"])
    print(f"{table.num_rows} trajectories in {store}; explore them with: traj sql {store} "
          "\"SELECT prompt_id, reward, num_actions FROM trajectories\"")


if __name__ == "__main__":
    main()

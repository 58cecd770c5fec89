"""Run under torchrun (or alone) by test_fsdp.py: `traj train`'s loop with a strategy, then rank 0
writes every policy and critic parameter (whole, float32) to OUT/<run_id>.pt.

Usage: [torchrun --nproc-per-node N] _fsdp_runner.py STORE OUT RUN_ID STRATEGY MAX_STEPS [resume|fresh] [DTYPE]
(DTYPE: the published versions' dtype, default auto)
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from trajstore.trainer.config import AlgoConfig, DataConfig, ModelConfig, OptimConfig, RunConfig, TrainConfig
from trajstore.trainer.loop import distributed as D
from trajstore.trainer.loop.setup import setup
from trajstore.trainer.loop.train import train


def config(store: str, run_id: str, strategy: str, max_steps: int, publish_dtype: str = "auto") -> TrainConfig:
    return TrainConfig(store=store, model=ModelConfig(name="tiny-llama", tiny_vocab_size=128),
                       data=DataConfig(batch_size=4, micro_batch_size=2, max_seq_len=512),
                       optim=OptimConfig(policy_lr=1e-3, critic_lr=1e-3),
                       algo=AlgoConfig(critic_warmup_steps=1, critic_warmup_until="budget"),
                       run=RunConfig(run_id=run_id, max_steps=max_steps, checkpoint_every=1, progress=False,
                                     device="cpu", strategy=strategy, publish_dtype=publish_dtype))


def main() -> None:
    store, out, run_id, strategy, max_steps = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
    resume = len(sys.argv) > 6 and sys.argv[6] == "resume"
    cfg = config(store, run_id, strategy, max_steps, sys.argv[7] if len(sys.argv) > 7 else "auto")
    tr = setup(cfg, resume=resume)
    summary = train(cfg, trainer=tr)
    if D.is_sharded(tr.policy):
        params = {f"policy.{k}": v for k, v in D.full_state_dict(tr.policy, tr.env, prefix="lm.").items()}
        params.update({f"critic.{k}": v for k, v in D.full_state_dict(tr.critic, tr.env).items()})
    else:
        params = {f"policy.{k}": v.detach().clone() for k, v in tr.loaded.model.state_dict().items()}
        params.update({f"critic.{k}": v.detach().clone() for k, v in D.unwrap(tr.critic).state_dict().items()})
    if tr.env.is_main:
        torch.save({"params": params, "steps": summary.steps, "iterations": summary.iterations,
                    "world": tr.env.world_size}, out / f"{run_id}.pt")
    D.shutdown(tr.env)


if __name__ == "__main__":
    main()

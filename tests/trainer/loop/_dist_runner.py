"""Run under torchrun by test_distributed.py: a few SAO iterations on a tiny model; after every
iteration each rank writes a checksum of every policy and critic parameter and the ids it trained.
With ``train``: `traj train`'s own entry (``train(cfg)``, which sets the run up itself), then each
rank writes whether it is still in the process group.

Usage: torchrun --nproc-per-node 2 _dist_runner.py STORE OUT_DIR [train]
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from trajstore.trainer.config import AlgoConfig, DataConfig, ModelConfig, RunConfig, TrainConfig
from trajstore.trainer.data import split_for_rank
from trajstore.trainer.loop.save import checkpoint
from trajstore.trainer.loop.setup import setup
from trajstore.trainer.loop.step import train_step
from trajstore.trainer.loop.train import train


def main() -> None:
    store, out = sys.argv[1], Path(sys.argv[2])
    cfg = TrainConfig(store=store, model=ModelConfig(name="tiny-llama", tiny_vocab_size=128),
                      data=DataConfig(batch_size=5, micro_batch_size=2, max_seq_len=512),
                      algo=AlgoConfig(critic_warmup_steps=1),
                      run=RunConfig(run_id="ddp", checkpoint_every=100, progress=False, device="cpu"))
    if sys.argv[3:] == ["train"]:
        summary = train(cfg)
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else int(os.environ["RANK"])
        (out / f"train{rank}.json").write_text(json.dumps(
            {"iterations": summary.iterations, "in_group_after": torch.distributed.is_initialized(),
             "is_main": summary.is_main}))
        return
    tr = setup(cfg)
    log = []
    while (batch := tr.stream.next_batch()) is not None:
        mine = [s.trajectory_id for s in split_for_rank(batch.samples, tr.env.rank, tr.env.world_size)]
        train_step(tr, batch)
        sums = {f"policy.{n}": float(p.detach().double().sum()) for n, p in tr.loaded.model.named_parameters()}
        sums.update({f"critic.{n}": float(p.detach().double().sum()) for n, p in tr.critic.module.named_parameters()})
        log.append({"iteration": tr.state.iteration, "ids": mine, "checksums": sums})
    checkpoint(tr)
    (out / f"rank{tr.env.rank}.json").write_text(json.dumps({"world": tr.env.world_size, "log": log}))
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()

"""Small ``traj train`` configurations and checks shared by the trainer and CLI tests: tiny-llama
runs of 2-trajectory steps, a digest of what a run wrote, and the check that a refused run wrote
nothing."""

from __future__ import annotations

import hashlib
from pathlib import Path

from tests.helpers.trajectories import VOCAB
from trajstore.trainer.config import AlgoConfig, DataConfig, ModelConfig, RunConfig, TrainConfig


def disk_config(store: Path, **run) -> TrainConfig:
    """tiny-llama (vocabulary :data:`VOCAB`), steps of 2 trajectories, no warm-up; `run` overrides
    RunConfig (checkpointing and pruning tests)."""
    return TrainConfig(store=str(store), model=ModelConfig(name="tiny-llama", tiny_vocab_size=VOCAB),
                       data=DataConfig(batch_size=2, micro_batch_size=2, max_seq_len=512),
                       algo=AlgoConfig(critic_warmup_steps=0),
                       run=RunConfig(run_id="r", progress=False, **run))


def refusal_config(store: Path, run_id: str = "r", **run) -> TrainConfig:
    """As the CLI builds it for tiny-llama (vocabulary 256; the synthetic data's ids are below
    128), a checkpoint every step: what the refusal tests start and then break."""
    return TrainConfig(store=str(store), model=ModelConfig(name="tiny-llama", tiny_vocab_size=256),
                       data=DataConfig(batch_size=2, micro_batch_size=2, max_seq_len=512),
                       algo=AlgoConfig(critic_warmup_steps=0),
                       run=RunConfig(run_id=run_id, checkpoint_every=1, progress=False, **run))


def run_files_digest(root: Path) -> dict[str, str]:
    """SHA-1 of every file a training run writes (records, checkpoints, policies), by path."""
    out = {}
    for sub in ("runs", "policies"):
        for p in sorted((root / sub).rglob("*")) if (root / sub).exists() else []:
            if p.is_file():
                out[str(p.relative_to(root))] = hashlib.sha1(p.read_bytes()).hexdigest()
    return out


def assert_nothing_written(root: Path) -> None:
    """No run records and no published policy under `root`."""
    assert not (root / "runs").exists() and not (root / "policies").exists()

"""FSDP2 (`--strategy fsdp`) on CPU with gloo: 2 processes train to the same parameters as 1
process on the same data, a sharded checkpoint resumes at another world size, and a published
version is a whole safetensors model that `transformers.from_pretrained` loads."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers.stores import write_synthetic_store

RUNNER = Path(__file__).resolve().with_name("_fsdp_runner.py")
STEPS = 3  # after 1 critic warm-up iteration: 4 iterations of 4 trajectories

# Tolerance: 3 AdamW steps at lr 1e-3. Adam moves each element by about lr whatever its gradient's
# size, so for elements whose gradient is ~0 the float rounding of a different reduction order
# (2 ranks' partial sums vs 1 sum) can flip a step's direction: differences up to ~0.1 lr were
# measured, identical for DDP with 2 processes. 1e-4 = 0.1 x lr; everything else agrees to ~1e-7.
ATOL = 1e-4


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(nproc: int, store: Path, out: Path, run_id: str, strategy: str, steps: int, *extra: str) -> dict:
    cmd = [sys.executable, str(RUNNER), str(store), str(out), run_id, strategy, str(steps), *extra]
    if nproc > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-port",
               str(_port()), *cmd[1:]]
    # PYTHONFAULTHANDLER: a rank that aborts (SIGABRT) prints every thread's Python stack to stderr
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env=env)  # bounds a hang (~130 s at load 8)
    assert p.returncode == 0, p.stderr[-6000:]
    return torch.load(out / f"{run_id}.pt", weights_only=True)


def _assert_same(a: dict, b: dict) -> None:
    assert a["params"].keys() == b["params"].keys()
    for k in a["params"]:
        torch.testing.assert_close(b["params"][k], a["params"][k], atol=ATOL, rtol=0, msg=k)
    # and the run really moved the weights, far beyond the tolerance
    assert a["steps"] == b["steps"] == STEPS


@pytest.fixture(scope="module")
def ref(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A store of 14 trajectories and one process's parameters after 3 policy steps (ddp)."""
    root = tmp_path_factory.mktemp("fsdp")
    write_synthetic_store(root / "store", 14, per_shard=4)
    (root / "out").mkdir()
    return root, _run(1, root / "store", root / "out", "ref", "ddp", STEPS)


def test_two_process_fsdp_trains_the_same_parameters_as_one_process(ref: tuple[Path, dict]) -> None:
    root, one = ref
    two = _run(2, root / "store", root / "out", "f2", "fsdp", STEPS)
    assert two["world"] == 2
    _assert_same(one, two)
    init = _run(1, root / "store", root / "out", "zero", "ddp", 0 + 1)  # sanity: 1 step differs clearly
    moved = max((init["params"][k] - one["params"][k]).abs().max().item() for k in one["params"])
    assert moved > 20 * ATOL


@pytest.mark.slow
def test_a_sharded_checkpoint_resumes_at_another_world_size(ref: tuple[Path, dict]) -> None:
    root, one = ref
    first = _run(2, root / "store", root / "out", "rs", "fsdp", 1)  # 2 ranks: warm-up + 1 step, checkpoints
    assert first["steps"] == 1
    ck = root / "store/runs/rs/checkpoints/it00000002"
    assert (ck / ".metadata").exists() and (ck / "__1_0.distcp").exists()  # each rank wrote its shard
    resumed = _run(1, root / "store", root / "out", "rs", "fsdp", STEPS, "resume")  # 1 rank continues
    assert resumed["world"] == 1 and resumed["iterations"] == 4
    _assert_same(one, resumed)


def test_fsdp_publishes_a_whole_bf16_model_that_from_pretrained_loads(ref: tuple[Path, dict]) -> None:
    from transformers import AutoModelForCausalLM

    root, _one = ref
    got = _run(1, root / "store", root / "out", "pub", "fsdp", 1, "fresh", "bfloat16")
    model = AutoModelForCausalLM.from_pretrained(root / "store/policies/pub/v1", dtype="auto")
    assert model.dtype == torch.bfloat16
    for name, p in model.state_dict().items():
        torch.testing.assert_close(p, got["params"][f"policy.{name}"].to(torch.bfloat16), atol=0, rtol=0, msg=name)


def test_activation_checkpointing_gives_the_same_update(tmp_path: Path) -> None:
    from trajstore.trainer.config import AlgoConfig, DataConfig, ModelConfig, RunConfig, TrainConfig
    from trajstore.trainer.loop.setup import setup
    from trajstore.trainer.loop.step import train_step

    write_synthetic_store(tmp_path, 4)

    def update(ac: bool) -> dict[str, torch.Tensor]:
        cfg = TrainConfig(store=str(tmp_path), model=ModelConfig(name="tiny-llama", tiny_vocab_size=128),
                          data=DataConfig(batch_size=4, micro_batch_size=2, max_seq_len=512),
                          algo=AlgoConfig(critic_warmup_steps=0),
                          run=RunConfig(run_id=f"ac{int(ac)}", progress=False, activation_checkpointing=ac))
        tr = setup(cfg)
        layers = list(tr.loaded.model.model.layers) + list(tr.critic.backbone.layers)
        assert all((layer.forward.__name__ == "checkpointed") == ac for layer in layers)
        # SGD(lr=1): the change is minus the (clipped) gradient itself, so this compares gradients
        tr.optimizers = {k: torch.optim.SGD(o.param_groups[0]["params"], lr=1.0) for k, o in tr.optimizers.items()}
        before = {n: p.detach().clone() for n, p in tr.loaded.model.named_parameters()}
        train_step(tr, tr.stream.next_batch())
        tr.stream.close()
        return {n: p.detach() - before[n] for n, p in tr.loaded.model.named_parameters()}

    plain, checkpointed = update(False), update(True)
    assert any(bool(d.abs().sum() > 0) for d in plain.values())
    for k in plain:
        # the recomputed forward is the same computation: equal up to float32 rounding
        torch.testing.assert_close(checkpointed[k], plain[k], atol=1e-7, rtol=1e-5, msg=k)

"""GPU check of `traj train` for a lent device, under 5 minutes on one GPU:

  1. the chunked log-prob kernel in bf16 on CUDA against the full-logits reference (values,
     gradients, time and peak memory of both);
  2. `traj train`'s loop with ``--strategy fsdp`` in one process (FSDP2 over a one-rank group,
     bf16 parameters and compute, float32 reduction and AdamW state) on a ~0.6B-parameter Llama
     built from a config with random weights (nothing is downloaded): v0 published, a few SAO
     iterations (K = 2 critic updates and one DIS policy update each), a sharded checkpoint and a
     bf16 published version loaded back with ``transformers.from_pretrained``;
  3. prints tokens/s, peak GPU memory and MFU (model FLOPs utilisation: the dense matmul FLOPs an
     SAO iteration needs, 2N per token for a no-grad forward and 6N for a forward+backward of a
     model with N non-embedding parameters plus its LM / value head, over the step time, against
     the GPU's dense bf16 peak; attention-score FLOPs are left out, so MFU is slightly low).

    python bench/gpu_check.py                # on a CUDA machine (see bench/gpu_check.sh)
    python bench/gpu_check.py --cpu          # dry run of the same code on a tiny config on CPU (float32)

Without CUDA (and without --cpu) it exits at once with status 2 and says so.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time

PEAK_BF16_TFLOPS = {"H200": 989.4, "H100": 989.4, "A100": 312.0, "L40S": 362.1, "A10": 125.0, "L4": 121.0}
"""Dense bf16 tensor-core peaks (TFLOP/s, no sparsity) by GPU name fragment, from the vendors' data
sheets (SXM parts); --peak-tflops overrides."""

GPU_MODEL = dict(hidden_size=1536, intermediate_size=4096, num_hidden_layers=20, num_attention_heads=12,
                 num_key_value_heads=4, vocab_size=32000, max_position_embeddings=4096, tie_word_embeddings=False)
"""~0.6B parameters: 20 x 25.2M per layer + 2 x 49M embedding / LM head."""

CPU_MODEL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=256, max_position_embeddings=4096, tie_word_embeddings=False)


def _log(msg: str) -> None:
    print(msg, flush=True)


def _peak_tflops(name: str, override: float | None) -> float | None:
    if override:
        return override
    return next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)


def check_kernel(device: str, dtype, n: int, hidden: int, vocab: int) -> dict:  # noqa: ANN001
    import torch

    from trajstore.trainer.sao.logprobs import token_logprobs_and_entropy, token_logprobs_and_entropy_reference

    g = torch.Generator(device=device).manual_seed(0)
    h0 = torch.randn(n, hidden, device=device, dtype=dtype, generator=g)
    w0 = (torch.randn(vocab, hidden, device=device, dtype=dtype, generator=g) * hidden ** -0.5)
    tgt = torch.randint(0, vocab, (n,), device=device, generator=g)
    out = {}
    grads = {}
    for name, fn in (("chunked", token_logprobs_and_entropy), ("reference", token_logprobs_and_entropy_reference)):
        h, w = h0.clone().requires_grad_(True), w0.clone().requires_grad_(True)
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        t0 = time.perf_counter()
        lp, ent = fn(h, w, tgt)
        (lp.sum() + ent.sum()).backward()
        if device == "cuda":
            torch.cuda.synchronize()
        out[f"{name}_s"] = time.perf_counter() - t0
        if device == "cuda":
            out[f"{name}_peak_extra_mib"] = (torch.cuda.max_memory_allocated() - base) / 2**20
        grads[name] = (lp.detach().float(), h.grad.float(), w.grad.float())
    a, b = grads["chunked"], grads["reference"]
    out["max_abs_diff_logprob"] = float((a[0] - b[0]).abs().max())
    out["max_rel_diff_grad_hidden"] = float((a[1] - b[1]).norm() / b[1].norm())
    out["max_rel_diff_grad_weight"] = float((a[2] - b[2]).norm() / b[2].norm())
    return out


def _flops_per_token(policy, critic, k: int) -> float:  # noqa: ANN001
    """Dense matmul FLOPs per token of one SAO iteration (see the module docstring)."""
    def matmul_params(model, skip: str) -> int:  # noqa: ANN001
        return sum(p.numel() for n, p in model.named_parameters() if skip not in n and p.dim() == 2)

    n_policy = matmul_params(policy, "embed_tokens")  # layers + LM head
    n_critic = matmul_params(critic, "embed_tokens")  # layers + value head
    return 2 * n_critic + k * 6 * n_critic + 6 * n_policy


def run(args: argparse.Namespace) -> dict:
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from trajstore import TrajectoryBuilder, write_trajectories
    from trajstore.store.layout import checkpoint_dir, checkpoint_latest_file, version_dir
    from trajstore.trainer.config import AlgoConfig, DataConfig, ModelConfig, OptimConfig, RunConfig, TrainConfig
    from trajstore.trainer.loop import distributed as D
    from trajstore.trainer.loop.setup import setup
    from trajstore.trainer.loop.train import train

    device = "cpu" if args.cpu else "cuda"
    result: dict = {"device": device, "torch": torch.__version__}
    t_start = time.perf_counter()
    if device == "cuda":
        result["gpu"] = torch.cuda.get_device_name(0)
        result["peak_bf16_tflops"] = _peak_tflops(result["gpu"], args.peak_tflops)
    model_cfg = CPU_MODEL if args.cpu else GPU_MODEL
    # 1. the chunked log-prob kernel
    kdtype = torch.float32 if args.cpu else torch.bfloat16
    n_tok = 512 if args.cpu else 8192
    result["kernel"] = check_kernel(device, kdtype, n_tok, model_cfg["hidden_size"], model_cfg["vocab_size"])
    _log(f"kernel ({kdtype}, {n_tok} tokens, V={model_cfg['vocab_size']}): {json.dumps(result['kernel'])}")
    # 2. a random model as a Hugging Face directory, and a store of trajectories for it
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        model_dir, store = os.path.join(tmp, "model"), os.path.join(tmp, "store")
        torch.manual_seed(0)
        lcfg = LlamaConfig(**model_cfg)
        model = AutoModelForCausalLM.from_config(lcfg, dtype=torch.float32 if args.cpu else torch.bfloat16)
        result["parameters"] = sum(p.numel() for p in model.parameters())
        model.save_pretrained(model_dir)
        del model
        _log(f"model: {result['parameters'] / 1e6:.0f}M parameters (random), saved to a HF directory")
        rng = np.random.default_rng(0)
        vocab = model_cfg["vocab_size"]
        prompt, turns, action, obs = (32, 3, 16, 16) if args.cpu else (512, 4, 256, 128)
        trajs = []
        for i in range(args.batch_size * (args.iterations + 1)):
            b = TrajectoryBuilder(trajectory_id=f"g{i}", model="random", tokenizer="gpu-check-random")
            b.add_prompt(rng.integers(0, vocab, prompt))
            for t in range(turns):
                b.add_action(rng.integers(0, vocab, action), np.full(action, -math.log(vocab), np.float32),
                             policy_version=0, sampling={"temperature": 1.0})
                if t < turns - 1:
                    b.add_observation(rng.integers(0, vocab, obs))
            b.set_reward(float(rng.integers(0, 2)))
            trajs.append(b.finish())
        write_trajectories(store, trajs)
        tokens_per_traj = len(trajs[0].tokens)
        cfg = TrainConfig(
            store=store, model=ModelConfig(name=model_dir, tokenizer="gpu-check-random"),
            data=DataConfig(batch_size=args.batch_size, micro_batch_size=args.micro_batch_size, max_seq_len=8192),
            optim=OptimConfig(policy_lr=1e-6, critic_lr=5e-6),
            algo=AlgoConfig(critic_warmup_steps=0),
            run=RunConfig(run_id="gpu-check", max_steps=args.iterations, publish_every=0, checkpoint_every=10**6,
                          device=device, strategy="fsdp", bf16=True, progress=False, publish_dtype="bfloat16",
                          activation_checkpointing=args.activation_checkpointing))
        t0 = time.perf_counter()
        tr = setup(cfg)
        result["setup_s"] = time.perf_counter() - t0
        _log(f"setup (load, shard, publish v0): {result['setup_s']:.1f}s")
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        summary = train(cfg, trainer=tr)
        hist = summary.history
        steady = hist[1:] or hist  # the first iteration pays one-off costs (kernel selection, allocator)
        step_s = sum(h["perf/step_s"] for h in steady) / len(steady)
        tokens = sum(h["perf/tokens_per_s"] * h["perf/step_s"] for h in steady) / len(steady)
        result.update(iterations=summary.iterations, steps=summary.steps, tokens_per_trajectory=tokens_per_traj,
                      step_s=step_s, tokens_per_s=tokens / step_s)
        from trajstore.trainer.models import Critic  # noqa: F401 - for the FLOPs count below

        flops = _flops_per_token(tr.loaded.model, D.unwrap(tr.critic), cfg.algo.critic_updates) * tokens / step_s
        result["achieved_tflops"] = flops / 1e12
        if device == "cuda":
            result["peak_gpu_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
            if result.get("peak_bf16_tflops"):
                result["mfu"] = result["achieved_tflops"] / result["peak_bf16_tflops"]
        run_id = cfg.run.run_id
        with open(os.path.join(store, checkpoint_latest_file(run_id))) as fh:
            latest = json.load(fh)["iteration"]
        result["checkpoint_files"] = sorted(os.listdir(os.path.join(store, checkpoint_dir(run_id, latest))))
        # 3. the published version: one whole bf16 safetensors model that from_pretrained loads
        version = os.path.join(store, version_dir(run_id, summary.version))
        loaded = AutoModelForCausalLM.from_pretrained(version, dtype="auto")
        result["published_dtype"] = str(loaded.dtype)
        result["published_parameters"] = sum(p.numel() for p in loaded.parameters())
        D.shutdown(tr.env)
    result["total_s"] = time.perf_counter() - t_start
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="dry run on a tiny config on CPU (float32), to test this script")
    ap.add_argument("--iterations", type=int, default=4, help="SAO iterations (the first is not timed)")
    ap.add_argument("--batch-size", type=int, default=8, help="trajectories per iteration")
    ap.add_argument("--micro-batch-size", type=int, default=2, help="trajectories per forward pass")
    ap.add_argument("--activation-checkpointing", action="store_true")
    ap.add_argument("--peak-tflops", type=float, default=None, help="the GPU's dense bf16 peak (default: by name)")
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    args = ap.parse_args()
    try:
        import torch
    except ImportError as e:
        print(f"gpu_check: torch is not importable ({e}); install the train extra", file=sys.stderr)
        return 2
    if not args.cpu and not torch.cuda.is_available():
        print("gpu_check: no CUDA device (torch.cuda.is_available() is False, torch "
              f"{torch.__version__}); this check needs a GPU. Use --cpu for a dry run of the script.",
              file=sys.stderr)
        return 2
    if args.cpu:
        args.iterations, args.batch_size = min(args.iterations, 3), min(args.batch_size, 4)
    result = run(args)
    _log("\n== gpu check" + (" (CPU dry run: tiny config, float32; figures say nothing about a GPU)" if args.cpu else ""))
    for k in ("gpu", "parameters", "tokens_per_trajectory", "iterations", "step_s", "tokens_per_s",
              "achieved_tflops", "peak_bf16_tflops", "mfu", "peak_gpu_memory_gib", "published_dtype", "total_s"):
        if k in result:
            v = result[k]
            _log(f"{k:>24}: {v:,.3f}" if isinstance(v, float) else f"{k:>24}: {v}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

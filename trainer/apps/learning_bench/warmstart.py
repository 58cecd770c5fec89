"""The warm start of every benchmark run: a tiny transformer first trained by supervised learning
on a noisy demonstrator, cached per seed, so that RL starts from a policy that already knows the
task's format and part of its rules (as the paper's SFT baseline does) rather than from random
weights.

The demonstrator writes each term right with a family-dependent probability
(:data:`DEMO_ACCURACY`) and otherwise a uniform random digit, and picks pref-shift styles
uniformly; the fitted policy inherits those accuracies, so the three difficulty families start
far apart. One model per seed covers both tasks (their prompts differ by the first character).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from trajstore.hub import quiet_loading
from trajstore.trainer.apps.envs import FAMILIES, STYLES, draw_instance
from trajstore.trainer.apps.learning_bench.codec import CharCodec
from trajstore.trainer.apps.learning_bench.tasks import Split, draw, make_episode, split
from trajstore.trainer.models import load_policy

DEMO_ACCURACY = {"easy": 0.9, "medium": 0.6, "hard": 0.35}
"""Probability that the demonstrator writes a term right, per family (else a uniform digit)."""
MODEL = "tiny-llama"
"""The benchmark's architecture (trainer.models: Llama, 2 layers, hidden 64, 4 heads)."""


@dataclass(frozen=True)
class WarmStartConfig:
    """Supervised warm start (cross-entropy on action tokens only, AdamW).

    Attributes:
        steps: optimiser steps. batch_episodes: demonstrations per step (fresh each step, half
            per task). lr: AdamW learning rate. tasks: tasks the demonstrations come from.
        accuracy: :data:`DEMO_ACCURACY` (part of the cache key).
        model: the architecture (:data:`MODEL` for the policy; ``tiny-qwen3-moe`` for the MoE
            critic arms' backbone, fitted to the same demonstrations).
        held_out: first terms per family kept out of the demonstrations, the seed's held-out
            instances of each task (:func:`~trajstore.trainer.apps.learning_bench.tasks.split`, the
            same the runs hold out); 0: demonstrations from every instance.
    """

    steps: int = 250
    batch_episodes: int = 64
    lr: float = 3e-3
    tasks: tuple[str, ...] = ("chain", "pref-shift")
    accuracy: dict[str, float] = field(default_factory=lambda: dict(DEMO_ACCURACY))
    model: str = MODEL
    held_out: int = 0

    def key(self, seed: int) -> str:
        """Cache key of the warm start for `seed` (changes with any setting)."""
        # the same key as before `model` was a field, for the policy's warm starts; and as before
        # `held_out` was one, for warm starts that hold nothing out
        d = asdict(self)
        if not d["held_out"]:
            del d["held_out"]
        blob = json.dumps({"seed": seed, "codec": CharCodec().name, **d}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def demo_action(episode, rng: random.Random, accuracy: dict[str, float]) -> str:  # noqa: ANN001 - an Episode
    """The noisy demonstrator's next action for `episode`: each digit of ``episode.expected()``
    kept with probability ``accuracy[family]``, else a uniform digit; a style character (pref-shift)
    is uniform over :data:`STYLES`."""
    out = []
    for ch in episode.expected():
        if ch in STYLES:
            out.append(rng.choice(STYLES))
        elif rng.random() < accuracy[episode.family]:
            out.append(ch)
        else:
            out.append(str(rng.randrange(10)))
    return "".join(out)


def demonstration(task: str, rng: random.Random, accuracy: dict[str, float],
                  codec: CharCodec, *, sp: Split | None = None) -> tuple[list[int], list[bool]]:
    """One demonstrated episode: (token ids, action mask), 1 = a demonstrated action token
    (its characters and the end-of-action token). The instance comes from `sp`'s training
    instances, or from every instance of the mod-10 chain (None: the draw of the warm starts made
    before held-out demonstrations existed)."""
    inst = draw_instance(rng) if sp is None else draw(rng, sp, held_out=False)
    ep = make_episode(task, inst, preferred=STYLES[0])
    ids = [codec.bos_token_id] + codec.encode(ep.prompt())
    mask = [False] * len(ids)
    while True:
        act = demo_action(ep, rng, accuracy)
        a = codec.encode(act) + [codec.eos_token_id]
        ids += a
        mask += [True] * len(a)
        reply = ep.step(act)
        if reply.done:
            return ids, mask
        o = codec.encode(reply.observation)
        ids += o
        mask += [False] * len(o)


def sft_loss(model: torch.nn.Module, batch: list[tuple[list[int], list[bool]]]) -> torch.Tensor:
    """Mean cross-entropy (nats per action token) of the demonstrated action tokens; the batch is
    right-padded, padding masked out of attention and loss."""
    width = max(len(ids) for ids, _ in batch)
    ids = torch.zeros((len(batch), width), dtype=torch.long)
    att = torch.zeros((len(batch), width), dtype=torch.long)
    tgt = torch.zeros((len(batch), width), dtype=torch.bool)
    for i, (x, m) in enumerate(batch):
        ids[i, :len(x)] = torch.as_tensor(x)
        att[i, :len(x)] = 1
        tgt[i, :len(m)] = torch.as_tensor(m)
    logits = model(input_ids=ids, attention_mask=att).logits[:, :-1].float()
    lp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]
    m = tgt[:, 1:]
    return -(lp * m).sum() / m.sum()


def train_warm_start(seed: int, cfg: WarmStartConfig) -> torch.nn.Module:
    """Fit a fresh ``cfg.model`` (``tiny-llama`` by default; initialised from `seed`) to the
    demonstrator; returns it in train mode, float32."""

    codec = CharCodec()
    model = load_policy(cfg.model, tokenizer=codec.name, tiny_vocab_size=codec.vocab_size, seed=seed).model
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    rng = random.Random(f"warm-start-{seed}")
    # the chain tasks without held-out instances keep the original draw (and so the cached warm starts)
    splits = {t: None if t in ("chain", "pref-shift") and not cfg.held_out else
              split("chain" if t == "pref-shift" else t, seed, cfg.held_out) for t in cfg.tasks}
    model.train()
    for _ in range(cfg.steps):
        batch = [demonstration(t, rng, cfg.accuracy, codec, sp=splits[t])
                 for t in (cfg.tasks[i % len(cfg.tasks)] for i in range(cfg.batch_episodes))]
        loss = sft_loss(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return model


def warm_start_dir(scratch: str | os.PathLike[str], seed: int, cfg: WarmStartConfig) -> Path:
    """Where the warm start for `seed` is cached: ``<scratch>/warmstart/s<seed>-<key>/``, a
    Hugging Face directory (``traj train --model`` and ``trainer.models.load_policy`` read it)."""
    kind = "" if cfg.model == MODEL else f"{cfg.model}-"
    return Path(scratch) / "warmstart" / f"{kind}s{seed}-{cfg.key(seed)}"


def ensure_warm_start(scratch: str | os.PathLike[str], seed: int, cfg: WarmStartConfig) -> Path:
    """The cached warm start for `seed`, trained and saved first if missing (written to a
    temporary sibling and renamed, so a half-written model is never picked up)."""
    final = warm_start_dir(scratch, seed, cfg)
    if (final / "warmstart.json").is_file():
        return final
    t0 = time.monotonic()
    model = train_warm_start(seed, cfg)
    tmp = final.with_name(final.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    with quiet_loading():  # no transformers "Writing model shards" bar between the bench's own lines
        model.save_pretrained(tmp)
    (tmp / "warmstart.json").write_text(json.dumps({"seed": seed, "config": asdict(cfg),
                                                    "seconds": time.monotonic() - t0}, indent=2))
    try:
        os.replace(tmp, final)
    except OSError:  # another process finished the same warm start first
        shutil.rmtree(tmp, ignore_errors=True)
    return final


__all__ = ["DEMO_ACCURACY", "FAMILIES", "WarmStartConfig", "demo_action", "demonstration", "ensure_warm_start",
           "sft_loss", "train_warm_start", "warm_start_dir"]

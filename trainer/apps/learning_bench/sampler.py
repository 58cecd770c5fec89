"""The learning benchmark's rollout engine: plays many episodes in lockstep with a KV cache and
records, for every generated token, its id and the log-prob of the distribution it was actually
sampled from, as an inference engine does.

Training/inference mismatch is injected here, at stated levels (:class:`Mismatch`): the engine is
its own implementation of the model (:class:`LlamaEngine`), its weights and logits are rounded to
bfloat16 (the arithmetic stays float32: bfloat16 matmuls are about 3x slower than float32 on the
CPUs this runs on), and noise is added to the logits before sampling (Gaussian; or, in the
``engine`` model, a float8 LM head and heavy-tailed noise). The trainer recomputes log-probs in float32 without noise, so importance ratios
differ from 1 even at zero staleness, as between vLLM / SGLang and an FSDP trainer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from trajstore.trainer.apps.envs.base import Episode, Reply
from trajstore.trainer.apps.learning_bench.codec import CharCodec


@dataclass(frozen=True)
class Mismatch:
    """Sampler-side deviations from the trainer's float32 policy.

    Two models (``SuiteConfig.mismatch``): ``noise`` (the default: bf16 rounding
    and i.i.d. Gaussian logit noise, unbiased and light-tailed) and ``engine``
    (:meth:`engine_like`), shaped like a real inference engine against a trainer:

    * systematic: the LM head is rounded to float8 (e4m3, one scale per vocabulary row) on top of
      bf16, so every logit carries a fixed error that depends on the context through the hidden
      state and is the same at every call, not redrawn; the MiniMax-M1 report (arXiv 2506.13585,
      RL section) traced its training/inference probability mismatch to the LM head's precision;
    * heavy-tailed: Student-t logit noise (3 degrees of freedom) instead of Gaussian: most tokens
      agree closely and a few differ by a lot, and a sampled token's engine log-prob is biased up
      (it was sampled partly because its noise was high), most for low-probability tokens, the
      shape reported for vLLM / SGLang against FSDP trainers (Yao et al. 2025, "Your efficient RL
      framework secretly brings you off-policy RL training"; Li et al. 2025, "Taming the tail",
      arXiv 2512.23087: the log-prob mismatch bound scales as 1 - p, and sampled tail tokens show
      systematically biased mismatch). The magnitudes are not fitted to any measured engine.

    Attributes:
        bf16: round the engine's weights (when loaded) and its logits to bfloat16.
        logit_noise: scale (nats) of the noise added to every logit of every sampled position,
            after the rounding: the sd of Gaussian noise, or the scale of Student-t noise.
        noise_df: None = Gaussian noise; an integer = Student-t noise with that many degrees of
            freedom (heavier tails the smaller).
        head_fp8: round the LM head's weights to float8 e4m3 with one scale per vocabulary row
            (``max |w_row| / 448``), after bf16.
    """

    bf16: bool = False
    logit_noise: float = 0.0
    noise_df: int | None = None
    head_fp8: bool = False

    @classmethod
    def engine_like(cls, logit_noise: float) -> Mismatch:
        """The ``engine`` model: bf16, a float8 LM head, Student-t (3 df) logit noise of scale
        `logit_noise` (see the class docstring for the sources of this shape)."""
        return cls(bf16=True, logit_noise=logit_noise, noise_df=ENGINE_NOISE_DF, head_fp8=True)

    def describe(self) -> str:
        parts = ["bf16 weights + logits" if self.bf16 else "float32"]
        if self.head_fp8:
            parts.append("float8 LM head")
        if self.logit_noise:
            kind = f"Student-t ({self.noise_df} df)" if self.noise_df else "Gaussian"
            parts.append(f"{kind} logit noise, scale {self.logit_noise:g} nats")
        return ", ".join(parts)

    def noise(self, shape: torch.Size | tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
        """Logit noise of `shape` (zeros without ``logit_noise``), drawn from `generator`."""
        if not self.logit_noise:
            return torch.zeros(shape)
        z = torch.randn(shape, generator=generator)
        if self.noise_df:
            chi2 = torch.randn((*shape, self.noise_df), generator=generator).pow(2).sum(-1)
            z = z / (chi2 / self.noise_df).sqrt()
        return self.logit_noise * z


ENGINE_NOISE_DF = 3
"""Degrees of freedom of the ``engine`` model's Student-t logit noise."""
FP8_E4M3_MAX = 448.0
"""Largest finite float8 e4m3 value (the per-row scale maps a row's max |w| to it)."""


def fp8_rows(w: torch.Tensor) -> torch.Tensor:
    """`w` ``(V, H)`` rounded to float8 e4m3 with one scale per row and back to float32."""
    scale = w.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / FP8_E4M3_MAX
    return (w / scale).to(torch.float8_e4m3fn).float() * scale


NO_MISMATCH = Mismatch()


class LlamaEngine:
    """A minimal Llama forward with a KV cache: the benchmark's rollout engine.

    A separate implementation of the same function as transformers' ``LlamaForCausalLM``
    (RMSNorm, rotary embeddings, grouped-query attention, SiLU-gated MLP), as an inference engine
    is separate from the trainer's modelling code; it avoids transformers' per-call overhead,
    which dominates for a 2-layer, 64-wide model. Float32 arithmetic; agrees with transformers to
    float32 rounding (tested). Weights are copied in by :meth:`load` (rounded to bfloat16 with
    ``Mismatch.bf16``), so the trainer's later updates do not reach the engine until the next load.

    Args:
        model: a transformers Llama causal LM (architecture and initial weights).
        mismatch: the engine-side deviations (:class:`Mismatch`).

    Raises:
        ValueError: not a Llama model, or features this engine does not implement (biases,
            non-default rotary scaling).
    """

    def __init__(self, model: nn.Module, mismatch: Mismatch = Mismatch()):
        cfg = model.config
        rope = getattr(cfg, "rope_parameters", None) or {"rope_type": "default", "rope_theta": cfg.rope_theta}
        if cfg.model_type != "llama" or cfg.attention_bias or cfg.mlp_bias or rope.get("rope_type") != "default" \
                or cfg.hidden_act != "silu":
            raise ValueError(f"LlamaEngine supports plain Llama models only, got {cfg.model_type}")
        self.layers = int(cfg.num_hidden_layers)
        self.heads = int(cfg.num_attention_heads)
        self.kv_heads = int(cfg.num_key_value_heads)
        self.head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
        self.eps = float(cfg.rms_norm_eps)
        dim = self.head_dim
        self.inv_freq = 1.0 / (float(rope["rope_theta"]) ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        self.mismatch = mismatch
        self.w: dict[str, torch.Tensor] = {}
        self.load(model)
        self.reset(0)

    def load(self, model: nn.Module) -> None:
        """Copy `model`'s current weights in (rounded to bfloat16 when ``mismatch.bf16``)."""
        with torch.no_grad():
            for name, p in model.named_parameters():
                t = p.detach().float()
                self.w[name] = (t.to(torch.bfloat16).float() if self.mismatch.bf16 else t.clone())
        if "lm_head.weight" not in self.w:  # tied embeddings
            self.w["lm_head.weight"] = self.w["model.embed_tokens.weight"]
        if self.mismatch.head_fp8:
            self.w["lm_head.weight"] = fp8_rows(self.w["lm_head.weight"])

    def reset(self, batch: int) -> None:
        """Empty the KV cache for `batch` rows."""
        shape = (batch, self.kv_heads, 0, self.head_dim)
        self.k = [torch.zeros(shape) for _ in range(self.layers)]
        self.v = [torch.zeros(shape) for _ in range(self.layers)]
        self.key_mask = torch.zeros((batch, 0), dtype=torch.bool)

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only the cache rows `rows` (int64 indices), in that order."""
        self.k = [k.index_select(0, rows) for k in self.k]
        self.v = [v.index_select(0, rows) for v in self.v]
        self.key_mask = self.key_mask.index_select(0, rows)

    def _norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.w[name]

    def step(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Feed a chunk and return the logits after its last slot.

        Args:
            ids, positions: ``(B, w)`` int64; each row's new tokens, left-padded inside the chunk.
            mask: ``(B, w)`` bool, 1 = a real token (padding is never attended to).

        Returns:
            ``(B, V)`` float32 logits predicting each row's next token (bfloat16-rounded with
            ``mismatch.bf16``; no noise: :func:`play` adds it).
        """
        w = self.w
        b, width = ids.shape
        x = w["model.embed_tokens.weight"][ids]
        freqs = positions[..., None].float() * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[:, None], emb.sin()[:, None]
        past = self.key_mask.shape[1]
        self.key_mask = torch.cat([self.key_mask, mask.bool()], dim=1)
        causal = torch.ones((width, past + width), dtype=torch.bool).tril(diagonal=past)
        allowed = causal[None] & self.key_mask[:, None, :]  # (B, w, S)
        bias = torch.where(allowed, 0.0, -1e9)[:, None]  # finite: a padding query stays finite
        groups = self.heads // self.kv_heads
        half = self.head_dim // 2

        def rot(t: torch.Tensor) -> torch.Tensor:
            return t * cos + torch.cat((-t[..., half:], t[..., :half]), dim=-1) * sin

        for i in range(self.layers):
            pre = f"model.layers.{i}."
            h = self._norm(x, pre + "input_layernorm.weight")
            q = (h @ w[pre + "self_attn.q_proj.weight"].T).view(b, width, self.heads, self.head_dim).transpose(1, 2)
            k = (h @ w[pre + "self_attn.k_proj.weight"].T).view(b, width, self.kv_heads, self.head_dim).transpose(1, 2)
            v = (h @ w[pre + "self_attn.v_proj.weight"].T).view(b, width, self.kv_heads, self.head_dim).transpose(1, 2)
            q, k = rot(q), rot(k)
            self.k[i] = torch.cat([self.k[i], k], dim=2)
            self.v[i] = torch.cat([self.v[i], v], dim=2)
            kk = self.k[i].repeat_interleave(groups, dim=1)
            vv = self.v[i].repeat_interleave(groups, dim=1)
            att = torch.softmax(q @ kk.transpose(-1, -2) * self.head_dim ** -0.5 + bias, dim=-1)
            o = (att @ vv).transpose(1, 2).reshape(b, width, self.heads * self.head_dim)
            x = x + o @ w[pre + "self_attn.o_proj.weight"].T
            h = self._norm(x, pre + "post_attention_layernorm.weight")
            g = torch.nn.functional.silu(h @ w[pre + "mlp.gate_proj.weight"].T) * (h @ w[pre + "mlp.up_proj.weight"].T)
            x = x + g @ w[pre + "mlp.down_proj.weight"].T
        last = self._norm(x[:, -1], "model.norm.weight")
        logits = last @ w["lm_head.weight"].T
        return logits.to(torch.bfloat16).float() if self.mismatch.bf16 else logits


@dataclass
class Row:
    """One episode being played.

    Attributes:
        episode: the environment instance (stepped in place).
        context: every token so far: BOS, prompt, actions (with their end token) and
            observations; extended in place as the episode goes on.
        max_action_tokens: token budget of one action.
        tag: anything the caller wants back in `on_action`.
        _action, _logprobs: the current action's tokens so far (a row may start mid-action: its
            context then already ends with them) and their engine log-probs.
        done: the episode is over (set here).
        reward: the episode reward once done.
    """

    episode: Episode
    context: list[int]
    max_action_tokens: int
    tag: Any = None
    done: bool = False
    reward: float | None = None
    _action: list[int] = field(default_factory=list)
    _logprobs: list[float] = field(default_factory=list)


OnAction = Callable[[Row, list[int], list[float], Reply, list[int]], None]
"""``on_action(row, action_ids, action_logprobs, reply, observation_ids)`` after each action."""


def play(engine: LlamaEngine, rows: Sequence[Row], codec: CharCodec, *, generator: torch.Generator,
         until: Literal["action", "episode"] = "episode", on_action: OnAction | None = None) -> None:
    """Advance every row by one action (``until="action"``) or to the end of its episode, all
    rows in one batch: each engine call feeds every active row its new tokens (left-padded inside
    the call's chunk, positions counted per row) on top of the KV cache, then samples one token
    per row at temperature 1 from ``log_softmax(logits + noise)`` (``engine.mismatch``).

    An action ends at the end-of-action token (kept as its last token) or after
    ``row.max_action_tokens``; its text (end token dropped) goes to ``episode.step``, the
    observation's tokens are appended to the context and fed with the next call.

    Args:
        engine: the rollout engine (its weights are the policy version being sampled).
        rows: the episodes; finished ones are ignored.
        codec: the benchmark vocabulary (end-of-action token, decoding).
        generator: torch RNG for the sampling and the logit noise.
        until: stop each row after one action or at the end of its episode.
        on_action: called after every action with the sampled ids, their engine log-probs
            (nats, of the noisy distribution actually sampled) and the environment's reply.
    """
    live = [r for r in rows if not r.done]
    if not live:
        return
    noise = engine.mismatch.logit_noise
    pending = [list(r.context) for r in live]
    # a row may start inside an action (its context then ends with the action's first tokens,
    # which `_action` repeats): those are already in the context when the action ends
    in_context = [len(r._action) for r in live]
    fed = [0] * len(live)  # tokens already in the cache, per row (its next position)
    idx = list(range(len(live)))  # row of each cache slot
    engine.reset(len(live))
    with torch.no_grad():
        while idx:
            width = max(len(pending[i]) for i in idx)
            ids = torch.zeros((len(idx), width), dtype=torch.long)
            mask = torch.zeros((len(idx), width), dtype=torch.bool)
            pos = torch.zeros((len(idx), width), dtype=torch.long)
            for j, i in enumerate(idx):
                n = len(pending[i])
                ids[j, width - n:] = torch.as_tensor(pending[i], dtype=torch.long)
                mask[j, width - n:] = True
                pos[j, width - n:] = torch.arange(fed[i], fed[i] + n)
                fed[i] += n
            logits = engine.step(ids, pos, mask)
            if noise:
                logits = logits + engine.mismatch.noise(logits.shape, generator)
            lp = torch.log_softmax(logits, dim=-1)
            tok = torch.multinomial(lp.exp(), 1, generator=generator)[:, 0]
            tok_lp = lp.gather(-1, tok[:, None])[:, 0].tolist()
            keep = []
            for j, i in enumerate(idx):
                r, t = live[i], int(tok[j])
                r._action.append(t)
                r._logprobs.append(tok_lp[j])
                if t != codec.eos_token_id and len(r._action) < r.max_action_tokens:
                    pending[i] = [t]
                    keep.append(j)
                    continue
                action, lps = r._action, r._logprobs
                r._action, r._logprobs = [], []
                text = codec.decode([a for a in action if a != codec.eos_token_id])
                reply = r.episode.step(text)
                obs = codec.encode(reply.observation) if not reply.done else []
                r.context.extend(action[in_context[i]:])
                in_context[i] = 0
                r.context.extend(obs)
                if reply.done:
                    r.done, r.reward = True, float(reply.reward)
                if on_action is not None:
                    on_action(r, action, lps, reply, obs)
                if not reply.done and until == "episode":
                    pending[i] = [t] + obs
                    keep.append(j)
            if len(keep) < len(idx):
                if keep:
                    engine.keep(torch.as_tensor(keep, dtype=torch.long))
                idx = [idx[j] for j in keep]


def new_row(episode: Episode, codec: CharCodec, max_action_tokens: int, tag: Any = None) -> Row:
    """A row at the start of `episode`: BOS and the prompt's tokens."""
    return Row(episode, [codec.bos_token_id] + codec.encode(episode.prompt()), max_action_tokens, tag)


def score_tokens(model: nn.Module, contexts: Sequence[Sequence[int]]) -> list[torch.Tensor]:
    """Teacher-forced float32 log-probs: for each context, ``(T - 1,)`` nats of token t + 1 given
    tokens 0..t (a slow reference for :func:`play`'s recorded log-probs)."""
    out = []
    with torch.no_grad():
        for c in contexts:
            ids = torch.as_tensor([list(c)], dtype=torch.long)
            logits = model(input_ids=ids).logits[0, :-1].float()
            out.append(torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0])
    return out

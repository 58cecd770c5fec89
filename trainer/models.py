"""Policy and critic networks for `traj train`.

Policy: a transformers causal LM. Critic: a copy of the policy's backbone (initialised from
the policy weights) with a scalar value head; only parameters whose names match a pattern train
(MLP / MoE expert projections and the value head by default; embeddings, norms and attention
frozen: docs/sao.md, mechanism 3). Both are wrapped in small
modules whose ``forward`` returns exactly what the loss needs, so DDP sees every used weight.
"""

from __future__ import annotations

import copy
import inspect
import re
from dataclasses import dataclass

import torch
from torch import nn

from trajstore.errors import TrajstoreError
from trajstore.hub import quiet_loading, resolve_model
from trajstore.sampling import SamplingArrays
from trajstore.trainer.config import CRITIC_TRAINABLE_PATTERN
from trajstore.trainer.sao.logprobs import token_logprobs_and_entropy

TINY_MODELS = ("tiny-llama", "tiny-qwen3-moe")
"""Random-weight test models: 2 layers, hidden 64, vocabulary ``ModelConfig.tiny_vocab_size``."""


class ModelLoadError(TrajstoreError):
    """The requested model cannot be built or loaded."""


@dataclass(frozen=True)
class LoadedPolicy:
    """A policy and where it came from.

    Attributes:
        model: the causal LM (float32 parameters, train mode).
        name: canonical model name (recorded in policy meta and checked against the store).
        tokenizer: tokenizer identity the store's ``tokenizer`` column must equal.
        vocab_size: rows of the output embedding (token ids must be below it).
    """

    model: nn.Module
    name: str
    tokenizer: str
    vocab_size: int


def _tiny_config(kind: str, vocab_size: int):  # noqa: ANN202 - a transformers config
    common = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
                  tie_word_embeddings=False)
    if kind == "tiny-llama":
        # transformers (the train extra) loads only when a model or tokenizer is needed
        from transformers import LlamaConfig

        return LlamaConfig(**common)
    # transformers (the train extra) loads only when a model or tokenizer is needed
    from transformers import Qwen3MoeConfig

    return Qwen3MoeConfig(**common, head_dim=16, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
                          norm_topk_prob=True, decoder_sparse_step=1)


def policy_identity(name: str, *, tokenizer: str | None = None) -> tuple[str, str]:
    """(canonical model name, tokenizer identity) of a policy without loading its weights, so
    that the data can be checked before the (slow) model load. Same values as
    :func:`load_policy` records in :class:`LoadedPolicy`.

    Raises:
        TrajstoreError: unknown name or missing files (from :func:`trajstore.hub.resolve_model`).
    """
    if name in TINY_MODELS:
        return name, tokenizer or name
    ref = resolve_model(name)
    canonical = ref.name
    if ref.gguf_file is None:  # a HF directory: what from_pretrained records (reads config.json only)
        from transformers import AutoConfig

        try:
            canonical = getattr(AutoConfig.from_pretrained(ref.directory), "_name_or_path", None) or ref.name
        except (OSError, ValueError, KeyError) as e:
            raise ModelLoadError(f"cannot read the config of model {name!r} in {ref.directory}: {e}") from e
    return canonical, tokenizer or canonical


def load_policy(name: str, *, tokenizer: str | None = None, tiny_vocab_size: int = 256, seed: int = 0) -> LoadedPolicy:
    """Build or load the policy.

    Args:
        name: ``tiny-llama`` / ``tiny-qwen3-moe`` (random weights from `seed`), ``smollm2-135m``,
            a local Hugging Face directory or a ``.gguf`` file (dequantised to float32).
        tokenizer: override of the tokenizer identity (default: the model's canonical name; for a
            local directory that is its absolute path unless config.json names the model).
        tiny_vocab_size: vocabulary of the tiny models (tokens).
        seed: torch seed for the tiny models' initialisation.

    Raises:
        ModelLoadError: unknown name, or transformers cannot load the files.
    """
    # transformers (the train extra) loads only when a model or tokenizer is needed
    from transformers import AutoModelForCausalLM

    if name in TINY_MODELS:
        cfg = _tiny_config(name, tiny_vocab_size)
        cfg._attn_implementation = "sdpa"
        with torch.random.fork_rng(devices=[]), quiet_loading():
            torch.manual_seed(seed)
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        canonical = name
    else:
        ref = resolve_model(name)
        try:
            with quiet_loading():  # no transformers progress bars / FutureWarnings between our own lines
                model = AutoModelForCausalLM.from_pretrained(ref.directory, dtype=torch.float32,
                                                             attn_implementation="sdpa", **ref.from_pretrained_kwargs())
        except (OSError, ValueError, KeyError) as e:
            raise ModelLoadError(f"cannot load model {name!r} from {ref.directory}: {e}") from e
        canonical = ref.name
        if ref.gguf_file is None:
            canonical = getattr(model.config, "_name_or_path", None) or ref.name
    model.train()
    if getattr(model.config, "use_cache", None):
        model.config.use_cache = False
    vocab = model.get_output_embeddings().weight.shape[0]
    return LoadedPolicy(model=model, name=canonical, tokenizer=tokenizer or canonical, vocab_size=int(vocab))


def backbone_of(causal_lm: nn.Module) -> nn.Module:
    """The decoder stack of a transformers causal LM (``model.model`` for Llama / Qwen)."""
    prefix = getattr(causal_lm, "base_model_prefix", "model")
    base = getattr(causal_lm, prefix, None)
    if base is None:
        raise ModelLoadError(f"{type(causal_lm).__name__} has no backbone attribute {prefix!r}")
    return base


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The decoder layers of a causal LM, a :class:`Critic` or a backbone (``layers`` of the
    backbone, as in Llama / Qwen / Mistral), in execution order: FSDP's unit of sharding and of
    activation checkpointing.

    Raises:
        ModelLoadError: no ``layers`` list found.
    """
    base = model.backbone if isinstance(model, Critic) else model
    if not hasattr(base, "layers"):
        base = backbone_of(base)
    layers = getattr(base, "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise ModelLoadError(f"{type(model).__name__} has no decoder layers list (backbone.layers)")
    return list(layers)


class Critic(nn.Module):
    """Value model: the policy's backbone (copied) and a linear value head.

    ``forward(input_ids, position_ids) -> values``; Shape: (1, L) ids and positions of a packed
    row (positions restart at 0 for each trajectory) -> (1, L) float32 values in reward units.
    """

    def __init__(self, backbone: nn.Module, hidden_size: int, *, seed: int = 0):
        super().__init__()
        self.backbone = backbone
        self.value_head = nn.Linear(hidden_size, 1)
        # Zero weight and bias: every first value is exactly 0 (a random head started the
        # demo's critic at a mean of 1.8 against returns of ~0.28, so every advantage was mostly
        # critic error). The head's gradient (value error x hidden state) is non-zero, so it moves
        # on the first update and the backbone's gradient follows from the second.
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)
        del seed  # the head is deterministic now; the argument stays for build_critic's callers

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        h = self.backbone(input_ids=input_ids, position_ids=position_ids, use_cache=False).last_hidden_state
        # a fresh tensor, not a view: FSDP2 hooks the module's outputs for its backward pass
        return self.value_head(h).squeeze(-1).float().clone()


def build_critic(policy: nn.Module, *, trainable_pattern: str | None = CRITIC_TRAINABLE_PATTERN,
                 seed: int = 0) -> Critic:
    """A critic initialised from the policy's current weights, training only the parameters whose
    names match `trainable_pattern` (docs/sao.md, mechanism 3: attention frozen, MLP / MoE expert
    projections and the value head train; arXiv 2607.07508).

    Args:
        policy: the causal LM (its backbone is deep-copied; the LM head is not used).
        trainable_pattern: regex searched in each critic parameter name (e.g.
            ``backbone.layers.0.mlp.up_proj.weight``, ``value_head.weight``); matches keep
            ``requires_grad=True``, every other parameter is frozen. Default
            :data:`CRITIC_TRAINABLE_PATTERN`. None = every parameter trains (the full-parameter
            critic ablation).
        seed: unused (the value head starts at zero, see :class:`Critic`); kept for callers.

    Returns:
        The :class:`Critic` (float32, train mode, the policy's device).

    Raises:
        ValueError: the pattern leaves the value head frozen (a critic that cannot fit any value),
            or matches no backbone parameter (a typo would silently train the head alone).
    """
    backbone = copy.deepcopy(backbone_of(policy))
    critic = Critic(backbone, int(policy.config.hidden_size), seed=seed)
    if trainable_pattern is not None:
        rx = re.compile(trainable_pattern)
        names = [n for n, _ in critic.named_parameters()]
        train = {n for n in names if rx.search(n)}
        if not any(n.startswith("value_head.") for n in train):
            raise ValueError(f"critic_trainable_pattern {trainable_pattern!r} leaves the value head frozen "
                             "(names look like value_head.weight)")
        if not any(n.startswith("backbone.") for n in train):
            raise ValueError(f"critic_trainable_pattern {trainable_pattern!r} matches no backbone parameter "
                             f"(names look like {[n for n in names if n.startswith('backbone.')][:4]})")
        for n, p in critic.named_parameters():
            p.requires_grad_(n in train)
    return critic


class PolicyLogprobs(nn.Module):
    """Per-token log-probs (and entropy) of given next tokens under the policy, without ever
    materialising (L, V) logits (chunked over the sequence, trajstore.trainer.sao.logprobs).

    ``forward(input_ids, position_ids, targets, sampling) -> (logprobs, entropy)``.
    Shapes: input_ids, position_ids, targets (1, L) int64; sampling a
    :class:`~trajstore.sampling.SamplingArrays` of (1, L) tensors (the processed distribution
    each target was drawn from: its action span's temperature, top-k, top-p, min-p; temperature
    1 without truncation elsewhere); outputs (1, L) float32, nats, of the processed distribution
    (docs/sampling.md). Entropy (of the same distribution) is returned detached (a diagnostic only).
    """

    def __init__(self, causal_lm: nn.Module, *, chunk_size: int = 1024):
        super().__init__()
        if getattr(causal_lm.get_output_embeddings(), "bias", None) is not None:
            raise ModelLoadError(f"{type(causal_lm).__name__}: an LM head with a bias is not supported")
        self.lm = causal_lm
        self.chunk_size = chunk_size

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, targets: torch.Tensor,
                sampling: SamplingArrays) -> tuple[torch.Tensor, torch.Tensor]:
        h = backbone_of(self.lm)(input_ids=input_ids, position_ids=position_ids, use_cache=False).last_hidden_state
        lp, ent = token_logprobs_and_entropy(h, self.lm.get_output_embeddings().weight, targets,
                                             chunk_size=self.chunk_size, sampling=sampling)
        return lp.float().clone(), ent.detach().float().clone()  # not views (FSDP2 hooks the outputs)


def cache_kwarg(model: nn.Module) -> str:
    """Name of the KV-cache argument of ``model.forward``: ``cache`` in transformers releases that
    renamed it (``past_key_values`` there is deprecated and prints a FutureWarning on every call,
    as ``traj serve`` did on its first request), ``past_key_values`` before."""
    params = inspect.signature(type(model).forward).parameters
    return "cache" if "cache" in params else "past_key_values"


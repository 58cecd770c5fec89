"""What an action span's stored log-probs mean, and whether the trainer can reproduce them: the one
rule that ``traj train``'s admission, ``traj stats`` and the trainer's per-token sampling arrays
all use (torch-free).

A stored log-prob has one meaning: the log-prob of the token under the distribution it was drawn
from (docs/sampling.md). The trainer recomputes it from its own logits with the span's temperature,
min-p, top-k and top-p (in that order, vLLM V1's sampler: ``vllm/v1/sample/sampler.py``), so that
unchanged weights give an importance ratio of exactly 1. A span is **reproducible** when its
log-probs describe that distribution and nothing else shaped it:

- ``logprob_mode`` ``processed`` (or null: not recorded, trained as processed, so stores written
  before the field existed train as they did, temperature applied as before);
- ``tempered`` or ``raw`` when they coincide with processed: a greedy call (temperature 0, whose
  log-probs every engine reports from the untempered, untruncated logits), ``tempered`` without
  top-k / top-p / min-p, ``raw`` at temperature 1 without them;

and the request changed the distribution in no way the trainer does not apply (penalties, logit
bias, allowed tokens, bad words, min tokens, grammars / structured output, custom logits
processors or other samplers), read from the span's ``sampling_params`` JSON (top level or its
``extra`` object, as :class:`~trajstore.models.SamplingParams` stores them). Anything else is
refused with a named reason (:data:`REFUSALS`).

Null sampling fields mean the engine's defaults as the OpenAI API states them (temperature 1, no
truncation). An engine that fills unset fields from the model's generation config (vLLM's
``--generation-config auto``) must have its effective values recorded for this to hold.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from typing import Any, Final, NamedTuple

import numpy as np
import pyarrow as pa

from trajstore.schema import LOGPROB_MODES

PROCESSING_ORDER: Final[tuple[str, ...]] = ("allowed_token_ids", "temperature", "min_p", "top_k", "top_p")
"""The order in which the processed distribution is built from the logits (vLLM V1's sampler;
``traj serve`` and the trainer): restrict to the allowed ids, divide by the temperature, keep the
tokens with ``p >= min_p * p_max``, keep the ``top_k`` largest, keep the top-p nucleus of what is
left, renormalise. SGLang samples top-k, top-p, then min-p, but reports no processed log-probs."""

SAMPLING_SPAN_FIELDS: Final[tuple[str, ...]] = (
    "kind", "logprob_mode", "temperature", "top_k", "top_p", "min_p", "sampling_params")
"""The span fields the rule reads."""

REFUSALS: Final[dict[str, str]] = {
    "raw_logprobs": "raw log-probs (before temperature and truncation) of a call sampled with a temperature "
                    "other than 1 or with top-k / top-p / min-p",
    "tempered_logprobs": "log-probs before top-k / top-p / min-p of a call sampled with them",
    "unknown_logprob_mode": "a logprob_mode the trainer does not know",
    "penalty": "presence / frequency / repetition penalties",
    "logit_bias": "a logit bias",
    "allowed_tokens": "allowed_token_ids",
    "bad_words": "bad_words",
    "min_tokens": "min_tokens (stop tokens masked before it)",
    "grammar": "guided decoding / structured output (a grammar, JSON schema, regex, choice, or a required tool call)",
    "logits_processor": "a custom logits processor or a sampler other than temperature, top-k, top-p, min-p",
}
"""Why a span's log-probs cannot be reproduced by the trainer, by reason (what the request or the
engine setting did, in words)."""

REMEDIES: Final[dict[str, str]] = {
    "raw_logprobs": "start vLLM with --logprobs-mode processed_logprobs (traj serve reports processed log-probs)",
    "tempered_logprobs": "SGLang reports log-probs before top-k / top-p / min-p: sample without them there, or use "
                         "vLLM with --logprobs-mode processed_logprobs or traj serve",
    "unknown_logprob_mode": "record logprob_mode as processed, tempered or raw",
    "penalty": "sample without presence_penalty / frequency_penalty / repetition_penalty",
    "logit_bias": "sample without logit_bias",
    "allowed_tokens": "sample without allowed_token_ids",
    "bad_words": "sample without bad_words",
    "min_tokens": "sample without min_tokens",
    "grammar": "sample without guided decoding / response_format / tool_choice required",
    "logits_processor": "sample with temperature, top-k, top-p and min-p only",
}
"""The engine or request setting to change, by reason."""

_GRAMMAR_KEYS = ("guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs",
                 "json_schema", "regex", "ebnf", "structural_tag")
_PROCESSOR_KEYS = ("logits_processors", "custom_logit_processor", "logits_processor")
_OTHER_SAMPLERS: dict[str, float] = {  # knob -> its value when off (a sampler the trainer does not apply)
    "typical_p": 1.0, "tfs": 1.0, "top_a": 0.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "mirostat": 0.0,
    "mirostat_mode": 0.0, "dry_multiplier": 0.0, "xtc_probability": 0.0, "top_n_sigma": 0.0,
    "no_repeat_ngram_size": 0.0}

REQUEST_FIELDS: Final[tuple[str, ...]] = (
    "seed", "stop", "n",
    "presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias", "allowed_token_ids", "bad_words",
    "min_tokens", "response_format", "tool_choice", *_GRAMMAR_KEYS, *_PROCESSOR_KEYS, *_OTHER_SAMPLERS)
"""The request fields besides temperature / top-k / top-p / min-p / max tokens that an adapter
records in a span's ``sampling_params`` (its ``extra`` object) when the request has them: every
one that changes the distribution a token is drawn from (what :func:`request_refusal` reads) and
the seed, stop strings and choice count."""

REASON_CODES: Final[dict[str, int]] = {r: i for i, r in enumerate(REFUSALS)}
"""Each reason's index (the vectorised functions return codes; -1 = reproducible)."""


class SamplingArrays(NamedTuple):
    """The effective parameters of the distribution a token was drawn from (what the trainer
    applies), one entry per span or per token: numpy arrays here, torch tensors of one shape on
    the trainer's side.

    Fields:
        temperature: float32, > 0 (1 for greedy calls and where none applies).
        top_k: int64, keep the k most likely (ties with the k-th kept); 0 = off.
        top_p: float32 in (0, 1], the nucleus mass; 1 = off.
        min_p: float32 in [0, 1], keep ``p >= min_p * p_max``; 0 = off.
    """

    temperature: Any
    top_k: Any
    top_p: Any
    min_p: Any


def no_truncation(n: int) -> SamplingArrays:
    """`n` entries of temperature 1 without truncation (the model's own distribution)."""
    return SamplingArrays(np.ones(n, np.float32), np.zeros(n, np.int64), np.ones(n, np.float32),
                          np.zeros(n, np.float32))


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def _set(v: Any) -> bool:
    """A list / object / string option that is present and not empty."""
    return v is not None and v is not False and v != "" and v != [] and v != {}


@functools.lru_cache(maxsize=4096)
def request_refusal(sampling_params: str | None) -> str | None:
    """Why the request behind a span changed the distribution in a way the trainer does not
    apply, from the span's ``sampling_params`` JSON (keys at the top level or in its ``extra``
    object), or None. Text that is not a JSON object says nothing (None).

    Reasons: ``penalty`` (presence / frequency penalty != 0, repetition penalty != 1),
    ``logit_bias``, ``allowed_tokens``, ``bad_words``, ``min_tokens`` (> 0), ``grammar``
    (``guided_*``, ``structured_outputs``, SGLang's ``json_schema`` / ``regex`` / ``ebnf`` /
    ``structural_tag``, a ``response_format`` other than text, ``tool_choice`` ``required`` or
    naming a tool), ``logits_processor`` (custom processors; ``typical_p`` < 1 and the other
    samplers of :data:`_OTHER_SAMPLERS` when on).
    """
    if not sampling_params:
        return None
    try:
        obj = json.loads(sampling_params)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    extra = obj.get("extra")
    p: dict[str, Any] = {**obj, **extra} if isinstance(extra, dict) else obj
    for key, neutral in (("presence_penalty", 0.0), ("frequency_penalty", 0.0), ("repetition_penalty", 1.0)):
        x = _number(p.get(key))
        if x is not None and x != neutral:
            return "penalty"
    if _set(p.get("logit_bias")):
        return "logit_bias"
    if _set(p.get("allowed_token_ids")):
        return "allowed_tokens"
    if _set(p.get("bad_words")):
        return "bad_words"
    if (_number(p.get("min_tokens")) or 0) > 0:
        return "min_tokens"
    fmt = p.get("response_format")
    fmt_type = fmt.get("type") if isinstance(fmt, Mapping) else fmt
    tool_choice = p.get("tool_choice")
    if (any(_set(p.get(k)) for k in _GRAMMAR_KEYS) or fmt_type not in (None, "text")
            or tool_choice == "required" or isinstance(tool_choice, Mapping)):
        return "grammar"
    if any(_set(p.get(k)) for k in _PROCESSOR_KEYS):
        return "logits_processor"
    for key, off in _OTHER_SAMPLERS.items():
        x = _number(p.get(key))
        if x is not None and x != off:
            return "logits_processor"
    return None


def _effective(mode: str | None, temperature: float | None, top_k: int | None, top_p: float | None,
               min_p: float | None) -> tuple[str | None, tuple[float, int, float, float]]:
    """(refusal from the mode, effective (temperature, top_k, top_p, min_p)) of one action span."""
    t = 1.0 if temperature is None or math.isnan(temperature) else float(temperature)
    k = 0 if top_k is None or top_k <= 0 else int(top_k)
    p = 1.0 if top_p is None or math.isnan(top_p) or top_p >= 1.0 else float(top_p)
    m = 0.0 if min_p is None or math.isnan(min_p) or min_p <= 0.0 else float(min_p)
    if mode is not None and mode not in LOGPROB_MODES:
        return "unknown_logprob_mode", (t, k, p, m)
    if t <= 0:  # greedy: every engine reports the untempered, untruncated log-softmax
        return None, (1.0, 0, 1.0, 0.0)
    truncated = bool(k or p < 1.0 or m)
    if mode is None or mode == "processed":
        return None, (t, k, p, m)
    if mode == "tempered":
        return ("tempered_logprobs" if truncated else None), (t, 0, 1.0, 0.0)
    return ("raw_logprobs" if truncated or t != 1.0 else None), (1.0, 0, 1.0, 0.0)  # raw


def effective_sampling(mode: str | None, temperature: float | None, top_k: int | None = None,
                       top_p: float | None = None, min_p: float | None = None) -> tuple[float, int, float, float]:
    """The parameters of the distribution an action's log-probs describe, as the trainer applies
    them: ``(temperature > 0, top_k (0 = off), top_p (1 = off), min_p (0 = off))``. A greedy call
    (temperature 0) and a ``tempered`` / ``raw`` span give the untruncated distribution they describe
    (raw: temperature 1). Null values are the OpenAI defaults (temperature 1, no truncation)."""
    return _effective(mode, temperature, top_k, top_p, min_p)[1]


def span_refusal(mode: str | None, temperature: float | None = None, top_k: int | None = None,
                 top_p: float | None = None, min_p: float | None = None,
                 sampling_params: str | None = None) -> str | None:
    """Why the trainer cannot reproduce the distribution an action span's log-probs describe (a
    key of :data:`REFUSALS`), or None when it can (see the module docstring). The request's own
    changes are checked first, then the mode against the sampling parameters."""
    return request_refusal(sampling_params) or _effective(mode, temperature, top_k, top_p, min_p)[0]


def _column(spans: pa.StructArray, name: str) -> pa.Array:
    """Field `name` of flat spans, or nulls when the spans lack it (read from an older shard)."""
    i = spans.type.get_field_index(name)
    return spans.field(i) if i >= 0 else pa.nulls(len(spans))


def _flat(spans: pa.StructArray | pa.ChunkedArray) -> pa.StructArray:
    if isinstance(spans, pa.ChunkedArray):
        spans = spans.combine_chunks() if spans.num_chunks != 1 else spans.chunk(0)
    return spans


def span_sampling(spans: pa.StructArray | pa.ChunkedArray) -> tuple[np.ndarray, SamplingArrays]:
    """The rule over flat spans (one entry per span, any kind; fields of
    :data:`SAMPLING_SPAN_FIELDS`, a missing one read as null), vectorised: distinct combinations
    of the fields are judged once.

    Returns:
        ``(codes, params)``: int8 (S,) refusal codes (:data:`REASON_CODES`; -1 = reproducible or not
        an action span) and the effective :class:`SamplingArrays` of each span (S,) (temperature 1,
        no truncation on other kinds).
    """
    import pyarrow.compute as pc  # 0.1-0.2 s to import (a wrapper per kernel): not on every command's start-up path

    spans = _flat(spans)
    n = len(spans)
    codes = np.full(n, -1, np.int8)
    params = no_truncation(n)
    if n == 0:
        return codes, params
    act = pc.fill_null(pc.equal(_column(spans, "kind"), "action"), False).to_numpy(zero_copy_only=False)
    at = np.flatnonzero(act)
    if not len(at):
        return codes, params
    idx = pa.array(at)
    names = ("logprob_mode", "temperature", "top_k", "top_p", "min_p", "sampling_params")
    # judge each distinct combination of the fields once (calls of a run share a few settings)
    encoded = [pc.dictionary_encode(pc.take(_column(spans, name), idx), null_encoding="encode") for name in names]
    keys = np.stack([e.indices.to_numpy(zero_copy_only=False) for e in encoded], axis=1)
    combos, inverse = np.unique(keys, axis=0, return_inverse=True)
    dictionaries = [e.dictionary.to_pylist() for e in encoded]
    judged_code = np.empty(len(combos), np.int8)
    judged = np.empty((len(combos), 4), np.float64)
    for j, combo in enumerate(combos.tolist()):
        mode, t, k, p, m, sp = (d[c] for d, c in zip(dictionaries, combo))
        why, eff = _effective(mode, t, k, p, m)
        why = request_refusal(sp) or why
        judged_code[j] = -1 if why is None else REASON_CODES[why]
        judged[j] = eff
    inverse = inverse.reshape(-1)
    out_code, out = judged_code[inverse], judged[inverse]
    codes[at] = out_code
    params.temperature[at] = out[:, 0]
    params.top_k[at] = out[:, 1]
    params.top_p[at] = out[:, 2]
    params.min_p[at] = out[:, 3]
    return codes, params


def trajectory_refusals(spans: pa.ListArray | pa.ChunkedArray) -> list[tuple[str, list[int]] | None]:
    """Per trajectory (a ``spans`` list column): None when every action span is reproducible,
    else ``(reason of the first refused span, indices of the refused spans)``."""
    if isinstance(spans, pa.ChunkedArray):
        spans = spans.combine_chunks() if spans.num_chunks != 1 else spans.chunk(0)
    offsets = spans.offsets.to_numpy()
    values = spans.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    codes, _ = span_sampling(values)
    refused = np.flatnonzero(codes >= 0)
    out: list[tuple[str, list[int]] | None] = [None] * len(spans)
    if not len(refused):
        return out
    rel = offsets - offsets[0]
    rows = np.searchsorted(rel, refused, side="right") - 1
    names = list(REFUSALS)
    for row in np.unique(rows):
        mine = refused[rows == row]
        out[int(row)] = (names[codes[mine[0]]], (mine - rel[row]).tolist())
    return out

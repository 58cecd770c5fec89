"""The generation engine behind ``traj serve``: batched sampling from a transformers causal LM
in one worker thread, per-token log-probs and weight versions, and when weight reloads run
(the loading itself is in weights.py).

Requests queue up; the worker takes up to ``max_batch_size`` of them as one left-padded batch
with a KV cache (static batching: requests that arrive meanwhile wait for the next batch) and
reports every sampled token to its request's event callback. Nothing is cached across batches,
so there is no prefix cache to go stale; a reload in ``retract`` mode drops the batch's KV cache
and recomputes it under the new weights before the next token (no token is ever sampled from a
hybrid of old KV and new weights).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn
from transformers import DynamicCache

from trajstore.sampling import SamplingArrays, effective_sampling
from trajstore.trainer.models import cache_kwarg
from trajstore.trainer.sao.sampling import as_tensors
from trajstore.trainer.sao.sampling import processed_logprobs as shared_processed_logprobs
from trajstore.trainer.serving.weights import reload_weights

WeightUpdateMode = Literal["drain", "abort", "retract"]
"""How a reload treats requests being generated: ``drain`` = finish them under the old weights
first (new ones wait; SGLang's default), ``abort`` = end them with an error (SGLang's
``abort_all_requests``), ``retract`` = continue them under the new weights after recomputing
their KV cache, reporting where the version changed."""


@dataclass
class Sampling:
    """Sampling parameters of one request.

    Attributes:
        max_new_tokens: tokens to generate at most (>= 1).
        temperature: softmax temperature; 0 = greedy (log-probs are then the model's own).
        top_p: nucleus mass in (0, 1]; top_k: keep the k most likely tokens (-1 or 0 = all);
        min_p: keep the tokens at least min_p times as likely as the most likely one (0 = off).
        stop_token_ids: ids that end generation (kept as the last token); the EOS id is added
            unless ``ignore_eos``.
        allowed_token_ids: sample only among these ids (vLLM's ``allowed_token_ids``).
        seed: seeds this request's own generator (reproducible regardless of batch mates).
        top_logprobs: how many alternatives per position to report (0 = none).
        choices: the output must be one of these token sequences (vLLM's ``guided_choice``):
            each step may only continue a choice that the tokens so far start.
    """

    max_new_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    stop_token_ids: tuple[int, ...] = ()
    allowed_token_ids: tuple[int, ...] | None = None
    seed: int | None = None
    top_logprobs: int = 0
    choices: tuple[tuple[int, ...], ...] | None = None

    def allowed_after(self, generated: Sequence[int]) -> tuple[int, ...] | None:
        """The ids allowed next: ``allowed_token_ids`` narrowed by ``choices`` (None = all)."""
        if self.choices is None:
            return self.allowed_token_ids
        k = len(generated)
        nxt = {c[k] for c in self.choices if len(c) > k and tuple(c[:k]) == tuple(generated)}
        if self.allowed_token_ids is not None:
            nxt &= set(self.allowed_token_ids)
        return tuple(sorted(nxt)) if nxt else tuple(self.stop_token_ids[:1])


@dataclass(frozen=True)
class TokenEvent:
    """One sampled token: id, log-prob (nats) under the distribution it was drawn from, the
    weight version that produced it, and the `top` alternatives [(id, log-prob)]."""

    token_id: int
    logprob: float
    version: str
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class DoneEvent:
    """The request ended: ``stop`` (a stop id was sampled), ``length``, or ``abort`` (with
    `error`: a reload aborted it or the engine failed)."""

    finish_reason: str
    error: str | None = None


Event = TokenEvent | DoneEvent


@dataclass
class GenRequest:
    """A queued generation: the prompt ids, sampling, and the callback that receives events
    (called from the engine thread; it must not block)."""

    prompt_ids: list[int]
    sampling: Sampling
    emit: Callable[[Event], None]
    cancelled: threading.Event = field(default_factory=threading.Event)


@dataclass
class _Reload:
    path: str
    version: str | None
    mode: WeightUpdateMode
    done: Future[dict[str, Any]]


def processed_logprobs(logits: torch.Tensor, s: Sampling, allowed: Sequence[int] | None = None) -> torch.Tensor:
    """Log-probabilities of the distribution a token is drawn from, for one row of logits.

    The allowed ids (default ``allowed_token_ids``) first, as in vLLM's sampler, then the processed
    distribution that the trainer reproduces (:func:`trajstore.trainer.sao.sampling.processed_logprobs`:
    temperature, min-p, top-k, top-p, renormalised; :data:`trajstore.sampling.PROCESSING_ORDER`).
    Excluded tokens get -inf. Temperature 0 (greedy) reports the model's own log-softmax (after
    the allowed-ids restriction), as vLLM does.

    Shape: logits (V,) -> (V,) float32, nats.
    """
    x = logits.float()
    allowed = s.allowed_token_ids if allowed is None else allowed
    if allowed is not None:
        keep = torch.full_like(x, float("-inf"))
        idx = torch.as_tensor(allowed, device=x.device)
        keep[idx] = 0.0
        x = x + keep
    t, k, p, m = effective_sampling("processed", s.temperature, s.top_k, s.top_p, s.min_p)
    return shared_processed_logprobs(x[None], as_tensors(SamplingArrays([t], [k], [p], [m]), x.device))[0]


class Engine:
    """Owns the model; one worker thread generates, reloads happen between decode steps.

    Args:
        model: a transformers causal LM (evaluation mode is set; parameters are not trained).
        eos_token_ids: ids that end generation by default.
        version: the weight version of `model` at start (reported with every token).
        max_batch_size: requests sampled together at most.
    """

    def __init__(self, model: nn.Module, *, eos_token_ids: Sequence[int], version: str = "0",
                 max_batch_size: int = 16):
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.model = model.eval()
        self.device = next(model.parameters()).device
        self.eos_token_ids = tuple(sorted(set(int(t) for t in eos_token_ids)))
        self.version = version
        self.max_batch_size = max_batch_size
        self._requests: queue.Queue[GenRequest | _Reload | None] = queue.Queue()
        self._pending: list[GenRequest] = []
        self._reloads: list[_Reload] = []
        self._lock = threading.Lock()
        self.reloads_done = 0
        self.busy = False
        self._thread = threading.Thread(target=self._run, name="traj-serve-engine", daemon=True)
        self._thread.start()

    # -- public ---------------------------------------------------------------------------------

    def submit(self, req: GenRequest) -> None:
        """Queue a request; its events arrive through ``req.emit``."""
        if not req.prompt_ids:
            raise ValueError("the prompt has no tokens")
        self._requests.put(req)

    def reload(self, path: str, *, version: str | None = None, mode: WeightUpdateMode = "drain") -> Future[dict[str, Any]]:
        """Load the weights of folder `path`; the future resolves to a SGLang-style result
        ``{"success", "message", "weight_version", "num_paused_requests"}`` when done."""
        fut: Future[dict[str, Any]] = Future()
        self._requests.put(_Reload(path, version, mode, fut))
        return fut

    def close(self) -> None:
        self._requests.put(None)
        self._thread.join(timeout=30)

    # -- worker ---------------------------------------------------------------------------------

    def _drain_queue(self, block: bool) -> bool:
        """Move queued items into pending lists; False when asked to stop."""
        try:
            item = self._requests.get(timeout=0.5) if block else self._requests.get_nowait()
        except queue.Empty:
            return True
        while True:
            if item is None:
                return False
            if isinstance(item, _Reload):
                self._reloads.append(item)
            else:
                self._pending.append(item)
            try:
                item = self._requests.get_nowait()
            except queue.Empty:
                return True

    def _run(self) -> None:
        while True:
            if not self._drain_queue(block=not (self._pending or self._reloads)):
                for r in self._pending:
                    r.emit(DoneEvent("abort", "the server is shutting down"))
                return
            if self._reloads:  # between batches: nothing is in flight
                self._apply_reload(self._reloads.pop(0), in_flight=0)
                continue
            batch = [r for r in self._pending if not r.cancelled.is_set()][: self.max_batch_size]
            for r in self._pending:
                if r.cancelled.is_set() and r not in batch:
                    r.emit(DoneEvent("abort", "cancelled"))
            self._pending = [r for r in self._pending if r not in batch and not r.cancelled.is_set()]
            if batch:
                self.busy = True
                try:
                    self._generate(batch)
                except Exception as e:  # noqa: BLE001 - report to every request instead of dying
                    for r in batch:
                        r.emit(DoneEvent("abort", f"generation failed: {type(e).__name__}: {e}"))
                finally:
                    self.busy = False

    def _apply_reload(self, rl: _Reload, *, in_flight: int) -> bool:
        result = reload_weights(self.model, rl.path, version=rl.version, current_version=self.version,
                                mode=rl.mode, in_flight=in_flight)
        if result["success"]:
            self.version = result["weight_version"]
            self.reloads_done += 1
        rl.done.set_result(result)
        return bool(result["success"])

    def _sample(self, logits: torch.Tensor, reqs: list[GenRequest], gens: list[torch.Generator | None],
                active: list[bool], outputs: list[list[int]]) -> list[tuple[int, float, tuple[tuple[int, float], ...]] | None]:
        out: list[tuple[int, float, tuple[tuple[int, float], ...]] | None] = []
        for i, r in enumerate(reqs):
            if not active[i]:
                out.append(None)
                continue
            lp = processed_logprobs(logits[i], r.sampling, r.sampling.allowed_after(outputs[i]))
            if r.sampling.temperature <= 0:
                tok = int(lp.argmax())
            else:
                tok = int(torch.multinomial(lp.exp(), 1, generator=gens[i]))
            top: tuple[tuple[int, float], ...] = ()
            if r.sampling.top_logprobs > 0:
                v, ix = lp.topk(min(r.sampling.top_logprobs, lp.numel()))
                top = tuple((int(a), float(b)) for a, b in zip(ix.tolist(), v.tolist()))
            out.append((tok, float(lp[tok]), top))
        return out

    @torch.no_grad()
    def _generate(self, reqs: list[GenRequest]) -> None:
        gens: list[torch.Generator | None] = []
        for r in reqs:
            g = None
            if r.sampling.seed is not None:
                g = torch.Generator(device=self.device).manual_seed(int(r.sampling.seed))
            gens.append(g)
        B = len(reqs)
        contexts = [list(r.prompt_ids) for r in reqs]
        generated = [0] * B
        active = [True] * B
        stops = [set(r.sampling.stop_token_ids) for r in reqs]
        need_prefill = True
        cache: Any = None
        mask = pos = None
        last = None
        while any(active):
            if self._abort_or_retract(reqs, active):
                need_prefill = True
            if not any(active):
                break
            if need_prefill:
                T = max(len(c) for c in contexts)
                ids = torch.zeros((B, T), dtype=torch.long, device=self.device)
                mask = torch.zeros((B, T), dtype=torch.long, device=self.device)
                for i, c in enumerate(contexts):
                    ids[i, T - len(c):] = torch.as_tensor(c, dtype=torch.long)
                    mask[i, T - len(c):] = 1
                pos = (mask.cumsum(-1) - 1).clamp(min=0)
                cache = DynamicCache()
                inp = ids
                need_prefill = False
            else:
                assert last is not None and pos is not None and mask is not None
                inp = last[:, None]
                pos = pos[:, -1:] + 1
                mask = torch.cat([mask, torch.ones((B, 1), dtype=mask.dtype, device=self.device)], dim=1)
            out = self.model(input_ids=inp, attention_mask=mask, position_ids=pos, use_cache=True,
                             logits_to_keep=1, **{cache_kwarg(self.model): cache})
            picks = self._sample(out.logits[:, -1], reqs, gens, active,
                                 [c[len(c) - n:] if n else [] for c, n in zip(contexts, generated)])
            toks = torch.zeros(B, dtype=torch.long, device=self.device)
            version = self.version
            for i, pick in enumerate(picks):
                if pick is None:
                    continue
                tok, lp, top = pick
                toks[i] = tok
                contexts[i].append(tok)
                generated[i] += 1
                r = reqs[i]
                r.emit(TokenEvent(tok, lp, version, top))
                if r.cancelled.is_set():
                    active[i] = False
                    r.emit(DoneEvent("abort", "cancelled"))
                elif tok in stops[i]:
                    active[i] = False
                    r.emit(DoneEvent("stop"))
                elif generated[i] >= r.sampling.max_new_tokens:
                    active[i] = False
                    r.emit(DoneEvent("length"))
            last = toks

    def _abort_or_retract(self, reqs: list[GenRequest], active: list[bool]) -> bool:
        """Between decode steps: apply queued reloads that may not wait for the batch to end.
        Returns True when the KV cache must be recomputed (a retract reload happened)."""
        self._drain_queue(block=False)
        refill = False
        keep: list[_Reload] = []
        while self._reloads:
            rl = self._reloads.pop(0)
            if rl.mode == "drain":
                keep.append(rl)
                continue
            n = sum(active)
            if rl.mode == "abort":
                for i, r in enumerate(reqs):
                    if active[i]:
                        active[i] = False
                        r.emit(DoneEvent("abort", "aborted by a weight update (abort_all_requests)"))
                self._apply_reload(rl, in_flight=n)
            elif self._apply_reload(rl, in_flight=n):
                refill = True
        self._reloads = keep + self._reloads
        return refill

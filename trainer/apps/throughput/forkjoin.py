"""A fork-join model of the time to a policy step, the prediction ``traj bench throughput`` sets
beside what it measures.

An episode takes ``D = sum over its K turns of (g + L_t)`` seconds: K turns (see
:class:`~trajstore.trainer.apps.throughput.trace.EnvSpec`), each a model call of ``g`` seconds
(measured) and a lognormal tool call ``L_t``. A step trains ``B`` trajectories in ``T`` seconds
(the trainer's busy time per step: compute, records, publishing; measured).

- **synchronous** (a batch barrier): the B episodes of a batch start together and the step
  starts when the slowest has finished (fork-join), so ``step = E[max of B D] + T``;
- **one-step off-policy**: batch k+1 is generated while batch k trains, so
  ``step = max(E[max of B D], T)``;
- **asynchronous** with ``--max-staleness eta`` and ``W`` rollout slots: no barrier; by Little's law
  the throughput is ``X = C / E[D]`` with ``C`` episodes running, bounded by the slots
  (``C <= W``), by the staleness gate (running + finished-but-unconsumed episodes ``<= (eta+1) B``;
  a finished trajectory waits on average B/2 arrivals for its batch to fill and then ``T`` for the
  step that records it consumed, so ``C + B/2 + X T <= (eta+1) B``), and by the trainer
  (``X <= B / T``):
  ``X = min(W / E[D], (eta + 1/2) B / (E[D] + T), B / T)`` and ``step = B / X``.

``E[max of B D]`` has no closed form. Given K = k, the sum of k lognormals is approximated by the
lognormal with the same mean and variance (Fenton-Wilkinson 1960); the CDF of D is the mixture of
these over the distribution of K, and ``E[max] = integral of 1 - F(x)^B dx``, integrated on a
log grid. For K = 1 it is exact (B = 2: ``2 E[L] Phi(sigma / sqrt 2)``); against 100,000 simulated
batches of the trace's distribution (B = 8, median 0.2 s, 3 mean turns, g = 0.03 s) it is 0.04%,
0.4% and 3.8% high at sigma = 0.5, 1 and 1.5 (the lognormal's tail is heavier than the sum's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trajstore.trainer.apps.throughput.trace import EnvSpec

_GRID_POINTS = 20001
"""Points of the log grid E[max] is integrated on (trapezoid rule)."""
_TAIL_Z = 9.0
"""The grid ends where the longest episode's lognormal is this many of its sigmas above its mean
(1 - Phi(9) ~ 1e-19: the integrand left out is negligible for any B used here)."""


def lognormal_mean(median: float, sigma: float) -> float:
    """Mean of a lognormal with this median and log-sigma: ``median * exp(sigma^2 / 2)``."""
    return median * math.exp(sigma * sigma / 2)


def lognormal_var(median: float, sigma: float) -> float:
    """Variance of that lognormal: ``median^2 exp(sigma^2) (exp(sigma^2) - 1)``."""
    return median * median * math.exp(sigma * sigma) * math.expm1(sigma * sigma)


def normal_cdf(z: np.ndarray) -> np.ndarray:
    """Phi, the standard normal CDF, elementwise."""
    return 0.5 * (1.0 + np.vectorize(math.erf)(np.asarray(z, dtype=float) / math.sqrt(2.0)))


def turn_pmf(spec: EnvSpec) -> np.ndarray:
    """P(K = k) for k = 1..max_turns, shape (max_turns,): ``p (1-p)^(k-1)`` below the cut and
    ``(1-p)^(max_turns-1)`` (every longer draw) at it."""
    p, cap = spec.turn_p, spec.max_turns
    k = np.arange(1, cap + 1)
    pmf = p * (1 - p) ** (k - 1)
    pmf[-1] = (1 - p) ** (cap - 1)
    return pmf


def episode_mean_s(spec: EnvSpec, call_s: float) -> float:
    """E[D] (s): mean turns times (call_s + mean tool latency)."""
    k = np.arange(1, spec.max_turns + 1)
    return float((turn_pmf(spec) * k).sum()) * (call_s + lognormal_mean(spec.median_s, spec.sigma))


def episode_cdf(x: np.ndarray, spec: EnvSpec, call_s: float) -> np.ndarray:
    """P(D <= x) for durations `x` (s), the Fenton-Wilkinson mixture of the module docstring."""
    x = np.asarray(x, dtype=float)
    m1, v1 = lognormal_mean(spec.median_s, spec.sigma), lognormal_var(spec.median_s, spec.sigma)
    out = np.zeros_like(x)
    for k, w in enumerate(turn_pmf(spec), start=1):
        s2 = math.log1p(v1 / (k * m1 * m1))  # k iid: mean k m1, variance k v1
        mu = math.log(k * m1) - s2 / 2
        y = x - k * call_s
        z = (np.log(np.where(y > 0, y, 1.0)) - mu) / math.sqrt(s2)
        out += w * np.where(y > 0, normal_cdf(z), 0.0)
    return out


def expected_max_s(batch_size: int, spec: EnvSpec, call_s: float) -> float:
    """E[max of `batch_size` iid episode durations] (s), integrated on a log grid."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    cap = spec.max_turns
    m1, v1 = lognormal_mean(spec.median_s, spec.sigma), lognormal_var(spec.median_s, spec.sigma)
    s_cap = math.sqrt(math.log1p(v1 / (cap * m1 * m1)))
    hi = cap * call_s + math.exp(math.log(cap * m1) - s_cap * s_cap / 2 + _TAIL_Z * s_cap)
    lo = 1e-9 * hi
    u = np.linspace(math.log(lo), math.log(hi), _GRID_POINTS)
    x = np.exp(u)
    f = 1.0 - episode_cdf(x, spec, call_s) ** batch_size
    return float(lo + np.trapezoid(f * x, u))  # [0, lo]: 1 - F^B = 1 there


@dataclass(frozen=True)
class StepInputs:
    """What the model needs besides the arm.

    Attributes:
        spec: the tool-call latency distribution.
        batch_size: B, trajectories per step.
        workers: W, episodes that may run at once (rollout slots).
        call_s: g, seconds of one model call (measured).
        train_s: T, the trainer's busy seconds per step (measured).
    """

    spec: EnvSpec
    batch_size: int
    workers: int
    call_s: float
    train_s: float


def predicted_step_s(kind: str, inputs: StepInputs, max_staleness: int | None = None) -> float:
    """Seconds per policy step the model predicts for an arm (see the module docstring).

    Args:
        kind: ``sync``, ``one-step`` or ``async``.
        inputs: sizes and measured costs.
        max_staleness: eta of an ``async`` arm.

    Raises:
        ValueError: an unknown kind, or ``async`` without eta.
    """
    b, w, t = inputs.batch_size, inputs.workers, inputs.train_s
    if kind in ("sync", "one-step"):
        tail = expected_max_s(b, inputs.spec, inputs.call_s)
        return tail + t if kind == "sync" else max(tail, t)
    if kind != "async" or max_staleness is None:
        raise ValueError(f"unknown arm kind {kind!r} (or async without max_staleness)")
    d = episode_mean_s(inputs.spec, inputs.call_s)
    rates = [w / d, (max_staleness + 0.5) * b / (d + t)]
    if t > 0:
        rates.append(b / t)
    return b / min(rates)

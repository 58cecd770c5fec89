"""The report of a ``traj bench throughput`` suite: per sigma and arm, the median and range over
seeds of what the arms measured, the speedup over the synchronous arm (paired by seed) beside the
fork-join model's prediction, that speedup split into asynchrony at equal concurrency and
concurrency at equal asynchrony, where a batch-barrier arm's time goes, and the issue's claims with
their figures. Tables as data (:class:`~trajstore.tables.TableData`; ``traj`` draws them) and as
``report.md``."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from trajstore.tables import TableData
from trajstore.trainer.apps.throughput.config import Arm, ThroughputConfig
from trajstore.trainer.apps.throughput.forkjoin import episode_mean_s, expected_max_s
from trajstore.trainer.apps.throughput.result import ArmResult

SPEEDUP_TARGET = 2.5
"""The issue's target: the asynchronous arm reaches N steps this much faster than sync at sigma 1."""
LEVEL_OFF = 0.10
"""Staleness 4 and 8 "level off" when their median speedup is within this share of staleness 2's."""


def med_range(xs: Sequence[float]) -> tuple[float, float, float]:
    """(median, min, max); NaN for no values."""
    xs = [x for x in xs if x is not None]
    if not xs:
        nan = float("nan")
        return nan, nan, nan
    return statistics.median(xs), min(xs), max(xs)


def cell(xs: Sequence[float | None], fmt: str = ".2f") -> str:
    """``median [min, max]`` of `xs` (one value alone when there is one seed; ``n/a`` for none)."""
    vals = [x for x in xs if x is not None]
    if not vals:
        return "n/a"
    m, lo, hi = med_range(vals)
    return f"{m:{fmt}}" if len(vals) == 1 else f"{m:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


class Grid:
    """The results by (sigma, arm), each a dict seed -> result; sync results pair each arm by seed."""

    def __init__(self, cfg: ThroughputConfig, results: Sequence[ArmResult]):
        self.cfg = cfg
        self.by: dict[tuple[float, str], dict[int, ArmResult]] = {}
        for r in results:
            self.by.setdefault((r.sigma, r.arm), {})[r.seed] = r
        self.sigmas = [s for s in cfg.sigmas if any(k[0] == s for k in self.by)]
        self.arms = [a for a in cfg.arms if any(k[1] == a for k in self.by)]

    def cells(self) -> list[tuple[float, str, dict[int, ArmResult]]]:
        return [(s, a, self.by[(s, a)]) for s in self.sigmas for a in self.arms if (s, a) in self.by]

    def values(self, sigma: float, arm: str, get: Callable[[ArmResult], float | None]) -> list[float | None]:
        return [get(r) for r in self.by.get((sigma, arm), {}).values()]

    def paired(self, sigma: float, arm: str, get: Callable[[ArmResult, ArmResult], float]) -> list[float]:
        """`get(sync, arm)` for every seed run by both."""
        sync = self.by.get((sigma, "sync"), {})
        return [get(sync[seed], r) for seed, r in self.by.get((sigma, arm), {}).items() if seed in sync]

    def speedup(self, sigma: float, arm: str) -> list[float]:
        return self.paired(sigma, arm, lambda s, r: s.wall_s / r.wall_s)

    def predicted(self, sigma: float, arm: str) -> list[float]:
        return self.paired(sigma, arm, lambda s, r: s.predicted_step_s / r.predicted_step_s)

    def ratio(self, sigma: float, arm: str) -> list[float]:
        return self.paired(sigma, arm, lambda s, r: (s.wall_s / r.wall_s) / (s.predicted_step_s / r.predicted_step_s))

    def between(self, sigma: float, slow: str, fast: str, *, predicted: bool = False) -> list[float]:
        """Per seed run by both: how many times faster `fast` reached N steps than `slow` (wall time,
        or the fork-join model's step time with `predicted`)."""
        a, b = self.by.get((sigma, slow), {}), self.by.get((sigma, fast), {})
        if predicted:
            return [a[s].predicted_step_s / b[s].predicted_step_s for s in b if s in a]
        return [a[s].wall_s / b[s].wall_s for s in b if s in a]


def decomposition(cfg: ThroughputConfig, g: Grid) -> list[tuple[float, str, str, str, str, str]]:
    """For each asynchronous arm that also ran with B episodes in flight (``async-N-cB``): the
    speedup over sync split into what asynchrony buys at equal concurrency (sync vs async-N-cB,
    both B in flight), what concurrency buys at equal asynchrony (async-N-cB vs async-N: B vs W in
    flight) and both together (sync vs async-N, the speedup table's figure). Rows (sigma, figure,
    what it holds fixed, arms, speedup, predicted); the first two multiply to the third, seed by seed."""
    b, w = cfg.batch_size, cfg.workers
    rows = []
    for s in g.sigmas:
        for a in g.arms:
            arm = Arm.parse(a)
            if arm.kind != "async" or arm.concurrency != b:
                continue
            full = Arm("async", arm.max_staleness).name
            rows.append((s, "asynchrony", f"concurrency: {b} episodes in flight in both", f"sync -> {a}",
                         cell(g.between(s, "sync", a)), cell(g.between(s, "sync", a, predicted=True))))
            if (s, full) in g.by:
                rows.append((s, "concurrency", f"asynchrony: eta {arm.max_staleness} in both", f"{a} -> {full} "
                             f"({b} -> {w} in flight)", cell(g.between(s, a, full)),
                             cell(g.between(s, a, full, predicted=True))))
                rows.append((s, "both", "nothing: barrier at B vs no barrier at W", f"sync -> {full} ({b} -> {w} in "
                             f"flight)", cell(g.between(s, "sync", full)), cell(g.between(s, "sync", full, predicted=True))))
    return rows


def tables(cfg: ThroughputConfig, results: Sequence[ArmResult]) -> list[TableData]:
    """The report's tables (cells are ``median [min, max]`` over seeds)."""
    g = Grid(cfg, results)
    n = cfg.steps
    out = [
        TableData(f"throughput.speedup (time to {n} policy steps; speedup over sync paired by seed; episodes in "
                  f"flight: sync and one-step B = {cfg.batch_size}, async-N W = {cfg.workers}, async-N-cC C)",
                  ["sigma", "arm", "seeds", "wall_s", "step_s", "speedup", "predicted", "measured/predicted"],
                  [(s, a, len(rs), cell(g.values(s, a, lambda r: r.wall_s), ".1f"),
                    cell(g.values(s, a, lambda r: r.step_s)), cell(g.speedup(s, a)), cell(g.predicted(s, a)),
                    cell(g.ratio(s, a))) for s, a, rs in g.cells()], keys=["sigma", "arm"]),
        TableData("throughput.rates (over the window: first episode started -> N-th step recorded)",
                  ["sigma", "arm", "trajectories_per_s", "action_tokens_per_s", "trainer_idle", "rollout_idle"],
                  [(s, a, cell(g.values(s, a, lambda r: r.trajectories_per_s)),
                    cell(g.values(s, a, lambda r: r.action_tokens_per_s), ".0f"),
                    cell(g.values(s, a, lambda r: r.trainer_idle)), cell(g.values(s, a, lambda r: r.rollout_idle)))
                   for s, a, _ in g.cells()], keys=["sigma", "arm"],
                  note="idle: trainer = share of the window waiting for data; rollout = share of W slots x window "
                       "not in an episode (not started, at a barrier, held by the staleness gate)"),
        TableData("throughput.staleness (store audit; policy versions)",
                  ["sigma", "arm", "token_mean", "token_p99", "token_max", "traj_mean", "traj_p99", "traj_max",
                   "audit_equals_trainer", "dis_masked"],
                  [(s, a, cell(g.values(s, a, lambda r: r.staleness.token_mean)),
                    cell(g.values(s, a, lambda r: r.staleness.token_p99), ".0f"),
                    cell(g.values(s, a, lambda r: r.staleness.token_max), ".0f"),
                    cell(g.values(s, a, lambda r: r.staleness.traj_mean)),
                    cell(g.values(s, a, lambda r: r.staleness.traj_p99), ".0f"),
                    cell(g.values(s, a, lambda r: r.staleness.traj_max), ".0f"),
                    f"{sum(r.check.equal for r in rs.values())}/{len(rs)}",
                    cell(g.values(s, a, lambda r: r.dis_masked), ".4f")) for s, a, rs in g.cells()],
                  keys=["sigma", "arm"],
                  note="audit_equals_trainer: seeds whose audit totals (tokens, sum, max; trajectories, sum, max) "
                       "equal the trainer's step metrics and consumed records exactly"),
        TableData("throughput.time (where it goes; seconds, per step or per call)",
                  ["sigma", "arm", "call_s", "episode_s", "hold_s", "train_s", "train_compute_s", "predicted_step_s",
                   "step_s"],
                  [(s, a, cell(g.values(s, a, lambda r: r.call_s), ".3f"),
                    cell(g.values(s, a, lambda r: r.episode_s)), cell(g.values(s, a, lambda r: r.hold_s)),
                    cell(g.values(s, a, lambda r: r.train_s)), cell(g.values(s, a, lambda r: r.train_compute_s)),
                    cell(g.values(s, a, lambda r: r.predicted_step_s)), cell(g.values(s, a, lambda r: r.step_s)))
                   for s, a, _ in g.cells()], keys=["sigma", "arm"],
                  note="call_s: a model call through proxy and server; episode_s: a finished episode (hold left "
                       "out); train_s: the trainer's busy time per step (compute, records, publishing)"),
    ]
    dec = decomposition(cfg, g)
    if dec:
        out.insert(1, TableData(
            "throughput.decomposition (speedup = time to N steps of the left arm / the right arm's, paired by seed)",
            ["sigma", "figure", "holds_fixed", "arms", "speedup", "predicted"], dec, keys=["sigma", "figure"],
            wrap=["holds_fixed", "arms"],
            note="the speedup table's figure over sync mixes asynchrony with concurrency: sync runs B episodes at "
                 "once, async-N all W slots; asynchrony x concurrency = both, seed by seed"))
    procs = ("trainer", "serve", "proxy", "agents")
    out.append(TableData(
        "throughput.cpu (CPU seconds per policy step by process, while the arm ran)",
        ["sigma", "arm", *procs, "total", "cpu_share", "load_1min"],
        [(s, a, *(cell(g.values(s, a, lambda r, p=p: r.cpu_s_per_step.get(p))) for p in procs),
          cell(g.values(s, a, lambda r: sum(r.cpu_s_per_step.values()) if r.cpu_s_per_step else None)),
          cell(g.values(s, a, lambda r: r.cpu_share)),
          cell(g.values(s, a, lambda r: r.load_average[0] if r.load_average else None), ".1f"))
         for s, a, _ in g.cells()], keys=["sigma", "arm"],
        note="agents: the rollout side (this process); cpu_share: their CPU seconds over wall seconds x CPUs (the "
             "share of the machine the arm got); load_1min: the machine's load average when the arm ended"))
    barrier = [(s, a, rs) for s, a, rs in g.cells() if Arm.parse(a).kind != "async"]
    if barrier:
        out.append(TableData(
            "throughput.barrier (batch-barrier arms: a batch's seconds, mean over batches)",
            ["sigma", "arm", "model_max_s", "env_max_s", "rollout_s", "pickup_s", "train_s", "publish_load_s",
             "barrier_s", "step_s"],
            [(s, a, cell([expected_max_s(cfg.batch_size, cfg.env(s), r.call_s) for r in rs.values()]),
              cell([r.phases.env_max_s for r in rs.values() if r.phases]),
              cell([r.phases.rollout_s for r in rs.values() if r.phases]),
              cell([r.phases.pickup_s for r in rs.values() if r.phases]),
              cell([r.phases.train_s for r in rs.values() if r.phases]),
              cell([r.phases.publish_load_s for r in rs.values() if r.phases]),
              cell([r.phases.barrier_s for r in rs.values() if r.phases]),
              cell([r.step_s for r in rs.values()])) for s, a, rs in barrier], keys=["sigma", "arm"],
            note="model_max_s: the model's E[max of B episodes] with the run's call_s; env_max_s: the tool time of "
                 "the batch's longest episode in the trace; rollout_s: batch start -> last episode done; pickup_s: -> "
                 "the trainer has the batch; train_s: its compute; publish_load_s: step recorded -> next batch "
                 "starts (sync)"))
    out.append(TableData("throughput.model (the fork-join model's episode, per sigma)",
                         ["sigma", "mean_episode_s", "max_of_B_episodes_s"],
                         [(s, episode_mean_s(cfg.env(s), 0.0), expected_max_s(cfg.batch_size, cfg.env(s), 0.0))
                          for s in g.sigmas], keys=["sigma"],
                         note="tool time alone (model calls add call_s per turn)"))
    return out


def claims(cfg: ThroughputConfig, results: Sequence[ArmResult]) -> list[dict[str, Any]]:
    """The issue's "done when" statements with their figures: the best asynchronous arm's speedup
    at sigma 1 against the target, with all W slots (asynchrony and concurrency together) and, where
    an ``async-N-cB`` arm ran, at the barrier arms' concurrency; whether the speedup grows with sigma
    and whether it levels off from staleness 2 (arms with all W slots); and whether the audit equals
    the trainer's metric in every run."""
    g = Grid(cfg, results)
    asyncs = [a for a in g.arms if Arm.parse(a).kind == "async"]
    out: list[dict[str, Any]] = []
    if 1.0 in g.sigmas and asyncs:
        full = [a for a in asyncs if Arm.parse(a).concurrency is None]
        if full:
            best = max(full, key=lambda a: med_range(g.speedup(1.0, a))[0])
            m = med_range(g.speedup(1.0, best))[0]
            out.append({"claim": f"async reaches N steps >= {SPEEDUP_TARGET}x faster than sync at sigma 1 "
                                 f"(async at W = {cfg.workers} in flight vs sync at B = {cfg.batch_size}: asynchrony "
                                 f"and concurrency together)",
                        "figures": f"{best}: {cell(g.speedup(1.0, best))} (predicted {cell(g.predicted(1.0, best))})",
                        "holds": m >= SPEEDUP_TARGET})
        equal = [a for a in asyncs if Arm.parse(a).concurrency == cfg.batch_size]
        if equal:
            best = max(equal, key=lambda a: med_range(g.speedup(1.0, a))[0])
            m = med_range(g.speedup(1.0, best))[0]
            out.append({"claim": f"at equal concurrency (B = {cfg.batch_size} episodes in flight in both), async "
                                 f"reaches N steps >= {SPEEDUP_TARGET}x faster than sync at sigma 1",
                        "figures": f"{best}: {cell(g.speedup(1.0, best))} (predicted {cell(g.predicted(1.0, best))})",
                        "holds": m >= SPEEDUP_TARGET})
    asyncs = [a for a in asyncs if Arm.parse(a).concurrency is None]  # the sigma and eta trends: all W slots
    for a in asyncs:
        meds = [med_range(g.speedup(s, a))[0] for s in g.sigmas]
        preds = [med_range(g.predicted(s, a))[0] for s in g.sigmas]
        if len(meds) >= 2:
            out.append({"claim": f"{a}: the speedup grows with sigma",
                        "figures": ", ".join(f"sigma {s:g}: {m:.2f} (predicted {p:.2f})"
                                             for s, m, p in zip(g.sigmas, meds, preds)),
                        "holds": all(x < y for x, y in zip(meds, meds[1:]))})
    if "async-2" in asyncs:
        for s in g.sigmas:
            base = med_range(g.speedup(s, "async-2"))[0]
            later = {a: med_range(g.speedup(s, a))[0] for a in asyncs if Arm.parse(a).max_staleness > 2}
            pred = {a: med_range(g.predicted(s, a))[0] for a in ["async-2", *later]}
            if later:
                out.append({"claim": f"sigma {s:g}: the speedup levels off by staleness 2 (within {LEVEL_OFF:.0%})",
                            "figures": f"async-2 {base:.2f}; " + ", ".join(f"{a} {m:.2f}" for a, m in later.items())
                            + " (predicted " + ", ".join(f"{a} {m:.2f}" for a, m in pred.items()) + ")",
                            "holds": all(abs(m - base) <= LEVEL_OFF * base for m in later.values())})
    out.append({"claim": "the store's staleness audit equals the trainer's metric in every run",
                "figures": f"{sum(r.check.equal for r in results)} of {len(results)} runs",
                "holds": all(r.check.equal for r in results)})
    return out


def _md_cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def markdown_table(t: TableData) -> list[str]:
    """`t` as a Markdown table with its title and note."""
    lines = [f"**{t.name}**", "", "| " + " | ".join(t.columns) + " |", "|" + "---|" * len(t.columns)]
    lines += ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in t.rows]
    if t.note:
        lines += ["", f"_{t.note}_"]
    return [*lines, ""]


def render_report(cfg: ThroughputConfig, summary: dict[str, Any], tabs: Sequence[TableData]) -> str:
    """``report.md``: what ran, on what machine, the claims and every table."""
    lines = [f"# traj bench throughput --preset {cfg.preset}", "",
             f"{len(cfg.sigmas)} sigmas x {len(cfg.seeds)} seeds x {len(cfg.arms)} arms; N = {cfg.steps} policy steps "
             f"of B = {cfg.batch_size} trajectories, W = {cfg.workers} rollout slots (sync and one-step run B "
             f"episodes at once, async-N all W, async-N-cC C); tool calls lognormal with "
             f"median {cfg.median_s:g} s, {cfg.mean_turns:g} mean turns (at most {cfg.max_turns}); model "
             f"{cfg.model}, {cfg.max_tokens} tokens per call. {summary['seconds'] / 60:.1f} min on "
             f"{summary['cpus']} CPUs, load average {summary['load_start']} at the start and {summary['load_end']} "
             f"at the end. Output: `{summary['out_dir']}`.", ""]
    if summary.get("failures"):
        lines += ["Failed runs:", ""] + [f"- {f['run']}: {f['error']}" for f in summary["failures"]] + [""]
    lines += ["| claim | figures | holds |", "|---|---|---|"]
    lines += [f"| {c['claim']} | {c['figures']} | {'yes' if c['holds'] else '**no**'} |" for c in summary["claims"]]
    lines.append("")
    for t in tabs:
        lines += markdown_table(t)
    return "\n".join(lines)

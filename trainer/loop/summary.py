"""What a finished run reports: :class:`TrainSummary` (counters and per-iteration metrics) and
the warnings about things the user should know although the run succeeded."""

from __future__ import annotations

from dataclasses import dataclass, field

from trajstore.trainer.loop.resume import resume_fresh_message
from trajstore.trainer.loop.trainer import Trainer
from trajstore.wording import plural


@dataclass
class TrainSummary:
    """What a run did: iterations and policy steps done (in total, resumes included), the final
    version, and the metrics of every iteration of this process (rank 0)."""

    iterations: int
    steps: int
    version: int
    history: list[dict[str, float]]
    warnings: list[str] = field(default_factory=list)
    """Things the user should know although the run succeeded (e.g. nothing new was trained)."""
    is_main: bool = True
    """Whether this process reports the run: the only one, or rank 0 under torchrun (the others
    print nothing, so ``--format json`` gives one document)."""


def run_warnings(tr: Trainer, *, resume: bool) -> list[str]:
    """The end-of-run warnings, from the trainer's state and the metrics of this process's
    iterations: a stop by signal, a critic that did not explain the returns, fewer policy steps
    than asked, trajectories skipped as too long, a ``--resume`` that started fresh, nothing
    trained."""
    state = tr.state
    out: list[str] = []
    if tr.stop.signal_name is not None:
        out.append(f"stopped by {tr.stop.signal_name} after iteration {state.iteration}: checkpointed and "
                   f"published v{tr.published}; --resume continues")
    policy_steps = [h for h in tr.history if "policy/loss" in h and "warn/critic_ev_not_positive" in h]
    bad = [h for h in policy_steps if h["warn/critic_ev_not_positive"]]
    if bad:
        first = policy_steps[0]["value/explained_variance"]
        out.append(f"the critic's explained variance was not above 0 on {len(bad)} of {len(policy_steps)} policy "
                   f"steps (first policy step: {first:.3g}); its values added noise to those advantages "
                   "(a longer warm-up, --critic-warmup-steps, or a larger --critic-lr helps)")
    asked = tr.cfg.run.max_steps
    if asked is not None and state.step < asked and tr.history and tr.stop.signal_name is None:
        warmup = sum(1 for h in tr.history if "policy/loss" not in h)
        out.append(f"made {state.step} of the {asked} policy steps asked for (--max-steps): the data ran out "
                   f"after {plural(len(tr.history), 'iteration')} in this run, {warmup} of them critic warm-up "
                   "(--critic-warmup-steps)")
    overlong = int(sum(h.get("data/skipped_overlong", 0.0) for h in tr.history))
    if overlong:
        out.append(f"{overlong} trajector{'y' if overlong == 1 else 'ies'} longer than --max-seq-len "
                   f"{tr.cfg.data.max_seq_len} tokens {'was' if overlong == 1 else 'were'} skipped, not trained "
                   "(raise --max-seq-len to train them; --overlong error stops at the first)")
    if resume and tr.resumed_fresh:
        out.append(resume_fresh_message(tr.store, tr.cfg.run.run_id))
    if not tr.history:
        what = tr.census.describe() if tr.census is not None else "no rows"
        out.append(f"no trajectory was trained in this run ({'since the checkpoint: ' if resume else ''}{what})")
    return out

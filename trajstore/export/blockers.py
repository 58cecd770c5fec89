"""Everything that would stop an export, found in one pass before anything is written: the
trajectories the target cannot take as they are (per reason), the secrets ``traj redact --dry-run``
finds in what would be exported, and the store's unreadable shards; each with its count and the
options that lift it (``traj export --dry-run`` lists them; an export with any is refused, naming
all of them at once instead of the first).

The pass reads only the columns a refusal is decided on (spans, reward, trainability, log-prob
counts), never the token ids. The secret scan covers only the trajectories that would be exported:
not those a trainer layout leaves out as not trainable, nor those left out by ``--skip-refused``,
nor those no option but ``--skip-refused`` could let in (no action span); it does cover those that
``--without FIELD`` would let in, so that an export run with the listed options succeeds. A shard
whose footer cannot be read is a blocker of its own (lifted by ``--skip-unreadable``, which leaves
its rows out), never counted as trajectories the scan could not read.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from trajstore.errors import CorruptShardError
from trajstore.export.refusals import (
    ALLOW_SECRETS_OPTION,
    LIFTED_BY_WITHOUT,
    SKIP_OPTION,
    SKIP_UNREADABLE_OPTION,
    WITHOUT_OPTION,
    ExportError,
    refusals,
    secrets_refusal,
)
from trajstore.export.target import Target
from trajstore.reader import read_trajectories_by_id
from trajstore.redact import find_secrets
from trajstore.store import Store
from trajstore.store.shards import CorruptShardWarning

SURVEY_COLUMNS: Final[tuple[str, ...]] = (
    "spans", "reward", "trainable", "not_trainable_reason", "num_missing_logprobs", "num_action_tokens")
"""The stored columns a refusal is decided on."""

SURVEY_ROWS: Final[int] = 4096
"""Trajectories read per step of the pass (only :data:`SURVEY_COLUMNS`)."""


def unreadable_refusal(store: Store, bad: list[CorruptShardError]) -> str:
    """One line: the unreadable shards, why, and the ways out."""
    names = "; ".join(f"{e.path} ({e.reason})" for e in bad)
    return (f"cannot export: {len(bad)} shard(s) of {store.uri} cannot be read, their trajectories would be missing "
            f"from the export: {names}. See them with `traj validate {store.uri}` and fix or remove them, or pass "
            f"{SKIP_UNREADABLE_OPTION} to export without them (listed in the manifest and the card); nothing was "
            "written")


@dataclass(frozen=True)
class RowFacts:
    """The counts a refusal is decided on (:class:`~trajstore.export.refusals.Refusable`), read
    from a stored row without cutting it: every action token lies before the end of the last action
    span, so the row's ``num_missing_logprobs`` and ``num_action_tokens`` are the sample's."""

    num_missing_logprobs: int
    num_action_tokens: int
    reward: float | None
    unknown_version_calls: int
    num_calls: int

    @classmethod
    def of(cls, row: dict[str, Any]) -> RowFacts | None:
        """The facts of a row (:data:`SURVEY_COLUMNS`); None when it has no action span."""
        acts = [s for s in row["spans"] if s["kind"] == "action"]
        if not acts:
            return None
        r = row.get("reward")
        return cls(num_missing_logprobs=int(row["num_missing_logprobs"]), num_action_tokens=int(row["num_action_tokens"]),
                   reward=None if r is None or (isinstance(r, float) and math.isnan(r)) else float(r),
                   unknown_version_calls=sum(s["policy_version"] is None for s in acts), num_calls=len(acts))


@dataclass(frozen=True)
class Blocker:
    """One reason the export cannot be written as asked.

    Attributes:
        kind: ``missing logprobs``, ``no reward``, ``unknown policy version``, ``no action token``,
            ``secrets`` or ``unreadable shards``.
        count: the trajectories it concerns (shards, for ``unreadable shards``).
        options: the options that lift it (any one of them).
        detail: one line: the first case, or the scan's summary.
    """

    kind: str
    count: int
    options: tuple[str, ...]
    detail: str

    def line(self) -> str:
        what = ("shard" if self.kind == "unreadable shards" else "trajector") + (
            "" if self.kind == "unreadable shards" and self.count == 1 else "s" if self.kind == "unreadable shards"
            else "y" if self.count == 1 else "ies")
        return f"{self.kind}: {self.count} {what} (lifted by {' or '.join(self.options)}); e.g. {self.detail}"


@dataclass
class Survey:
    """What an export would do: its blockers, and what it would write and leave out.

    Attributes:
        blockers: every blocker, refusals first (by count), then secrets, then unreadable shards.
        would_export: trajectories that would be written once nothing blocks (with the options as given).
        not_trainable_left_out: per stored reason, trajectories a trainer layout would leave out.
        skipped: per refusal reason, trajectories ``--skip-refused`` would leave out.
    """

    blockers: list[Blocker] = field(default_factory=list)
    would_export: int = 0
    not_trainable_left_out: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)

    def refused(self, target: str) -> ExportError:
        """The error an export with these blockers raises: the only one's own line, else all of them."""
        if len(self.blockers) == 1 and self.blockers[0].count == 1 or len(self.blockers) == 1 and (
                self.blockers[0].kind in ("secrets", "unreadable shards")):
            return ExportError(self.blockers[0].detail)
        return ExportError(f"cannot export to {target}: {len(self.blockers)} blocker(s), all listed (traj export "
                           f"--dry-run shows them); nothing was written: "
                           + "; ".join(f"({n}) {b.line()}" for n, b in enumerate(self.blockers, 1)))


def survey_export(store: Store, ids: list[str], target: Target, holds: frozenset[str], *, skip_refused: bool,
                  include_not_trainable: bool, allow_secrets: bool, unreadable: list[CorruptShardError],
                  skip_unreadable: bool, on_rows: Callable[[int, int], None] | None = None) -> Survey:
    """Every blocker of exporting the trajectories `ids` of `store` to `target` holding `holds`
    (see the module docstring), with the options as given.

    Args:
        unreadable: the store's shards that cannot be read (:func:`~trajstore.export.run.unreadable_shards`).
        on_rows: called with (trajectories surveyed, of how many) after each step.
    """
    out = Survey()
    first: dict[str, str] = {}
    count: Counter[str] = Counter()
    to_scan: list[str] = []
    leave_not_trainable = target.trainer_layout and not include_not_trainable
    for start in range(0, len(ids), SURVEY_ROWS):
        with warnings.catch_warnings():  # unreadable shards are a blocker of their own
            warnings.simplefilter("ignore", CorruptShardWarning)
            table = read_trajectories_by_id(store, ids[start:start + SURVEY_ROWS], columns=SURVEY_COLUMNS)
        for row in table.to_pylist():
            if leave_not_trainable and not row["trainable"]:
                out.not_trainable_left_out[row["not_trainable_reason"] or "not trainable"] += 1
                continue
            found = refusals(row["trajectory_id"], RowFacts.of(row), target=target.name, holds=holds,
                             field_names=dict(target.fields)) if target.uses_samples else []
            if found and skip_refused:
                out.skipped[found[0].reason] += 1
                continue
            for r in found:
                count[r.reason] += 1
                first.setdefault(r.reason, r.message)
            if not found:
                out.would_export += 1
            if all(LIFTED_BY_WITHOUT.get(r.reason, target.required) not in target.required for r in found):
                to_scan.append(row["trajectory_id"])
        if on_rows is not None:
            on_rows(min(start + SURVEY_ROWS, len(ids)), len(ids))
    for reason, n in count.most_common():
        f = LIFTED_BY_WITHOUT.get(reason)
        lift = (WITHOUT_OPTION[f],) if f is not None and f not in target.required else ()  # AReaL needs its fields
        out.blockers.append(Blocker(reason, n, (*lift, SKIP_OPTION), first[reason]))
    if not allow_secrets and to_scan:
        scan = find_secrets(store, trajectory_ids=to_scan)
        # an unreadable shard is a blocker of its own (below); with skip_unreadable its rows are out of the
        # export: either way they are never "exported unscanned", and --allow-secrets never the way out
        left_out = {e.path for e in unreadable}
        scan.unscanned = [u for u in scan.unscanned if u.trajectory_id is not None or u.shard not in left_out]
        why = secrets_refusal(scan, store=store.uri, selected=len(to_scan))
        if why is not None:
            hit = {f.trajectory_id for f in scan.findings} | {u.trajectory_id or u.shard for u in scan.unscanned}
            out.blockers.append(Blocker("secrets", len(hit), (ALLOW_SECRETS_OPTION,), why))
    if unreadable and not skip_unreadable:
        out.blockers.append(Blocker("unreadable shards", len(unreadable), (SKIP_UNREADABLE_OPTION,),
                                    unreadable_refusal(store, unreadable)))
    return out

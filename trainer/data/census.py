"""What a pre-flight pass over the store found before a run writes anything: rows looked at,
rows that would train, rows that would be skipped (by reason), and the largest token id."""

from __future__ import annotations

from dataclasses import dataclass, field

from trajstore.store import ShardInfo
from trajstore.trainer.data.admission import SKIP_REASONS


@dataclass
class StoreCensus:
    """What :meth:`TrajectoryStream.precheck` found in the rows not yet read.

    Attributes:
        rows: rows looked at (from the cursor on).
        trainable: rows that would be trained now (first copies, passing every filter).
        skipped: rows that would be skipped, by reason (the keys of
            :data:`~trajstore.trainer.data.admission.SKIP_REASONS`).
        max_token_id: largest token id of the trainable rows' shards (None when none, or before
            :meth:`TrajectoryStream.check_vocabulary`).
        candidates: (shard, row indices) of the trainable rows, for the vocabulary check.
    """

    rows: int = 0
    trainable: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    max_token_id: int | None = None
    candidates: list[tuple[ShardInfo, list[int]]] = field(default_factory=list, repr=False)

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def describe(self) -> str:
        """One phrase, e.g. ``12 rows: 0 trainable (12 filtered by --where)``."""
        why = ", ".join(f"{k} {SKIP_REASONS.get(r, r)}" for r, k in sorted(self.skipped.items()))
        return f"{self.rows} rows: {self.trainable} trainable" + (f" ({why})" if why else "")

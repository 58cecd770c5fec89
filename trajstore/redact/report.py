"""What a scan or a redaction found and did: one :class:`Finding` per secret, the trajectories that
could not be scanned, and the per-store totals."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

Where = Literal["span", "metadata", "reward_raw"]


@dataclass(frozen=True)
class Finding:
    """One secret in one trajectory.

    Attributes:
        trajectory_id: the trajectory.
        kind: the secret's kind (``aws_access_key``, ``email``, a ``--pattern`` name, ...).
        where: ``span`` (token text), ``metadata`` or ``reward_raw``.
        span: index of the span in the trajectory's spans (``where == "span"``), else None.
        span_kind: that span's kind (prompt, action, observation), else None.
        path: JSON pointer of the string holding it in ``metadata`` / ``reward_raw`` (``""`` = the
            whole value), else None.
        chars: ``[start, end)`` character range of the secret in the span's decoded text, or in
            the JSON string at `path`.
        tokens: ``[start, end)`` token indices (into the trajectory's tokens, before any rewrite)
            of the tokens covering it (span findings only).
        new_tokens: after a rewrite: the marker's token indices in the rewritten trajectory.
        excerpt: the secret in its context with every secret masked (never the secret itself);
            empty in the record stored in the trajectory's metadata.
        shard, row: where the row lies in the store (store scans only).
    """

    trajectory_id: str
    kind: str
    where: Where
    span: int | None
    span_kind: str | None
    path: str | None
    chars: tuple[int, int]
    tokens: tuple[int, int] | None = None
    new_tokens: tuple[int, int] | None = None
    excerpt: str = ""
    shard: str | None = None
    row: int | None = None

    @property
    def location(self) -> str:
        """``span 3 (observation)``, ``metadata /env/KEY`` or ``reward_raw``."""
        if self.where == "span":
            return f"span {self.span} ({self.span_kind})"
        return f"{self.where} {self.path}" if self.path else self.where

    def record(self) -> dict[str, Any]:
        """The change as stored in the trajectory's ``metadata.redaction.changes`` (no excerpt)."""
        out: dict[str, Any] = {"kind": self.kind, "where": self.where}
        if self.where == "span":
            out.update(span=self.span, span_kind=self.span_kind)
        else:
            out["path"] = self.path
        out["chars"] = list(self.chars)
        if self.tokens is not None:
            out["tokens"] = list(self.tokens)
        if self.new_tokens is not None:
            out["new_tokens"] = list(self.new_tokens)
        return out


@dataclass(frozen=True)
class Unscanned:
    """A trajectory (or a whole shard) whose token spans could not be scanned.

    Attributes:
        trajectory_id: the trajectory, None for a shard that could not be read.
        reason: why (no tokenizer recorded, tokenizer not loadable, unreadable shard).
        shard, row: where it lies in the store.
    """

    trajectory_id: str | None
    reason: str
    shard: str | None = None
    row: int | None = None


@dataclass
class ScanReport:
    """What :func:`~trajstore.redact.find_secrets` found in a store.

    Attributes:
        store: the store's URI.
        shards: trajectory shards read.
        trajectories: rows scanned (every copy of a duplicated id included).
        findings: every secret, in store order.
        unscanned: rows whose spans were not scanned (their metadata and raw reward were).
    """

    store: str
    shards: int = 0
    trajectories: int = 0
    findings: list[Finding] = field(default_factory=list)
    unscanned: list[Unscanned] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """No finding and nothing left unscanned: ``traj redact --dry-run`` exits 0."""
        return not self.findings and not self.unscanned

    def by_kind(self) -> dict[str, int]:
        """Findings per kind, most frequent first."""
        return dict(Counter(f.kind for f in self.findings).most_common())


@dataclass
class RedactionResult:
    """What :func:`~trajstore.redact.redact_store` did.

    Attributes:
        store: the store's URI.
        shards: trajectory shards read.
        trajectories: rows scanned.
        shards_rewritten: URLs of the shards rewritten (each atomically, under its own name).
        trajectories_redacted: rows changed.
        made_not_trainable: rows that were trainable and no longer are (an action held a secret,
            or, without ``keep_trainable``, an action's context changed).
        changes: every secret replaced (with its old and new token ranges), in store order.
        unscanned: rows whose spans were not scanned (their metadata and raw reward were scrubbed).
        fork_points_fixed: children whose ``fork_point`` was recomputed because the prefix they
            share with their parent changed (:mod:`trajstore.redact.lineage`).
    """

    store: str
    shards: int = 0
    trajectories: int = 0
    shards_rewritten: list[str] = field(default_factory=list)
    trajectories_redacted: int = 0
    made_not_trainable: int = 0
    changes: list[Finding] = field(default_factory=list)
    unscanned: list[Unscanned] = field(default_factory=list)
    fork_points_fixed: int = 0

    def by_kind(self) -> dict[str, int]:
        """Changes per kind, most frequent first."""
        return dict(Counter(f.kind for f in self.changes).most_common())

"""What an ingest did (:class:`IngestReport`: counts, skips, problems; what ``traj ingest``
prints) and where a running one stands (:class:`IngestProgress`, for the progress callback).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from trajstore.ingest.records import Problem

ENGINE_IDS_DISCARDED = "engine_ids_discarded"
"""The one name of a discard of engine token ids (a log's ids not used: placeholder or partial
ids, TokenEvents that do not line up, ids that do not chain within a lineage): the fidelity flag
of each trajectory stored re-tokenized instead (so ``traj stats --coverage`` lists it) and the
ingest summary's count of them (:attr:`IngestReport.engine_ids_discarded`)."""
ENGINE_IDS_DISCARDED_KEY = "engine_token_ids_discarded"
"""Metadata key every parser writes the reason of such a discard under (one line)."""
NO_MODEL_CALL = "no_model_call"
"""The fidelity flag of a log whose actions no model is known to have produced (an ATIF file that
reports 0 prompt and 0 completion tokens and no model metrics: a deterministic orchestrator's
log): stored with ``trainable = false`` (the builder's rule, whatever the format)."""

REFUSING_KINDS = frozenset({"malformed", "invalid", "unsupported"})
"""Problem kinds that mean input was refused (``traj ingest`` exits 1); ``no_trajectory`` is a skip."""


@dataclass
class IngestReport:
    """What an ingest did.

    Attributes:
        files_seen: input files read (each event file of an event store counts).
        trajectories_parsed: trajectories built from the input.
        trajectories_written: new rows written to the store.
        skipped: trajectories not written, by reason (``already_in_store``,
            ``duplicate_in_input``, ``superseded_completion_log``, ``invalid``).
        problems: input that yielded nothing (malformed / no_trajectory / invalid / unsupported).
        ignored_files: files a directory walk did not read, by suffix (``.md``, ``.png``, ...).
        by_format: trajectories parsed per input format.
        degraded_events: events of unknown kind rendered generically or skipped.
        truncated_observations: observations capped at ``max_observation_chars``.
        fidelity_gaps: trajectories per fidelity flag (metadata ``fidelity_gaps``: what the
            stored trajectory cannot reproduce of what the model was sent or generated).
        engine_ids_discarded: trajectories stored re-tokenized although the log held engine
            token ids for them (placeholder or partial ids, TokenEvents that do not line up, ids
            that do not chain within the lineage): fidelity flag :data:`ENGINE_IDS_DISCARDED`,
            metadata :data:`ENGINE_IDS_DISCARDED_KEY` says why.
        written_ids: ids of the rows written, in order.
    """

    files_seen: int = 0
    trajectories_parsed: int = 0
    trajectories_written: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    problems: list[Problem] = field(default_factory=list)
    ignored_files: Counter[str] = field(default_factory=Counter)
    by_format: Counter[str] = field(default_factory=Counter)
    degraded_events: int = 0
    truncated_observations: int = 0
    fidelity_gaps: Counter[str] = field(default_factory=Counter)
    engine_ids_discarded: int = 0
    written_ids: list[str] = field(default_factory=list)

    @property
    def refused(self) -> int:
        """Problems that refused input (malformed, invalid, unsupported). ``no_trajectory`` ones
        (score-only files, evaluator crash rows, metadata files) are deliberately skipped."""
        return sum(p.kind in REFUSING_KINDS for p in self.problems)

    @property
    def refused_by_kind(self) -> Counter[str]:
        """Refused input (:attr:`refused`) by problem kind (``malformed``, ``invalid``, ``unsupported``)."""
        return Counter(p.kind for p in self.problems if p.kind in REFUSING_KINDS)

    @property
    def skipped_inputs(self) -> int:
        """Input (files, rows) deliberately skipped because it holds no trajectory
        (``no_trajectory`` problems: score-only files, evaluator crash rows, metadata files)."""
        return sum(p.kind not in REFUSING_KINDS for p in self.problems)

    def to_dict(self) -> dict[str, Any]:
        return {"files_seen": self.files_seen, "trajectories_parsed": self.trajectories_parsed,
                "trajectories_written": self.trajectories_written, "refused": self.refused,
                "skipped": dict(self.skipped), "ignored_files": dict(self.ignored_files),
                "problems": [p.to_dict() for p in self.problems],
                "problems_by_kind": dict(Counter(p.kind for p in self.problems)),
                "refused_by_kind": dict(self.refused_by_kind), "skipped_inputs": self.skipped_inputs,
                "by_format": dict(self.by_format), "degraded_events": self.degraded_events,
                "truncated_observations": self.truncated_observations,
                "fidelity_gaps": dict(self.fidelity_gaps), "engine_ids_discarded": self.engine_ids_discarded}


SUMMARY_DOCS = "docs/ingest.md#the-ingest-summary"
"""The page (and anchor) that explains every line of the ingest summary."""

SKIP_MEANINGS: dict[str, str] = {
    "already_in_store": "a trajectory with that id is already stored (ingesting the same logs again adds nothing)",
    "duplicate_in_input": "the input holds the same trajectory twice: the first copy is stored",
    "superseded_completion_log": "an OpenHands V1 completion log whose whole conversation a later completion log of "
                                 "the same directory repeats: that later log's trajectory holds its calls, nothing "
                                 "is lost",
    "invalid": "the trajectory built from the log breaks a schema rule (listed on stderr as refused)",
    "no_trajectory": "a file holding no trajectory (a score, conversation state, metadata), read with the file "
                     "it belongs to or named on stderr",
}
"""One line per skip reason of the ingest summary: why it is not stored and whether it matters."""

NOT_FAITHFUL_MEANING = (
    "trajectories stored with an approximation of what the model was sent or generated, per part (e.g. tools: "
    "the log has no tool definitions; system_prompt: it has no system prompt); they are stored and train, the "
    "reason is in metadata fidelity_gaps, and traj stats --coverage (coverage.fidelity) counts them")
"""What the summary's ``not faithful: FLAG`` lines mean."""


def summary_notes(report: IngestReport) -> list[str]:
    """What the kinds of lines of `report`'s human summary mean, one line each (only for the kinds
    it shows), ending with the page that explains them all (:data:`SUMMARY_DOCS`)."""
    notes = [f"note: skipped: {reason}: {SKIP_MEANINGS[reason]}" for reason in sorted(report.skipped)
             if report.skipped[reason] and reason in SKIP_MEANINGS]
    if report.skipped_inputs and "no_trajectory" not in report.skipped:
        notes.append(f"note: skipped: no_trajectory: {SKIP_MEANINGS['no_trajectory']}")
    if any(flag != ENGINE_IDS_DISCARDED for flag in report.fidelity_gaps):
        notes.append(f"note: not faithful: {NOT_FAITHFUL_MEANING}")
    return [*notes, f"note: every line of this summary is explained in {SUMMARY_DOCS}"] if notes else []


@dataclass(frozen=True)
class IngestProgress:
    """Where an ingest stands, passed to the ``progress`` callback after every input unit and
    every trajectory built.

    Attributes:
        files_done / files_total: input units read (a file, or an event-store directory).
        records: trajectories built so far.
        problems: problems found so far (refused and skipped input).
        tokens: tokens in the trajectories built so far.
        refused: of `problems`, those that refused input (see :attr:`IngestReport.refused`).
    """

    files_done: int
    files_total: int
    records: int
    problems: int
    tokens: int
    refused: int = 0

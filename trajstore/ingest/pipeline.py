"""`ingest_paths`: agent logs on disk -> trajectories in a store.

Reads every input unit, detects (or is told) its format, parses it into conversations or
engine rollouts, tokenizes conversations with a chat template, derives deterministic ids,
skips ids already stored and writes the rest through :class:`~trajstore.writer.StoreWriter`.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from trajstore.errors import TrajectoryValidationError, TrajstoreError
from trajstore.hub import SMOLLM2_ALIAS, load_tokenizer, resolve_model
from trajstore.ingest import detect, nemo_gym, openhands_v0, openhands_v1, swe_agent
from trajstore.ingest.core import (
    DEFAULT_MAX_OBSERVATION_CHARS,
    Conversation,
    EngineRollout,
    Origin,
    Parsed,
    Problem,
    RecordError,
)
from trajstore.ingest.render import conversation_to_trajectories, rollout_to_trajectories
from trajstore.models import Trajectory
from trajstore.reader import read_trajectories
from trajstore.store import Store, open_store
from trajstore.writer import StoreWriter

ROW_PARSERS: dict[str, Callable[[Any, Origin], Parsed]] = {
    "openhands-v0-eval": openhands_v0.parse_eval_output,
    "openhands-v0-resolver": openhands_v0.parse_resolver_output,
    "openhands-v0-feedback": openhands_v0.parse_feedback_row,
    "openhands-swe-gym": openhands_v0.parse_swe_gym_row,
    "openhands-v1-eval": openhands_v1.parse_eval_output,
    "openhands-v1-completions": openhands_v1.parse_completion_log,
    "swe-agent": swe_agent.parse_traj,
    "nebius-swe-agent": swe_agent.parse_nebius_row,
    "nemo-gym": nemo_gym.parse_rollout,
}
"""Formats whose records (a document, an array item or a JSONL line) are one trajectory each."""


class IngestError(TrajstoreError):
    """``strict`` ingest found problems; nothing was written. `report` lists them all."""

    def __init__(self, report: IngestReport):
        self.report = report
        shown = "\n".join(f"  - {p}" for p in report.problems[:10])
        more = f"\n  ... and {len(report.problems) - 10} more" if len(report.problems) > 10 else ""
        super().__init__(f"strict ingest: {len(report.problems)} problem(s), nothing written:\n{shown}{more}")


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
        by_format: trajectories parsed per input format.
        degraded_events: events of unknown kind rendered generically or skipped.
        truncated_observations: observations capped at ``max_observation_chars``.
        fidelity_gaps: trajectories per fidelity flag (metadata ``fidelity_gaps``: what the
            stored trajectory cannot reproduce of what the model was sent or generated).
        engine_ids_discarded: records whose engine token ids were not used (placeholder or
            partial ids, TokenEvents that do not line up): re-tokenized instead, metadata
            ``engine_token_ids_discarded`` says why.
        written_ids: ids of the rows written, in order.
    """

    files_seen: int = 0
    trajectories_parsed: int = 0
    trajectories_written: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    problems: list[Problem] = field(default_factory=list)
    by_format: Counter[str] = field(default_factory=Counter)
    degraded_events: int = 0
    truncated_observations: int = 0
    fidelity_gaps: Counter[str] = field(default_factory=Counter)
    engine_ids_discarded: int = 0
    written_ids: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"files_seen": self.files_seen, "trajectories_parsed": self.trajectories_parsed,
                "trajectories_written": self.trajectories_written, "skipped": dict(self.skipped),
                "problems": [p.to_dict() for p in self.problems],
                "problems_by_kind": dict(Counter(p.kind for p in self.problems)),
                "by_format": dict(self.by_format), "degraded_events": self.degraded_events,
                "truncated_observations": self.truncated_observations,
                "fidelity_gaps": dict(self.fidelity_gaps), "engine_ids_discarded": self.engine_ids_discarded}


# -- parsing -----------------------------------------------------------------------------------

def _parse_records(fmt: str, items: list[tuple[Origin, Any]]) -> Iterator[Parsed]:
    parser = ROW_PARSERS[fmt]
    for origin, rec in items:
        try:
            yield parser(rec, origin)
        except RecordError as e:
            yield Problem(origin, "malformed", str(e))


def parse_unit(unit: detect.InputUnit, fmt: str = "auto") -> Iterator[Parsed]:
    """Parse one input unit into conversations, engine rollouts and problems (never raises
    for bad input)."""
    if unit.is_event_dir:
        yield from _parse_event_dir(unit, fmt)
        return
    path = unit.path
    try:
        loaded = detect.load_json_or_jsonl(path)
    except (ValueError, OSError) as e:
        yield Problem(Origin(path), "malformed", str(e))
        return
    yield from loaded.problems
    if loaded.lines is not None:  # JSONL: rows, or the events of one conversation
        values = [v for _, v in loaded.lines]
        kind = fmt if fmt != "auto" else (detect.detect_record(values[0]) or detect.detect_event(values[0]))
        if kind in ("openhands-v1-events", "openhands-v0-events"):
            try:
                yield (openhands_v1.parse_persisted_events(values, Origin(path)) if kind == "openhands-v1-events"
                       else openhands_v0.parse_event_list(values, Origin(path)))
            except RecordError as e:
                yield Problem(Origin(path), "malformed", str(e))
            return
        if kind not in ROW_PARSERS:
            yield Problem(Origin(path, loaded.lines[0][0]), "unsupported", "unrecognised record shape "
                          f"(keys: {_keys(values[0])}); name the format with --format")
            return
        yield from _parse_records(kind, [(Origin(path, n), v) for n, v in loaded.lines])
        return
    doc = loaded.whole
    why_not = detect.not_a_trajectory(doc)
    if why_not and fmt == "auto":
        if os.path.basename(path).startswith("eval_"):
            task = openhands_v1.task_of(path, "eval_")
            traj = os.path.join(os.path.dirname(path), f"traj_{task}.json")
            if not os.path.exists(traj):
                why_not += f"; no traj_{task}.json next to it"
        yield Problem(Origin(path), "no_trajectory", why_not)
        return
    kind = fmt if fmt != "auto" else detect.detect_document(doc)
    if kind is None:
        yield Problem(Origin(path), "unsupported", f"unrecognised content (keys: {_keys(doc)}); "
                      "name the format with --format")
        return
    if kind in ROW_PARSERS:
        items = ([(Origin(path, i + 1), r) for i, r in enumerate(doc)] if isinstance(doc, list)
                 else [(Origin(path), doc)])
        yield from _parse_records(kind, items)
        return
    try:
        if kind == "openhands-v1-events":
            name = os.path.basename(path)
            if name.startswith("traj_"):
                task = openhands_v1.task_of(path, "traj_")
                ev_path = os.path.join(os.path.dirname(path), f"eval_{task}.json")
                ev = None
                if os.path.exists(ev_path):
                    try:
                        ev = detect.json_loads(detect.read_text(ev_path))
                    except ValueError as e:
                        yield Problem(Origin(ev_path), "malformed", f"eval file is not valid JSON: {e}")
                yield openhands_v1.parse_task_trajectory(doc, Origin(path), ev, ev_path if ev is not None else None)
            else:
                yield openhands_v1.parse_persisted_events(doc, Origin(path))
        elif kind == "openhands-v0-events":
            yield openhands_v0.parse_event_list(doc, Origin(path))
        elif kind == "chat-messages":
            yield openhands_v1.parse_chat_messages(doc, Origin(path))
        else:
            yield Problem(Origin(path), "unsupported", f"format {kind!r} does not apply to a single file")
    except RecordError as e:
        yield Problem(Origin(path), "malformed", str(e))


def _keys(v: Any) -> str:
    if isinstance(v, dict):
        return ", ".join(list(v)[:8])
    return f"a JSON {type(v).__name__}"


def _parse_event_dir(unit: detect.InputUnit, fmt: str) -> Iterator[Parsed]:
    events: list[Any] = []
    for f in unit.files:
        try:
            events.append(detect.json_loads(detect.read_text(f)))
        except (ValueError, OSError) as e:
            yield Problem(Origin(f), "malformed", f"event file is not valid JSON: {e}")
    if not events:
        return
    session_dir = os.path.dirname(unit.path)
    meta: dict[str, Any] = {}
    meta_path = os.path.join(session_dir, "metadata.json")
    if os.path.exists(meta_path):
        try:
            meta = detect.json_loads(detect.read_text(meta_path))
        except ValueError as e:
            yield Problem(Origin(meta_path), "malformed", f"session metadata is not valid JSON: {e}")
    state: Any = None
    state_path = os.path.join(session_dir, "base_state.json")
    if os.path.exists(state_path):  # OpenHands V1 conversation folder
        try:
            state = detect.json_loads(detect.read_text(state_path))
        except ValueError as e:
            yield Problem(Origin(state_path), "malformed", f"conversation state is not valid JSON: {e}")
    key = str(meta.get("conversation_id") or os.path.basename(session_dir))
    kind = fmt if fmt != "auto" else detect.detect_event(next((e for e in events if isinstance(e, dict)), None))
    try:
        if kind == "openhands-v1-events":
            conv = openhands_v1.events_conversation(events, Origin(unit.path), source="openhands/v1-events", key=key)
        else:
            conv = openhands_v0.events_to_conversation(events, source="openhands/v0-session", key=key,
                                                       origin=Origin(unit.path))
    except RecordError as e:
        yield Problem(Origin(unit.path), "malformed", str(e))
        return
    if state is not None:
        openhands_v1.apply_base_state(conv, state)
    conv.model = meta.get("llm_model") or conv.model
    conv.metadata.update({k: meta[k] for k in ("conversation_id", "title", "trigger", "selected_repository")
                          if k in meta})
    yield conv


# -- building trajectories -----------------------------------------------------------------------

def iter_trajectories(paths: list[str], *, format: str = "auto", tokenizer: str = SMOLLM2_ALIAS,
                      max_observation_chars: int | None = DEFAULT_MAX_OBSERVATION_CHARS,
                      engine_tokenizer: str | None = None,
                      report: IngestReport | None = None,
                      progress: Callable[[int, int], None] | None = None) -> Iterator[Trajectory]:
    """Parse and tokenize everything under `paths`, yielding trajectories (problems go to `report`).

    Args:
        paths: files and directories (searched recursively for ``.json``, ``.jsonl``, ``.traj``).
        format: ``auto`` or one of :data:`~trajstore.ingest.detect.FORMATS` for every input.
        tokenizer: name for :func:`trajstore.hub.load_tokenizer` (loaded on first text-only input).
        max_observation_chars: cap per observation (characters); None = no cap.
        engine_tokenizer: the tokenizer engine token ids belong to when the log does not name
            it (``"model"`` = each rollout's model name); None = such rollouts are stored as
            not trainable (see :func:`~trajstore.ingest.render.rollout_to_trajectories`).
        progress: called as ``progress(units_done, units_total)``.
    """
    if format != "auto" and format not in detect.FORMATS:
        raise ValueError(f"unknown input format {format!r}; choose auto or one of {', '.join(detect.FORMATS)}")
    report = report if report is not None else IngestReport()
    units, problems = detect.discover(paths)
    report.problems.extend(problems)
    tok = None
    tok_name = resolve_model(tokenizer).name
    completion_logs: list[Conversation] = []

    def build(item: Conversation | EngineRollout) -> list[Trajectory]:
        nonlocal tok
        try:
            if isinstance(item, EngineRollout):
                ts = rollout_to_trajectories(item, input_format=item.source, engine_tokenizer=engine_tokenizer)
            else:
                if tok is None:
                    tok = load_tokenizer(tokenizer)
                ts = conversation_to_trajectories(item, tok, tokenizer_name=tok_name, input_format=item.source,
                                                  max_observation_chars=max_observation_chars)
                report.truncated_observations += len(ts[0].metadata.get("truncated_observations", []))
                report.degraded_events += item.degraded_events
                report.engine_ids_discarded += "engine_token_ids_discarded" in item.metadata
        except (ValueError, TrajectoryValidationError) as e:
            report.problems.append(Problem(item.origin, "invalid", str(e)))
            return []
        report.trajectories_parsed += len(ts)
        report.by_format[item.source] += len(ts)
        for t in ts:
            report.fidelity_gaps.update(list(t.metadata.get("fidelity_gaps") or {}))
        return ts

    for n, unit in enumerate(units):
        report.files_seen += len(unit.files) if unit.is_event_dir else 1
        for item in parse_unit(unit, format):
            if isinstance(item, Problem):
                report.problems.append(item)
            elif isinstance(item, Conversation) and item.source == "openhands/v1-completions":
                completion_logs.append(item)  # resolved once the whole directory is read
            else:
                yield from build(item)
        if progress:
            progress(n + 1, len(units))
    kept, superseded = openhands_v1.drop_superseded(completion_logs)
    report.skipped["superseded_completion_log"] += len(superseded)
    for c in kept:
        yield from build(c)


def ingest_paths(paths: list[str] | str, store: Store | str, *, format: str = "auto",
                 tokenizer: str = SMOLLM2_ALIAS, strict: bool = False,
                 max_observation_chars: int | None = DEFAULT_MAX_OBSERVATION_CHARS,
                 engine_tokenizer: str | None = None,
                 storage_options: dict[str, Any] | None = None,
                 progress: Callable[[int, int], None] | None = None) -> IngestReport:
    """Ingest agent logs into a store; re-ingesting the same input writes nothing new.

    Args:
        paths: files or directories of logs.
        store: a :class:`~trajstore.store.Store` or URI (local path or ``s3://bucket/prefix``).
        format: ``auto`` (detect per file) or a name from :data:`~trajstore.ingest.detect.FORMATS`.
        tokenizer: tokenizer for text-only formats (default SmolLM2-135M-Instruct).
        strict: any problem in the input fails the ingest with nothing written.
        max_observation_chars: cap per observation, characters (None = no cap).
        engine_tokenizer: see :func:`iter_trajectories`.
        storage_options: fsspec options when `store` is a URI (s3fs: key, secret, endpoint_url).

    Returns:
        An :class:`IngestReport`.

    Raises:
        IngestError: with ``strict``, when any problem was found (nothing written).
        ValueError: unknown `format`.
        TrajstoreError: the tokenizer cannot be loaded, or the store cannot be read or written.
    """
    if max_observation_chars is not None and max_observation_chars < 0:
        raise ValueError(f"max_observation_chars must be >= 0 (None = no cap), got {max_observation_chars}")
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    st = store if isinstance(store, Store) else open_store(store, storage_options=storage_options)
    report = IngestReport()
    existing = set(read_trajectories(st, columns=["trajectory_id"]).column("trajectory_id").to_pylist())
    seen: set[str] = set()
    trajs = iter_trajectories(paths, format=format, tokenizer=tokenizer, max_observation_chars=max_observation_chars,
                              engine_tokenizer=engine_tokenizer, report=report, progress=progress)
    pending: list[Trajectory] = []
    writer = None if strict else StoreWriter(st, flush_seconds=None)
    try:
        for t in trajs:
            if t.trajectory_id in existing:
                report.skipped["already_in_store"] += 1
                continue
            if t.trajectory_id in seen:
                report.skipped["duplicate_in_input"] += 1
                continue
            seen.add(t.trajectory_id)
            if writer is None:
                pending.append(t)
            else:
                writer.write(t)
                report.written_ids.append(t.trajectory_id)
    finally:
        if writer is not None:
            writer.close()
    if strict:
        if report.problems:
            raise IngestError(report)
        with StoreWriter(st, flush_seconds=None) as w:
            for t in pending:
                w.write(t)
                report.written_ids.append(t.trajectory_id)
    report.trajectories_written = len(report.written_ids)
    report.skipped = Counter({k: v for k, v in report.skipped.items() if v})
    return report

"""`ingest_paths` / `iter_trajectories`: agent logs on disk -> trajectories in a store, end to end:
discover the input units, parse each record (:mod:`~trajstore.ingest.dispatch`), build them
(:mod:`~trajstore.ingest.builder`), skip ids already stored and write the rest with the store's
writer in its deduplicating mode (:class:`~trajstore.writer.StoreWriter`, ``dedupe_lock``).
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from trajstore.errors import TrajstoreError
from trajstore.hub import SMOLLM2_ALIAS
from trajstore.ingest.builder import IngestBuilder
from trajstore.ingest.builders.conversation import DEFAULT_MAX_OBSERVATION_CHARS
from trajstore.ingest.builders.trees import HeldTree, build_tree
from trajstore.ingest.discover import IgnoredFiles, InputUnit, discover
from trajstore.ingest.dispatch import parse_unit
from trajstore.ingest.formats import registry
from trajstore.ingest.reasons import problem_reason
from trajstore.ingest.records import Origin, ParsedTrajectory, Problem, StoredRow
from trajstore.ingest.summary import IngestProgress, IngestReport
from trajstore.models import Trajectory
from trajstore.store import Store, open_store
from trajstore.writer import StoreWriter

INGEST_LOCK = "ingest"
"""The store lock every ingest's writer holds while it commits a shard (``StoreWriter(dedupe_lock=...)``):
ingests run at once into one store store each trajectory once."""


class IngestError(TrajstoreError):
    """``strict`` ingest found problems; nothing was written. `report` lists them all."""

    def __init__(self, report: IngestReport):
        self.report = report
        shown = "\n".join(f"  - {p}" for p in report.problems[:10])
        more = f"\n  ... and {len(report.problems) - 10} more" if len(report.problems) > 10 else ""
        super().__init__(f"strict ingest: {len(report.problems)} problem(s), nothing written:\n{shown}{more}")


class IngestInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) stopped an ingest. Still a ``KeyboardInterrupt``; `report` says what was
    stored before it: every new shard appears atomically (temporary file renamed into place; one
    PUT on object stores) and what a non-strict ingest had buffered is flushed first, so the store holds whole
    trajectories only, ``report.trajectories_written`` of them from this ingest. Running the
    same ingest again adds the rest."""

    def __init__(self, report: IngestReport):
        super().__init__(f"ingest interrupted after storing {report.trajectories_written} trajectories")
        self.report = report


def iter_trajectories(paths: list[str], *, input_format: str = "auto", tokenizer: str = SMOLLM2_ALIAS,
                      max_observation_chars: int | None = DEFAULT_MAX_OBSERVATION_CHARS,
                      engine_tokenizer: str | None = None,
                      train_reconstructed_actions: bool = False,
                      report: IngestReport | None = None,
                      progress: Callable[[IngestProgress], None] | None = None) -> Iterator[Trajectory]:
    """Parse and tokenize everything under `paths`, yielding trajectories (problems go to `report`).

    One bad record costs only itself: whatever goes wrong while reading, parsing or building one
    record (a row, a line, an event file, a document) becomes a :class:`Problem` with its path,
    line and reason, and the ingest goes on with the next record and file.

    Records linked across files (:mod:`~trajstore.ingest.builders.trees`: sub-agents, context rewrites,
    continuations) are held until their directory is read, then built and yielded parents first.

    Args:
        paths: files and directories (searched recursively for :data:`~trajstore.ingest.discover.INPUT_SUFFIXES`).
        input_format: ``auto`` (detected per record) or one of :data:`~trajstore.ingest.formats.registry.FORMATS`
            for every input.
        tokenizer: name for :func:`trajstore.hub.load_tokenizer` (loaded on first text-only input).
        max_observation_chars: cap per observation (characters); None = no cap.
        engine_tokenizer: the tokenizer engine token ids belong to when the log does not name
            it (``"model"`` = each rollout's model name); None = such rollouts are stored as
            not trainable (see :func:`~trajstore.ingest.builders.engine.rollout_to_trajectories`).
        train_reconstructed_actions: store actions the log keeps only as a parsed or reformatted
            version (fidelity flag ``action_text``) as trainable; False = stored with
            ``trainable = false`` and the format's reason (see
            :func:`~trajstore.ingest.builders.conversation.conversation_to_trajectories`).
        progress: called with an :class:`IngestProgress` after every unit and trajectory.

    Raises:
        ValueError: unknown `input_format`.
        TrajstoreError: the tokenizer cannot be loaded (it is needed by every text-only record).
    """
    if input_format != "auto":
        registry.get(input_format)  # an unknown name is refused before anything is read
    report = report if report is not None else IngestReport()
    ignored_paths: list[str] = []
    units, problems = discover(paths, ignored_paths)
    report.problems.extend(problems)
    builder = IngestBuilder(report, tokenizer=tokenizer, max_observation_chars=max_observation_chars,
                            engine_tokenizer=engine_tokenizer, train_reconstructed_actions=train_reconstructed_actions)
    ticker = _Ticker(progress, report, builder, len(units))
    records = _Records(report, input_format, IgnoredFiles(ignored_paths, report.ignored_files))
    for n, unit in enumerate(units):
        report.files_seen += unit.file_count
        yield from ticker.each(build_tree(records.tree.leave(unit.path), builder.build), n)
        yield from _guarded(unit, ticker.each(_built(records.of(unit), builder), n), report)
        ticker.tick(n + 1)
    yield from ticker.each(build_tree(records.tree.release(), builder.build), len(units))
    yield from ticker.each(_built(records.settled(), builder), len(units))


def _built(items: Iterable[ParsedTrajectory | StoredRow], builder: IngestBuilder) -> Iterator[Trajectory]:
    """The trajectories of each of `items`, built one by one."""
    for item in items:
        yield from builder.build(item)


def _guarded(unit: InputUnit, trajectories: Iterator[Trajectory], report: IngestReport) -> Iterator[Trajectory]:
    """`trajectories`, those of one input unit. A fault outside any one record (the reader
    breaking mid-file) loses the rest of this unit only: it becomes the unit's problem."""
    try:
        yield from trajectories
    except TrajstoreError:
        raise
    except Exception as e:  # noqa: BLE001 - the rest of this file is lost, the other files are read
        report.problems.append(Problem(Origin(unit.path), "malformed", f"reading stopped: {problem_reason(e)}"))


class _Ticker:
    """Calls the ingest's progress callback (if any) with where it stands."""

    def __init__(self, progress: Callable[[IngestProgress], None] | None, report: IngestReport,
                 builder: IngestBuilder, units: int):
        self.progress, self.report, self.builder, self.units = progress, report, builder, units

    def tick(self, done: int) -> None:
        """Report `done` input units read."""
        if self.progress:
            self.progress(IngestProgress(done, self.units, self.report.trajectories_parsed, len(self.report.problems),
                                         self.builder.tokens, self.report.refused))

    def each(self, trajectories: Iterable[Trajectory], done: int) -> Iterator[Trajectory]:
        """`trajectories`, reporting progress after each."""
        for t in trajectories:
            yield t
            self.tick(done)


class _Records:
    """Where each parsed record of an ingest goes: its problems into the report, a record linked
    to others of its directory into the held tree (:class:`~trajstore.ingest.builders.trees.HeldTree`),
    a record of a format that settles its records together (completion logs) aside until every
    input is read, any other straight on to be built.

    Args:
        report: the ingest's report.
        input_format: ``auto`` or the format every input is read as.
        ignored: the files the walk did not read (a record may read one beside it).
    """

    def __init__(self, report: IngestReport, input_format: str, ignored: IgnoredFiles):
        self.report, self.input_format, self.ignored = report, input_format, ignored
        self.tree = HeldTree()
        self.settling: dict[str, list[ParsedTrajectory]] = {f.name: [] for f in registry.REGISTERED if f.settle}

    def of(self, unit: InputUnit) -> Iterator[ParsedTrajectory | StoredRow]:
        """The records of `unit` to build now (the others are held or counted)."""
        for item in parse_unit(unit, self.input_format):
            if isinstance(item, Problem):
                self.report.problems.append(item)
                continue
            if isinstance(item, ParsedTrajectory):
                self.ignored.read_beside(item.read_files)
                if self._held(item):
                    continue
            yield item

    def _held(self, item: ParsedTrajectory) -> bool:
        fmt = registry.BY_SOURCE.get(item.source)
        if fmt is not None and fmt.name in self.settling:
            self.settling[fmt.name].append(item)
            return True
        return self.tree.hold(item)

    def settled(self) -> Iterator[ParsedTrajectory]:
        """The records set aside for their format to settle, once every input is read: those it
        keeps (the others are counted as skipped, by reason)."""
        for name, held in self.settling.items():
            settle = registry.BY_NAME[name].settle
            if not held or settle is None:
                continue
            kept, skipped = settle(held)
            for reason, n in skipped.items():
                self.report.skipped[reason] += n
            yield from kept


def ingest_paths(paths: list[str] | str, store: Store | str, *, input_format: str = "auto",
                 tokenizer: str = SMOLLM2_ALIAS, strict: bool = False,
                 max_observation_chars: int | None = DEFAULT_MAX_OBSERVATION_CHARS,
                 engine_tokenizer: str | None = None,
                 train_reconstructed_actions: bool = False,
                 storage_options: dict[str, Any] | None = None,
                 progress: Callable[[IngestProgress], None] | None = None) -> IngestReport:
    """Ingest agent logs into a store; re-ingesting the same input writes nothing new.

    New trajectories are written in atomic shards (the writer's row and byte limits), each under
    the store's ingest lock (:data:`INGEST_LOCK`) after dropping what another ingest stored
    meanwhile (counted as ``already_in_store``): ingests run at once into a local store never
    store an id twice (on an object store, see :class:`~trajstore.writer.StoreWriter`'s
    ``dedupe_lock``). Ctrl-C stores what was built before it, whole trajectories only
    (:class:`IngestInterrupted`).

    Args:
        paths: files or directories of logs.
        store: a :class:`~trajstore.store.Store` or URI (local path or ``s3://bucket/prefix``).
        input_format: ``auto`` (detected per record) or a name from :data:`~trajstore.ingest.formats.registry.FORMATS`.
        tokenizer: tokenizer for text-only formats (default SmolLM2-135M-Instruct).
        strict: any problem in the input fails the ingest with nothing written.
        max_observation_chars: cap per observation, characters (None = no cap).
        engine_tokenizer: see :func:`iter_trajectories`.
        train_reconstructed_actions: see :func:`iter_trajectories`.
        storage_options: fsspec options when `store` is a URI (s3fs: key, secret, endpoint_url).
        progress: called with an :class:`IngestProgress` as the ingest advances.

    Returns:
        An :class:`IngestReport` (``report.refused`` > 0: some record was refused; every other
        record was still written).

    Raises:
        IngestError: with ``strict``, when any problem was found (nothing written).
        ValueError: unknown `input_format`.
        TrajstoreError: the tokenizer cannot be loaded, or the store cannot be read or written.
    """
    if max_observation_chars is not None and max_observation_chars < 0:
        raise ValueError(f"max_observation_chars must be >= 0 (None = no cap), got {max_observation_chars}")
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    st = store if isinstance(store, Store) else open_store(store, storage_options=storage_options)
    report = IngestReport()
    # the builders validated every trajectory; a lineage is stored as the input names it
    writer = StoreWriter(st, flush_seconds=None, validate=False, dedupe_lock=INGEST_LOCK)
    trajs = iter_trajectories(paths, input_format=input_format, tokenizer=tokenizer,
                              max_observation_chars=max_observation_chars, engine_tokenizer=engine_tokenizer,
                              train_reconstructed_actions=train_reconstructed_actions,
                              report=report, progress=progress)
    try:
        _store(trajs, writer, report, strict=strict)
    except KeyboardInterrupt as e:
        if isinstance(e, IngestInterrupted):
            raise
        raise IngestInterrupted(_count_written(report, writer)) from e
    _count_written(report, writer)
    report.skipped = Counter({k: v for k, v in report.skipped.items() if v})
    return report


def _store(trajs: Iterator[Trajectory], writer: StoreWriter, report: IngestReport, *, strict: bool) -> None:
    """Hand `writer` each new trajectory of `trajs` (ids already stored or seen before are
    counted as skipped); with `strict`, only once all are built and no problem was found.

    A failure while they are built (Ctrl-C included) still stores what was built before it,
    unless `strict`.

    Raises:
        IngestError: `strict` and the report lists a problem (nothing written).
    """
    stored = writer.dedupe
    assert stored is not None
    seen: set[str] = set()
    pending: list[Trajectory] = []
    try:
        for t in trajs:
            if t.trajectory_id in stored.stored:
                report.skipped["already_in_store"] += 1
            elif t.trajectory_id in seen:
                report.skipped["duplicate_in_input"] += 1
            elif strict:
                seen.add(t.trajectory_id)
                pending.append(t)
            else:
                seen.add(t.trajectory_id)
                writer.write(t)
    except BaseException:
        if not strict:  # re-ingesting the same input adds the rest
            with contextlib.suppress(Exception):
                writer.flush()
        raise
    if strict and report.problems:
        raise IngestError(report)
    for t in pending:
        writer.write(t)
    writer.flush()


def _count_written(report: IngestReport, writer: StoreWriter) -> IngestReport:
    """`report` with what `writer` stored, and what its commits dropped as stored meanwhile
    (``already_in_store``); called once, when the ingest ends or is interrupted."""
    stored = writer.dedupe
    assert stored is not None
    report.written_ids = list(stored.written)
    report.trajectories_written = len(stored.written)
    report.skipped["already_in_store"] += stored.dropped
    return report

"""The store stream: a store's trajectories read in arrival order, admitted row by row by the
one rule of :mod:`~trajstore.trainer.data.admission` (skips counted, refusals raised) and grouped
into step batches under a token budget. Its :class:`DataCursor` after a batch says exactly which
rows were read, so a resumed run neither repeats nor skips a trajectory.

Trajectories longer than ``max_seq_len`` are never truncated (that would cut off the token the
reward is credited to); ``overlong="skip"`` leaves them out and counts them, ``overlong="error"``
stops.

Linked trajectories (schema v3 lineage, :mod:`~trajstore.trainer.data.episodes`): a batch does not
end between a part and its successor (context rewrite, continuation) arriving right after it,
and a child's shared prefix (its first ``fork_point`` tokens, its parent's) is never an action
slot of the child.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from trajstore.errors import CorruptShardError
from trajstore.reader import TrajectoryBatch, iter_shard_batches
from trajstore.reader.files import gone
from trajstore.reader.progress import Progress, Unit, mentions, plan
from trajstore.sampling import SamplingArrays
from trajstore.store import TRAJECTORIES_DIR, ShardInfo, Store
from trajstore.store.compaction_records import ShardGone
from trajstore.trainer.config import DataConfig
from trajstore.trainer.data.admission import (
    UNREPRODUCIBLE,
    Admission,
    AdmissionRule,
    decide_rows,
    unreproducible_error,
)
from trajstore.trainer.data.census import StoreCensus
from trajstore.trainer.data.cursor import DataCursor
from trajstore.trainer.data.episodes import SUCCESSORS_OVER_BATCH, is_successor_of, shared_prefix_end
from trajstore.trainer.data.errors import TrainDataError
from trajstore.trainer.data.samples import StepBatch, TrainSample
from trajstore.trainer.data.token_arrays import LINEAGE_SAMPLE_COLUMNS, RowGroupArrays
from trajstore.trainer.data.vocabulary import check_vocabulary
from trajstore.trainer.data.where import WhereFilter

ListShards = Callable[[], list[ShardInfo]]
"""Lists the store's trajectory shards in arrival order."""


class TrajectoryStream:
    """Reads a store's trajectories in arrival order and yields :class:`StepBatch` es.

    Args:
        store: the store. cfg: the data section of the training config.
        tokenizer: the model's tokenizer identity; a row whose ``tokenizer`` differs is refused.
        vocab_size: the model's vocabulary; a token id at or above it is refused. None until the
            model is loaded (:meth:`precheck` does not need it; reading does).
        cursor: where to continue (a fresh cursor reads from the first shard).
        list_shards: how shards are listed (distributed runs list on rank 0 and broadcast).

    Raises (from :meth:`next_batch`):
        TrainDataError: tokenizer mismatch, text-only data without the opt-in, token id outside
            the vocabulary, overlong trajectory with ``overlong="error"``, log-probs the trainer
            cannot reproduce with ``unreproducible="error"``, or a bad ``where``.
    """

    def __init__(self, store: Store, cfg: DataConfig, *, tokenizer: str, vocab_size: int | None,
                 cursor: DataCursor | None = None, list_shards: ListShards | None = None):
        if cfg.max_seq_len > cfg.max_batch_tokens:
            raise ValueError(f"max_seq_len ({cfg.max_seq_len}) exceeds max_batch_tokens ({cfg.max_batch_tokens})")
        self.store = store
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self._read = cursor or DataCursor()  # right after the last row read (a held-back row included)
        self._returned = self._read  # right after the last row of the last batch returned
        self._list = list_shards or (lambda: store.list_shards(TRAJECTORIES_DIR))
        self._done = list(self._read.done_shards)
        self._done_set = set(self._done)
        self._seen: set[str] = set()
        self._pending: TrainSample | None = None
        self._iter: Iterator[TrainSample] | None = None
        self._iter_shard: ShardInfo | None = None
        self._skipped: dict[str, int] = {}
        self._rule = AdmissionRule(cfg, tokenizer)
        self._where = WhereFilter(cfg.where) if cfg.where else None
        self.on_wait: Callable[[str], None] | None = None
        """Called with :meth:`waiting_message` before each poll while ``follow`` waits for data."""
        self.stop_event: threading.Event | None = None
        """Once set, a following stream stops waiting (returns what it has, or None)."""
        self._rebuild_seen()

    # -- public --------------------------------------------------------------------------

    def next_batch(self) -> StepBatch | None:
        """The next step's trajectories: up to ``batch_size`` of them and at most
        ``max_batch_tokens`` tokens. Without ``follow`` a final short batch is returned, then
        None. With ``follow`` it waits for new shards (polling every ``poll_interval_s``) until
        the batch is full or ``idle_timeout_s`` passes without data."""
        t0 = time.perf_counter()
        samples: list[TrainSample] = []
        tokens = 0
        idle_since = time.monotonic()
        while len(samples) < self.cfg.batch_size or self._successor_next(samples, tokens):
            s = self._pending or self._next_sample()
            self._pending = None
            if s is None:
                if not self.cfg.follow:
                    break
                timeout = self.cfg.idle_timeout_s
                if timeout is not None and time.monotonic() - idle_since >= timeout:
                    break
                if self.stop_event is not None and self.stop_event.is_set():
                    break
                if self.on_wait is not None:
                    self.on_wait(self.waiting_message(len(samples)))
                time.sleep(self.cfg.poll_interval_s)
                continue
            idle_since = time.monotonic()
            if samples and tokens + s.num_tokens > self.cfg.max_batch_tokens:
                self._pending = s
                break
            samples.append(s)
            tokens += s.num_tokens
        skipped, self._skipped = self._skipped, {}
        if not samples:
            self._returned = self._read
            return None
        self._returned = samples[-1].cursor
        return StepBatch(samples, samples[-1].cursor, skipped, time.perf_counter() - t0)

    @property
    def cursor(self) -> DataCursor:
        """Where a resumed stream continues: right after the last trajectory returned by
        :meth:`next_batch` (a row read ahead to look for a chain's successor and held back for
        the next batch is not counted as read)."""
        return self._returned

    def _successor_next(self, samples: list[TrainSample], tokens: int) -> bool:
        """With the batch full: whether the next row read continues (context rewrite, continuation)
        one of its parts and fits, so that the chain is trained whole (at most
        :data:`SUCCESSORS_OVER_BATCH` over ``batch_size``; never over ``max_batch_tokens``). Reads
        what is there now, never waits; the row read is kept for the next batch otherwise."""
        if not samples or len(samples) >= self.cfg.batch_size + SUCCESSORS_OVER_BATCH:
            return False
        if self._pending is None:
            self._pending = self._next_sample()
        s = self._pending
        return (s is not None and tokens + s.num_tokens <= self.cfg.max_batch_tokens
                and is_successor_of(s, {x.trajectory_id for x in samples}))

    def waiting_message(self, in_batch: int) -> str:
        """What a following stream waits for, e.g. ``waiting for new trajectories in
        /data/store/trajectories: 12 seen so far, 3/8 for the next step (polling every 2s)``."""
        idle = f"; stopping after {self.cfg.idle_timeout_s:g}s without data" if self.cfg.idle_timeout_s else ""
        return (f"waiting for new trajectories in {self.store.url(TRAJECTORIES_DIR)}: {len(self._seen)} seen so far, "
                f"{in_batch}/{self.cfg.batch_size} for the next step (polling every {self.cfg.poll_interval_s:g}s"
                f"{idle})")

    def close(self) -> None:
        """Release the ``--where`` connection. Safe while a reader thread is filtering a shard:
        it waits for that call (DuckDB refuses to close a busy connection), and a later read of
        the closed stream raises :class:`StreamClosed`."""
        if self._where is not None:
            self._where.close()

    # -- reading -------------------------------------------------------------------------

    def _progress(self) -> Progress:
        return Progress(self._done, self._read.shard, self._read.next_row)

    def _next_sample(self) -> TrainSample | None:
        while True:
            if self._iter is None:
                nxt = self._next_shard()
                if nxt is None:
                    return None
                self._iter = self._read_shard(*nxt)
                self._iter_shard = nxt[0]
            try:
                s = next(self._iter, None)
            except (ShardGone, OSError) as e:
                # a compaction replaced the shard and deleted it after the listing: list again,
                # the cursor says exactly which of its rows were read
                if not isinstance(e, ShardGone) and gone(self.store, self._iter_shard, e) is None:
                    raise
                self._iter = None
                continue
            if s is not None:
                return s
            self._iter = None

    def _mark_done(self, names: list[str]) -> None:
        fresh = [n for n in names if n not in self._done_set]
        self._done.extend(fresh)
        self._done_set.update(fresh)
        keep = self._read.shard is not None and self._read.shard not in self._done_set
        self._read = DataCursor(list(self._done), self._read.shard if keep else None,
                                 self._read.next_row if keep else 0)

    def _plans(self) -> Iterator[tuple[ShardInfo, list[Unit]]]:
        """Each listed shard with rows not read yet and its units (:func:`~trajstore.reader.progress.plan`),
        the one holding the cursor's shard in progress first (resume), then in arrival order. A
        shard found fully read (a compaction's output of shards all read) is marked done."""
        shards = self._list()
        in_progress = [s for s in shards if mentions(s, self._read.shard)]
        for shard in [*in_progress, *(s for s in shards if not mentions(s, self._read.shard))]:
            if shard.name in self._done_set:
                continue
            units, _ = plan(shard, self._progress(), self._done_set)
            if not any(len(u.phys) for u in units):
                self._mark_done([*(u.name for u in units), shard.name])
                continue
            yield shard, units

    def _next_shard(self) -> tuple[ShardInfo, list[Unit]] | None:
        return next(self._plans(), None)

    def _read_shard(self, shard: ShardInfo, units: list[Unit]) -> Iterator[TrainSample]:
        phys = np.concatenate([u.phys for u in units])
        decisions = decide_rows(self.store, shard, 0, rule=self._rule, seen=self._seen, where=self._where, rows=phys)
        owner = np.repeat(np.arange(len(units)), [len(u.phys) for u in units])
        unit_rows = np.concatenate([u.rows for u in units])
        walk = _UnitWalk(self, units)
        base, k = 0, 0
        for batch in iter_shard_batches(self.store, shard, columns=["group_id", *LINEAGE_SAMPLE_COLUMNS],
                                        strict=True):
            n = len(batch)
            hi = int(np.searchsorted(phys, base + n))
            if hi > k:
                yield from self._samples_of(batch, shard, base, phys[k:hi], owner[k:hi], unit_rows[k:hi], walk,
                                            decisions)
            base, k = base + n, hi
            if k == len(phys):
                break
        walk.finish()

    def _samples_of(self, batch: TrajectoryBatch, shard: ShardInfo, base: int, phys: np.ndarray, owner: np.ndarray,
                    unit_rows: np.ndarray, walk: _UnitWalk, decisions: Iterator[Admission]) -> Iterator[TrainSample]:
        """The admitted rows among `phys` (rows of the shard inside this row group, ascending) as
        samples; `owner` and `unit_rows` give each row's unit and its row there; `decisions`
        yields the admission of each planned row of the shard, in order (see :func:`decide_rows`).
        The cursor advances past every row, admitted or skipped."""
        group = RowGroupArrays.of(batch)
        for row, j, unit_row in zip(phys.tolist(), owner.tolist(), unit_rows.tolist()):
            i = row - base
            d = next(decisions)
            if d.row != row or d.trajectory_id != batch.trajectory_ids[i]:
                raise RuntimeError(f"shard {shard.name}: row {row} was decided as {d.trajectory_id!r} (row {d.row}) "
                                   f"but read as {batch.trajectory_ids[i]!r}")
            if d.skip is not None and d.skip.startswith(UNREPRODUCIBLE) and self.cfg.unreproducible == "error":
                raise unreproducible_error([d], before_training=False)  # arrived after the census (--follow)
            cursor = walk.after(j, unit_row)
            self._read = cursor
            if d.skip is not None:
                self._skip(d.skip)
                continue
            sample = self._sample(group, i, d, shard, row, cursor)
            sample.row_group = batch.row_group
            yield sample

    def _sample(self, group: RowGroupArrays, i: int, d: Admission, shard: ShardInfo, row: int,
                cursor: DataCursor) -> TrainSample:
        """Row `i` of the row group (admitted as `d`) as a sample: its token ids checked against
        the vocabulary, and its trained actions (:meth:`_trained_actions`)."""
        a, b = group.token_range(i)
        tokens = group.batch.tokens[a:b].astype(np.int64)
        if self.vocab_size is None:
            raise ValueError("TrajectoryStream.vocab_size must be set before reading batches")
        if len(tokens) and int(tokens.max()) >= self.vocab_size:
            raise TrainDataError(f"{d.place}: field tokens: id {int(tokens.max())} is outside the model's "
                                 f"vocabulary of {self.vocab_size}")
        lineage = {c: group.columns[c][i] for c in LINEAGE_SAMPLE_COLUMNS}
        mask, lps = self._trained_actions(group, i, d.text_only, lineage["parent_trajectory_id"],
                                          lineage["fork_point"])
        return TrainSample(
            trajectory_id=d.trajectory_id, group_id=group.columns["group_id"][i], shard=shard.name, row=row,
            tokens=tokens, rollout_logprobs=lps, action_mask=mask, policy_version=group.policy_version[a:b].copy(),
            sampling=SamplingArrays(*(x[a:b].copy() for x in group.sampling)), reward=float(group.batch.reward[i]),
            needs_behaviour=d.text_only, cursor=cursor, mixed_version_actions=group.mixed_version_actions(i),
            **lineage)

    def _trained_actions(self, group: RowGroupArrays, i: int, text_only: bool, parent: str | None,
                         fork_point: int | None) -> tuple[np.ndarray, np.ndarray]:
        """Row `i`'s action mask and rollout log-probs (copies), bool and float32 (T,): every
        log-prob NaN for `text_only` data (the trainer fills them); otherwise an action token whose
        engine log-prob is unknown (NaN: a null or an engine's -9999 stand-in, counted in
        num_missing_logprobs) has no behaviour log-prob for DIS and is left out of the mask, so it
        never reaches the loss or the ratio statistics. A child's shared prefix (its parent's
        tokens, trained in the parent) is never trained twice: counted as ``shared_prefix_actions``."""
        a, b = group.token_range(i)
        mask = group.action[a:b].copy()
        lps = group.logprobs[a:b].copy()
        if text_only:
            lps[:] = np.nan
        else:
            mask &= ~np.isnan(lps)
        shared = shared_prefix_end(parent, fork_point)
        if shared and mask[:shared].any():
            mask[:shared] = False
            self._skip("shared_prefix_actions")
        return mask, lps

    def _check_readable(self) -> None:
        """Refuse a store with a shard that cannot be read, naming it (unless ``skip_unreadable``):
        its rows would silently be left out of the run, as a damaged store must not audit as healthy.

        Raises:
            TrainDataError: the first unreadable shard (``traj validate`` lists them all).
        """
        if self.cfg.skip_unreadable:
            return
        try:
            self.store.list_shards(TRAJECTORIES_DIR, strict=True)
        except CorruptShardError as e:
            raise TrainDataError(f"{e}; nothing was written (`traj validate {self.store.uri}` lists every damaged "
                                 "shard; --skip-unreadable trains on the rest without it)") from None

    def precheck(self) -> StoreCensus:
        """Apply the admission rule (:class:`~trajstore.trainer.data.admission.AdmissionRule`, the
        one the stream applies) to the rows already in the store, from the cursor on and in the
        order the stream reads them, reading scalar columns and Parquet statistics only, so that a
        run that would be refused stops before it writes anything (config, published v0, records).

        Refusals: a shard that cannot be read (unless ``skip_unreadable``), a ``--where`` that DuckDB cannot evaluate on the data, tokenizer mismatch,
        text-only data without the opt-in, ``overlong="error"`` with a longer row, and with
        ``unreproducible="error"`` every row whose log-probs the trainer cannot reproduce (one
        line naming them all: :func:`~trajstore.trainer.data.admission.unreproducible_error`).
        Token ids are checked by :meth:`check_vocabulary` once the model (its vocabulary) is known.

        Returns:
            What the rows would become (see :class:`StoreCensus`); ``census.trainable == 0`` is
            for the caller to judge (an error on a fresh run without ``follow``).

        Raises:
            TrainDataError: as :meth:`next_batch` would on the first refused row, naming the
                shard, row and field.
        """
        self._check_readable()
        census = StoreCensus()
        seen = set(self._seen)
        refused: list[Admission] = []
        for shard, units in self._plans():  # as the stream reads: the resumed one first
            phys = np.concatenate([u.phys for u in units])
            candidates: list[int] = []
            for d in decide_rows(self.store, shard, 0, rule=self._rule, seen=seen, where=self._where, rows=phys):
                census.rows += 1
                if d.skip is not None and d.skip.startswith(UNREPRODUCIBLE) and self.cfg.unreproducible == "error":
                    refused.append(d)  # all of them named in one line, after the whole census
                elif d.skip is not None:
                    census.skip(d.skip)
                else:
                    candidates.append(d.row)
            census.trainable += len(candidates)
            if candidates:
                census.candidates.append((shard, candidates))
        if refused:
            raise unreproducible_error(refused, before_training=True)
        return census

    def check_vocabulary(self, census: StoreCensus) -> None:
        """Refuse a token id at or above ``vocab_size`` in any row `census` found trainable,
        from each shard's Parquet statistics of ``tokens`` (the column is read only for a shard
        without statistics, or to name the offending row). Sets ``census.max_token_id``.

        Raises:
            TrainDataError: naming the trajectory, shard, row and the id.
        """
        if self.vocab_size is None:
            raise ValueError("check_vocabulary needs vocab_size (set it once the model is loaded)")
        check_vocabulary(self.store, census, self.vocab_size)

    def _skip(self, reason: str) -> None:
        self._skipped[reason] = self._skipped.get(reason, 0) + 1

    # -- resume ------------------------------------------------------------------

    def _rebuild_seen(self) -> None:
        """Ids of every row already read (for first-copy-wins dedupe after a resume), found through
        the listing, so shards a compaction merged since the checkpoint count too."""
        if not self._done and self._read.shard is None:
            return
        for shard in self.store.list_shards(TRAJECTORIES_DIR):
            _, read = plan(shard, self._progress(), self._done_set)
            if not len(read):
                continue
            path = shard.path
            fh = self.store.fs.open(path, "rb") if not self.store.is_local else path
            ids = pq.read_table(fh, columns=["trajectory_id"]).column("trajectory_id")
            self._seen.update(ids.take(pa.array(read)).to_pylist())


class _UnitWalk:
    """The cursor while one shard's units are read: rows of unit ``j`` continue the numbering of
    ``units[j].name``; moving past a unit marks it (and any empty one skipped) done."""

    def __init__(self, stream: TrajectoryStream, units: list[Unit]):
        self.stream = stream
        self.units = units
        self.at = 0  # units[:at] are done
        self.done = list(stream._done)  # shared by the cursors of one unit's rows

    def _enter(self, j: int) -> None:
        if j > self.at:
            self.stream._mark_done([u.name for u in self.units[self.at:j]])
            self.at = j
            self.done = list(self.stream._done)

    def after(self, j: int, unit_row: int) -> DataCursor:
        """The cursor right after row `unit_row` of unit `j`."""
        self._enter(j)
        return DataCursor(self.done, self.units[j].name, unit_row + 1)

    def finish(self) -> None:
        """Every unit read: all are done."""
        self.stream._mark_done([u.name for u in self.units[self.at:]])
        self.at = len(self.units)

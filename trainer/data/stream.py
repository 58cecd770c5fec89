"""The store stream: a store's trajectories read in arrival order, checked and filtered, and
grouped into step batches under a token budget; its :class:`DataCursor` after a batch says
exactly which rows were read, so a resumed run neither repeats nor skips a trajectory.

Policy for trajectories longer than ``max_seq_len``: they are never truncated (that would cut
off the token the reward is credited to); ``overlong="skip"`` leaves them out and counts them,
``overlong="error"`` stops. Rows with ``trainable = false`` or a null reward are skipped and
counted. Duplicated ``trajectory_id`` s keep their first copy in arrival order, as the readers do.
"""

from __future__ import annotations

import math
import threading
import time
import warnings
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from trajstore.reader import iter_shard_batches
from trajstore.schema import SCALAR_COLUMNS, SPAN_KIND_CODES
from trajstore.store import TRAJECTORIES_DIR, ShardInfo, Store
from trajstore.trainer.data.census import StoreCensus
from trajstore.trainer.data.columns import read_scalar_columns, with_missing_nullable_columns
from trajstore.trainer.data.cursor import DataCursor
from trajstore.trainer.data.errors import TrainDataError
from trajstore.trainer.data.samples import Sample, StepBatch
from trajstore.trainer.data.vocabulary import check_vocabulary
from trajstore.trainer.data.where import WhereFilter
from trajstore.trainer.loop.config import DataConfig

ListShards = Callable[[], list[ShardInfo]]
"""Lists the store's trajectory shards in arrival order."""


def _overlong_message(where: str, num_tokens: int, max_seq_len: int) -> str:
    return (f"{where}: field num_tokens: {num_tokens} tokens > --max-seq-len {max_seq_len} with --overlong error "
            "(use --overlong skip to leave such rows out, or raise --max-seq-len)")


def _text_only_error(where: str, logprob_source: str, token_source: str) -> TrainDataError:
    return TrainDataError(
        f"{where}: no rollout log-probs for its actions (logprob_source={logprob_source}, "
        f"token_source={token_source}). DIS needs the sampler's log-probs; recomputing "
        "them with current weights would make every ratio 1. To train on text-only data anyway, "
        "opt in with --behaviour-logprobs initial-policy (computed once with the initial weights, "
        "recorded in the run config)")


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
            the vocabulary, overlong trajectory with ``overlong="error"``, or a bad ``where``.
    """

    def __init__(self, store: Store, cfg: DataConfig, *, tokenizer: str, vocab_size: int | None,
                 cursor: DataCursor | None = None, list_shards: ListShards | None = None):
        if cfg.max_seq_len > cfg.max_batch_tokens:
            raise ValueError(f"max_seq_len ({cfg.max_seq_len}) exceeds max_batch_tokens ({cfg.max_batch_tokens})")
        self.store = store
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.cursor = cursor or DataCursor()
        self._list = list_shards or (lambda: store.list_shards(TRAJECTORIES_DIR))
        self._done = list(self.cursor.done_shards)
        self._done_set = set(self._done)
        self._seen: set[str] = set()
        self._pending: Sample | None = None
        self._iter: Iterator[Sample] | None = None
        self._skipped: dict[str, int] = {}
        self._warned_null_tokenizer = False
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
        samples: list[Sample] = []
        tokens = 0
        idle_since = time.monotonic()
        while len(samples) < self.cfg.batch_size:
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
            return None
        return StepBatch(samples, samples[-1].cursor, skipped, time.perf_counter() - t0)

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

    def _next_sample(self) -> Sample | None:
        while True:
            if self._iter is None:
                shard = self._next_shard()
                if shard is None:
                    return None
                start = self.cursor.next_row if self.cursor.shard == shard.name else 0
                self._iter = self._read_shard(shard, start)
            s = next(self._iter, None)
            if s is not None:
                return s
            self._iter = None

    def _next_shard(self) -> ShardInfo | None:
        shards = [s for s in self._list() if s.name not in self._done_set]
        if not shards:
            return None
        # The shard in progress (resume) first; otherwise the oldest not yet read.
        for s in shards:
            if s.name == self.cursor.shard:
                return s
        return shards[0]

    def _read_shard(self, shard: ShardInfo, start_row: int) -> Iterator[Sample]:
        base = 0
        for batch in iter_shard_batches(self.store, shard, strict=True):
            n = len(batch)
            if base + n > start_row:
                yield from self._samples_of(batch, shard, base, start_row)
            base += n
        # the shard is finished: every later sample's cursor says so
        self._done.append(shard.name)
        self._done_set.add(shard.name)
        self.cursor = DataCursor(list(self._done), None, 0)

    def _samples_of(self, batch, shard: ShardInfo, base: int, start_row: int) -> Iterator[Sample]:  # noqa: ANN001
        table = batch.table
        keep_where = self._where_mask(table, shard=shard.name)
        act = batch.action_mask()
        full_lps = batch.logprobs_full()  # (N,) aligned with tokens; schema v2 stores action tokens only
        flat_spans = pc.list_flatten(table.column("spans").combine_chunks())
        temps = flat_spans.field("temperature").fill_null(1.0).to_numpy(zero_copy_only=False).astype(np.float32)
        mixed = flat_spans.field("policy_version_max").is_valid().to_numpy(zero_copy_only=False)
        present = with_missing_nullable_columns(table.select([c for c in SCALAR_COLUMNS if c in table.column_names]),
                                                SCALAR_COLUMNS, shard=shard.name)  # older shards: nulls
        col = {c: present.column(c).to_pylist() for c in
               ("tokenizer", "token_source", "logprob_source", "trainable", "group_id", "num_tokens")}
        done = list(self._done)  # unchanged while this shard is read: one copy, shared by its rows' cursors
        for i in range(len(batch)):
            row = base + i
            if row < start_row:
                continue
            tid = str(batch.trajectory_ids[i])
            cursor = DataCursor(done, shard.name, row + 1)
            self.cursor = cursor
            if tid in self._seen:
                self._skip("duplicate")
                continue
            self._seen.add(tid)
            if keep_where is not None and not keep_where[i]:
                self._skip("where")
                continue
            where = f"trajectory {tid!r} (shard {shard.name}, row {row})"
            if not col["trainable"][i]:  # never trained: its tokenizer (often unknown: engine ids) is moot
                self._skip("not_trainable")
                continue
            self._check_tokenizer(col["tokenizer"][i], where)
            if math.isnan(batch.reward[i]):
                self._skip("no_reward")
                continue
            if col["num_tokens"][i] > self.cfg.max_seq_len:
                if self.cfg.overlong == "error":
                    raise TrainDataError(_overlong_message(where, col["num_tokens"][i], self.cfg.max_seq_len))
                self._skip("overlong")
                continue
            a, b = int(batch.token_offsets[i]), int(batch.token_offsets[i + 1])
            tokens = batch.tokens[a:b].astype(np.int64)
            if self.vocab_size is None:
                raise ValueError("TrajectoryStream.vocab_size must be set before reading batches")
            if len(tokens) and int(tokens.max()) >= self.vocab_size:
                raise TrainDataError(f"{where}: field tokens: id {int(tokens.max())} is outside the model's "
                                     f"vocabulary of {self.vocab_size}")
            mask = act[a:b].copy()
            lps = full_lps[a:b].copy()
            text_only = col["logprob_source"][i] != "engine" or col["token_source"][i] != "engine"
            if not text_only:
                # An action token whose engine log-prob is unknown (NaN: a null or an engine's -9999
                # stand-in, counted in num_missing_logprobs) has no behaviour log-prob for DIS: it is
                # left out of the action mask, so it never reaches the loss or the ratio statistics.
                mask &= ~np.isnan(lps)
            if text_only and self.cfg.behaviour_logprobs != "initial-policy":
                raise _text_only_error(where, col["logprob_source"][i], col["token_source"][i])
            so, eo = int(batch.span_offsets[i]), int(batch.span_offsets[i + 1])
            pv = np.full(len(tokens), -1, dtype=np.int64)
            itemp = np.ones(len(tokens), dtype=np.float32)
            for k in range(so, eo):
                if batch.span_kind[k] == SPAN_KIND_CODES["action"]:
                    s0, s1 = int(batch.span_start[k]), int(batch.span_end[k])
                    pv[s0:s1] = batch.span_policy_version[k]
                    t = float(temps[k])
                    itemp[s0:s1] = 1.0 / t if t > 0 else 1.0
            if text_only:
                lps[:] = np.nan
            yield Sample(tid, col["group_id"][i], shard.name, row, tokens, lps, mask, pv, itemp,
                         float(batch.reward[i]), text_only, cursor, int(mixed[so:eo].sum()))

    def precheck(self) -> StoreCensus:
        """Apply every refusal to the rows already in the store (from the cursor on), reading
        scalar columns and Parquet statistics only, so that a run that would be refused stops
        before it writes anything (config, published v0, records).

        Refusals: a ``--where`` that DuckDB cannot evaluate on the data, tokenizer mismatch,
        text-only data without the opt-in, ``overlong="error"`` with a longer row. Token ids are
        checked by :meth:`check_vocabulary` once the model (its vocabulary) is known.

        Returns:
            What the rows would become (see :class:`StoreCensus`); ``census.trainable == 0`` is
            for the caller to judge (an error on a fresh run without ``follow``).

        Raises:
            TrainDataError: as :meth:`next_batch` would on the first refused row, naming the
                shard, row and field.
        """
        census = StoreCensus()
        seen = set(self._seen)
        for shard in self._list():
            if shard.name in self._done_set:
                continue
            start = self.cursor.next_row if shard.name == self.cursor.shard else 0
            table = read_scalar_columns(self.store, shard)
            keep = self._where_mask(table, shard=shard.name)
            rows = table.select(["trajectory_id", "tokenizer", "token_source", "logprob_source", "trainable",
                                 "reward", "num_tokens"]).to_pylist()
            candidates: list[int] = []
            for row_i, r in enumerate(rows):
                if row_i < start:
                    continue
                census.rows += 1
                if r["trajectory_id"] in seen:
                    census.skip("duplicate")
                    continue
                seen.add(r["trajectory_id"])
                if keep is not None and not keep[row_i]:
                    census.skip("where")
                    continue
                where = f"trajectory {r['trajectory_id']!r} (shard {shard.name}, row {row_i})"
                if not r["trainable"]:
                    census.skip("not_trainable")
                    continue
                self._check_tokenizer(r["tokenizer"], where)
                if r["reward"] is None or math.isnan(r["reward"]):
                    census.skip("no_reward")
                    continue
                if r["num_tokens"] > self.cfg.max_seq_len:
                    if self.cfg.overlong == "error":
                        raise TrainDataError(_overlong_message(where, r["num_tokens"], self.cfg.max_seq_len))
                    census.skip("overlong")
                    continue
                text_only = r["logprob_source"] != "engine" or r["token_source"] != "engine"
                if text_only and self.cfg.behaviour_logprobs != "initial-policy":
                    raise _text_only_error(where, r["logprob_source"], r["token_source"])
                candidates.append(row_i)
            census.trainable += len(candidates)
            if candidates:
                census.candidates.append((shard, candidates))
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

    def _check_tokenizer(self, tok: str | None, where: str) -> None:
        if tok is None:  # only trainable rows get here (ingest stores unnamed engine tokenizers' rows not trainable)
            if not self._warned_null_tokenizer:
                # one text for every row (the CLI prints each distinct warning once)
                warnings.warn(f"trainable trajectories with no tokenizer recorded (null tokenizer column) are trained "
                              f"as token ids of the model's tokenizer {self.tokenizer!r}", stacklevel=3)
                self._warned_null_tokenizer = True
            return
        if tok != self.tokenizer:
            raise TrainDataError(f"{where}: field tokenizer is {tok!r} but the model's tokenizer is "
                                 f"{self.tokenizer!r}; token ids would mean different text (pass --tokenizer "
                                 "only if the two are really the same tokenizer)")

    # -- where / resume ------------------------------------------------------------------

    def _where_mask(self, table: pa.Table, *, shard: str) -> np.ndarray | None:
        return None if self._where is None else self._where.mask(table, shard=shard)

    def _rebuild_seen(self) -> None:
        """Ids of every row already read (for first-copy-wins dedupe after a resume)."""
        if not self._done and self.cursor.shard is None:
            return
        by_name = {s.name: s for s in self.store.list_shards(TRAJECTORIES_DIR)}
        for name, upto in [*((n, None) for n in self._done), (self.cursor.shard, self.cursor.next_row)]:
            if name is None or name not in by_name:
                continue
            path = by_name[name].path
            fh = self.store.fs.open(path, "rb") if not self.store.is_local else path
            ids = pq.read_table(fh, columns=["trajectory_id"]).column("trajectory_id").to_pylist()
            self._seen.update(ids if upto is None else ids[:upto])

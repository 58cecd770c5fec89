"""The trainer's data path: trajectories streamed from a store in arrival order, checked,
filtered, grouped into step batches under a token budget, and packed into micro-batches.

Policy for trajectories longer than ``max_seq_len``: they are never truncated (that would cut
off the token the reward is credited to); ``overlong="skip"`` leaves them out and counts them,
``overlong="error"`` stops. Rows with ``trainable = false`` or a null reward are skipped and
counted. Duplicated ``trajectory_id`` s keep their first copy in arrival order, as the readers do.

``--where`` is a DuckDB SQL predicate over the scalar columns of a trajectory row
(:data:`trajstore.schema.SCALAR_COLUMNS`: trajectory_id, prompt_id, group_id, source, model,
tokenizer, created_at, status, reward, reward_raw, token_source, logprob_source, trainable,
not_trainable_reason, min/max_policy_version, num_*tokens, num_actions, num_observations,
metadata), e.g. ``"status = 'completed' AND num_actions >= 3"``.

The :class:`DataCursor` after a batch says exactly which rows were read; a checkpoint stores it
so a resumed run neither repeats nor skips a trajectory.
"""

from __future__ import annotations

import json
import math
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch

from trajstore.errors import TrajstoreError
from trajstore.reader import iter_shard_batches, read_shard
from trajstore.schema import SCALAR_COLUMNS, SPAN_KIND_CODES, TRAJECTORY_SCHEMA
from trajstore.store import TRAJECTORIES_DIR, ShardInfo, Store
from trajstore.trainer.loop.config import DataConfig


class TrainDataError(TrajstoreError):
    """The store holds data the trainer refuses (names the shard, trajectory and field)."""


class StreamClosed(RuntimeError):
    """A :class:`TrajectoryStream` was read after :meth:`TrajectoryStream.close` (a reader thread
    still filtering when the run ended); never seen by a user."""


@dataclass
class DataCursor:
    """How far the stream has read: shards finished, the shard in progress and its next row.

    Attributes:
        done_shards: names of shards whose every row was read (any order of arrival).
        shard: name of the shard being read, or None.
        next_row: index (0-based, within `shard`) of the first row not yet read.
    """

    done_shards: list[str] = field(default_factory=list)
    shard: str | None = None
    next_row: int = 0

    def to_json(self) -> str:
        return json.dumps({"done_shards": self.done_shards, "shard": self.shard, "next_row": self.next_row})

    @classmethod
    def from_json(cls, text: str) -> DataCursor:
        d = json.loads(text)
        return cls(list(d["done_shards"]), d["shard"], int(d["next_row"]))


@dataclass
class Sample:
    """One trajectory ready for training. T = its token count.

    Attributes:
        trajectory_id, group_id: as stored; shard, row: where it was read.
        tokens: int64 (T,) token ids.
        rollout_logprobs: float32 (T,), nats; the engine's log-prob at action tokens, NaN elsewhere.
            NaN at action tokens too when `needs_behaviour` (filled by the trainer, see
            ``behaviour_logprobs``).
        action_mask: bool (T,); True = token is a model action trained on (an engine action
            token without a log-prob is False: DIS cannot weigh it).
        policy_version: int64 (T,); version that generated the token, -1 at non-action tokens; for a
            mixed-version action span (schema field ``policy_version_max``) the oldest version, so
            staleness is never under-counted.
        inv_temperature: float32 (T,); 1 / sampling temperature of the token's action span
            (1 where unknown or not an action).
        reward: float, credited at the last action token.
        needs_behaviour: True for text-only data admitted with ``behaviour_logprobs="initial-policy"``.
        cursor: the stream's cursor right after this trajectory.
        mixed_version_actions: action spans produced by several versions without a known boundary.
    """

    trajectory_id: str
    group_id: str | None
    shard: str
    row: int
    tokens: np.ndarray
    rollout_logprobs: np.ndarray
    action_mask: np.ndarray
    policy_version: np.ndarray
    inv_temperature: np.ndarray
    reward: float
    needs_behaviour: bool
    cursor: DataCursor
    mixed_version_actions: int = 0

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)

    @property
    def num_action_tokens(self) -> int:
        return int(self.action_mask.sum())

    @property
    def versioned_policy_version(self) -> np.ndarray:
        """Policy versions of the action tokens that have one (ingested text logs have none: their
        tokens are left out, so their staleness is undefined, never ``trainer_version - (-1)``)."""
        pv = self.policy_version[self.action_mask]
        return pv[pv >= 0]

    @property
    def min_policy_version(self) -> int | None:
        pv = self.versioned_policy_version
        return int(pv.min()) if len(pv) else None

    @property
    def max_policy_version(self) -> int | None:
        pv = self.versioned_policy_version
        return int(pv.max()) if len(pv) else None


@dataclass
class StepBatch:
    """The trajectories of one training step (all ranks) and the cursor after them.

    Attributes:
        samples: in arrival order. skipped: rows read but not trained, by reason.
        wait_s: seconds spent waiting for this batch inside the stream (reading + polling).
    """

    samples: list[Sample]
    cursor: DataCursor
    skipped: dict[str, int]
    wait_s: float = 0.0

    @property
    def num_tokens(self) -> int:
        return sum(s.num_tokens for s in self.samples)


class PackedMicroBatch(NamedTuple):
    """Trajectories of one micro-batch concatenated into a single row (no padding).

    Positions restart at 0 for each trajectory, which makes transformers build a block-diagonal
    causal mask (no attention across trajectories). Everything is in the *prediction frame*:
    position p holds what is predicted from tokens[:p+1], i.e. token p+1. L = total tokens.

    Fields:
        input_ids: (1, L) int64 token ids.
        position_ids: (1, L) int64 positions inside each trajectory.
        targets: (1, L) int64; the next token of the same trajectory (0 at each trajectory's last
            position, which is never an action slot).
        action_mask: (1, L) bool; True = the predicted token is a model action (an action slot).
        rollout_logprobs: (1, L) float32, nats; behaviour log-prob of the predicted token at action
            slots, 0 elsewhere.
        policy_version: (1, L) int64; version that generated the predicted token, -1 elsewhere.
        inv_temperature: (1, L) float32; 1 / sampling temperature of the predicted token.
        segments: (n + 1,) int64 offsets; trajectory i occupies ``[segments[i], segments[i+1])``.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    targets: torch.Tensor
    action_mask: torch.Tensor
    rollout_logprobs: torch.Tensor
    policy_version: torch.Tensor
    inv_temperature: torch.Tensor
    segments: torch.Tensor


def pack(samples: Sequence[Sample], device: torch.device | str = "cpu") -> PackedMicroBatch:
    """Pack samples into one row in the prediction frame (see :class:`PackedMicroBatch`).

    An empty `samples` gives a one-token dummy row with no action slot (used so that every
    data-parallel rank runs the same number of micro-batches).
    """
    if not samples:
        z = torch.zeros((1, 1), dtype=torch.int64, device=device)
        return PackedMicroBatch(z, z.clone(), z.clone(), torch.zeros((1, 1), dtype=torch.bool, device=device),
                                torch.zeros((1, 1), device=device), torch.full((1, 1), -1, device=device),
                                torch.ones((1, 1), device=device), torch.tensor([0, 1]))
    ids, pos, tgt, act, lp, pv, itemp, seg = [], [], [], [], [], [], [], [0]
    for s in samples:
        t = s.num_tokens
        ids.append(s.tokens)
        pos.append(np.arange(t, dtype=np.int64))
        tgt.append(np.concatenate([s.tokens[1:], [0]]))
        act.append(np.concatenate([s.action_mask[1:], [False]]))
        lp.append(np.concatenate([np.nan_to_num(s.rollout_logprobs[1:], nan=0.0), [0.0]]).astype(np.float32))
        pv.append(np.concatenate([s.policy_version[1:], [-1]]))
        itemp.append(np.concatenate([s.inv_temperature[1:], [1.0]]).astype(np.float32))
        seg.append(seg[-1] + t)

    def cat(parts: list[np.ndarray], dtype: torch.dtype) -> torch.Tensor:
        return torch.as_tensor(np.concatenate(parts)).to(dtype=dtype).unsqueeze(0).to(device)

    return PackedMicroBatch(cat(ids, torch.int64), cat(pos, torch.int64), cat(tgt, torch.int64),
                            cat(act, torch.bool), cat(lp, torch.float32), cat(pv, torch.int64),
                            cat(itemp, torch.float32), torch.tensor(seg, dtype=torch.int64))


def to_rows(x: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
    """One row per trajectory of a packed tensor, zero-padded on the right.

    Args:
        x: ``(1, L)`` packed tensor (any dtype), e.g. a :class:`PackedMicroBatch` field or the
            critic's values of one.
        segments: ``(n + 1,)`` int64 offsets of the packing (:attr:`PackedMicroBatch.segments`).

    Returns:
        ``(n, Tmax)`` tensor of ``x``'s dtype and device, ``Tmax`` = longest trajectory: row ``i``
        is ``x[0, segments[i]:segments[i + 1]]`` followed by zeros.
    """
    lens = (segments[1:] - segments[:-1]).tolist()
    out = x.new_zeros((len(lens), max(lens)))
    for i, (a, n) in enumerate(zip(segments[:-1].tolist(), lens)):
        out[i, :n] = x[0, a:a + n]
    return out


def to_packed(rows: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
    """``(n, Tmax)`` rows -> ``(1, L)`` packed: the inverse of :func:`to_rows` (padding dropped)."""
    lens = (segments[1:] - segments[:-1]).tolist()
    return torch.cat([rows[i, :n] for i, n in enumerate(lens)]).unsqueeze(0)


class GAEInputs(NamedTuple):
    """A packed micro-batch laid out as one row per trajectory, as the advantage estimators
    (:mod:`trajstore.trainer.sao.advantages`) take it. n = trajectories, Tmax = the longest one.

    Fields:
        rewards: (n, Tmax) float32; the trajectory's reward at its last action slot, 0 elsewhere.
        values: (n, Tmax) float; the critic's values (prediction frame), 0 in the padding.
        action_mask: (n, Tmax) bool; True = action slot.
    """

    rewards: torch.Tensor
    values: torch.Tensor
    action_mask: torch.Tensor


def gae_inputs(mb: PackedMicroBatch, samples: Sequence[Sample], values: torch.Tensor) -> GAEInputs:
    """Rewards, values and action mask of a micro-batch, one row per trajectory (see
    :class:`GAEInputs`); map results back with :func:`to_packed`.

    Args:
        mb: the packed micro-batch of `samples` (possibly the one-token dummy of ``pack([])``).
        samples: its trajectories, in packing order.
        values: ``(1, L)`` float critic values of `mb`.
    """
    mask = to_rows(mb.action_mask, mb.segments)
    n, width = mask.shape
    reward = torch.zeros(n, dtype=torch.float32)
    reward[:len(samples)] = torch.tensor([s.reward for s in samples], dtype=torch.float32)
    # last action slot per row (argmax takes the first maximum, here of the reversed row); a row
    # without one gets 0 at its end, i.e. no reward
    last = width - 1 - mask.flip(1).to(torch.uint8).argmax(1)
    rewards = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    rewards[torch.arange(n, device=mask.device), last] = torch.where(mask.any(1), reward.to(mask.device), 0.0)
    return GAEInputs(rewards, to_rows(values, mb.segments), mask)


def split_for_rank(samples: Sequence[Sample], rank: int, world_size: int) -> list[Sample]:
    """This rank's disjoint share of a step: trajectories sorted by length (longest first) are
    dealt round-robin, so ranks get similar token counts. Deterministic on every rank."""
    order = sorted(range(len(samples)), key=lambda i: (-samples[i].num_tokens, i))
    return [samples[i] for i in order[rank::world_size]]


def micro_batches(samples: Sequence[Sample], micro_batch_size: int, num_micro: int) -> list[list[Sample]]:
    """Split into exactly `num_micro` micro-batches of at most `micro_batch_size` trajectories
    (trailing ones may be empty so that every rank runs the same number of passes)."""
    out = [list(samples[i:i + micro_batch_size]) for i in range(0, len(samples), micro_batch_size)]
    if len(out) > num_micro:
        raise ValueError(f"{len(samples)} samples do not fit {num_micro} micro-batches of {micro_batch_size}")
    return out + [[] for _ in range(num_micro - len(out))]


def token_micro_batches(samples: Sequence[Sample], micro_batch_size: int, max_tokens: int | None) -> list[list[Sample]]:
    """Split in order into micro-batches of at most `micro_batch_size` trajectories and at most
    `max_tokens` tokens (None: no token bound); a trajectory longer than `max_tokens` goes alone
    (trajectories are never split). The step's loss is normalised by its global token count, so
    how it is split does not change the update (tests/trainer/test_losses.py)."""
    out: list[list[Sample]] = []
    cur: list[Sample] = []
    n = 0
    for s in samples:
        if cur and (len(cur) >= micro_batch_size or (max_tokens is not None and n + s.num_tokens > max_tokens)):
            out.append(cur)
            cur, n = [], 0
        cur.append(s)
        n += s.num_tokens
    if cur:
        out.append(cur)
    return out


ListShards = Callable[[], list[ShardInfo]]


@dataclass
class StoreCensus:
    """What :meth:`TrajectoryStream.precheck` found in the rows not yet read.

    Attributes:
        rows: rows looked at (from the cursor on).
        trainable: rows that would be trained now (first copies, passing every filter).
        skipped: rows that would be skipped, by reason (duplicate, where, not_trainable,
            no_reward, overlong).
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
        names = {"where": "filtered by --where", "not_trainable": "marked not trainable",
                 "no_reward": "without a reward", "overlong": "longer than --max-seq-len",
                 "duplicate": "duplicate ids"}
        why = ", ".join(f"{k} {names.get(r, r)}" for r, k in sorted(self.skipped.items()))
        return f"{self.rows} rows: {self.trainable} trainable" + (f" ({why})" if why else "")


def _file_of(store: Store, shard: ShardInfo) -> pq.ParquetFile:
    fh = store.fs.open(shard.path, "rb") if not store.is_local else shard.path
    return pq.ParquetFile(fh)


def read_scalar_columns(store: Store, shard: ShardInfo) -> pa.Table:
    """The scalar columns (:data:`~trajstore.schema.SCALAR_COLUMNS`) of a shard as schema v2
    (:func:`trajstore.reader.read_shard`: older schemas converted, a nullable column that an
    older shard lacks, e.g. ``group_id`` or ``metadata``, filled with nulls)."""
    return read_shard(store, shard, columns=SCALAR_COLUMNS)


def with_missing_nullable_columns(table: pa.Table, columns: Sequence[str], *, shard: str) -> pa.Table:
    """`table` with every name of `columns` it lacks added as an all-null column of the current
    schema's type (nullable columns only), in the order of `columns` plus any others after."""
    out = []
    for c in columns:
        if c in table.column_names:
            out.append((c, table.column(c)))
            continue
        f = TRAJECTORY_SCHEMA.field(c)
        if not f.nullable:
            raise TrainDataError(f"shard {shard}: required column {c!r} is missing (schema too old or not a "
                                 "trajectory shard; `traj migrate` rewrites old shards)")
        out.append((c, pa.nulls(table.num_rows, type=f.type)))
    out += [(c, table.column(c)) for c in table.column_names if c not in columns]
    return pa.table(dict(out))


def _read_column(store: Store, shard: ShardInfo, column: str) -> pa.ChunkedArray:
    return read_shard(store, shard, columns=[column]).column(column)


def shard_max_token_id(store: Store, shard: ShardInfo) -> int | None:
    """The largest token id of a shard from its Parquet column statistics (footer only), or
    None when a row group has no statistics for ``tokens`` (then the column must be read)."""
    md = _file_of(store, shard).metadata
    top: int | None = None
    for rg in range(md.num_row_groups):
        group = md.row_group(rg)
        if group.num_rows == 0:
            continue
        stats = None
        for j in range(group.num_columns):
            col = group.column(j)
            if col.path_in_schema in ("tokens.list.element", "tokens.list.item"):
                stats = col.statistics
                break
        if stats is None or not stats.has_min_max:
            return None
        top = int(stats.max) if top is None else max(top, int(stats.max))
    return top



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
        max_batch_size: cap on trajectories per step (defaults to ``cfg.batch_size``).
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
        self._duck = None
        self._duck_lock = threading.Lock()  # the reader thread filters while the training thread may close
        self.on_wait: Callable[[str], None] | None = None
        """Called with :meth:`waiting_message` before each poll while ``follow`` waits for data."""
        self.stop_event: threading.Event | None = None
        """Once set, a following stream stops waiting (returns what it has, or None)."""
        if cfg.where:
            self._check_where(cfg.where)
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
        with self._duck_lock:
            if self._duck is not None:
                self._duck.close()
                self._duck = None

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
        for shard, rows in census.candidates:
            self._check_vocabulary(shard, rows, census)

    def _check_vocabulary(self, shard: ShardInfo, rows: list[int], census: StoreCensus) -> None:
        """Refuse a token id >= the vocabulary in any of `rows` of `shard` (row indices)."""
        assert self.vocab_size is not None
        top = shard_max_token_id(self.store, shard)
        if top is None or top >= self.vocab_size:  # no statistics, or a bad id somewhere: read the ids
            tokens = _read_column(self.store, shard, "tokens")
            for row_i in rows:
                ids = tokens[row_i].values
                if len(ids) and (m := pc.max(ids).as_py()) >= self.vocab_size:
                    tid = read_scalar_columns(self.store, shard).column("trajectory_id")[row_i].as_py()
                    raise TrainDataError(f"trajectory {tid!r} (shard {shard.name}, row {row_i}): field tokens: "
                                         f"id {m} is outside the model's vocabulary of {self.vocab_size}")
            top = pc.max(pc.list_flatten(tokens)).as_py() if len(tokens) else None
        if top is not None:
            census.max_token_id = max(census.max_token_id if census.max_token_id is not None else -1, int(top))

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

    def _check_where(self, where: str) -> None:
        import duckdb

        from trajstore.audit import is_plain_predicate, predicate_error

        self._duck = duckdb.connect()
        # The predicate only ever sees in-memory Arrow tables: no file or network access.
        self._duck.execute("SET enable_external_access = false")
        self._duck.execute("SET lock_configuration = true")
        empty = TRAJECTORY_SCHEMA.empty_table().select(list(SCALAR_COLUMNS))
        # The newline ends a trailing "--" comment that would swallow the closing parenthesis.
        probe = f"SELECT count(*) FROM trajectories WHERE ({where}\n)"
        try:
            if not is_plain_predicate(self._duck, where):
                raise TrainDataError(f"--where {where!r} is not a valid predicate over the scalar columns: "
                                     "must be one boolean expression")
            self._duck.register("trajectories", empty)
            self._duck.execute(probe).fetchall()
        except duckdb.Error as e:
            raise TrainDataError(f"--where {where!r} is not a valid predicate over the scalar columns: "
                                 f"{predicate_error(where, e)}") from e
        finally:
            self._duck.unregister("trajectories")

    def _where_mask(self, table: pa.Table, *, shard: str) -> np.ndarray | None:
        import duckdb

        if not self.cfg.where:
            return None
        t = with_missing_nullable_columns(table.select([c for c in SCALAR_COLUMNS if c in table.column_names]),
                                          SCALAR_COLUMNS, shard=shard)
        t = t.append_column("__row", pa.array(np.arange(t.num_rows, dtype=np.int64)))
        with self._duck_lock:
            if self._duck is None:
                raise StreamClosed("the training stream was closed")
            self._duck.register("trajectories", t)
            try:
                rows = self._duck.execute(f"SELECT __row FROM trajectories WHERE ({self.cfg.where}\n)").fetchnumpy()["__row"]
            except duckdb.Error as e:  # e.g. CAST(source AS INTEGER) on a value that is no integer
                raise TrainDataError(f"--where {self.cfg.where!r} fails on shard {shard}: "
                                     f"{str(e).splitlines()[0]}") from None
            finally:
                self._duck.unregister("trajectories")
        keep = np.zeros(t.num_rows, dtype=bool)
        keep[np.asarray(rows, dtype=np.int64)] = True
        return keep

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

"""trajstore/reader/batches.py: the streaming reader: flat numpy arrays + offsets, zero-copy for tokens
and log-probs, an action mask equal to a slow per-span reference, one Parquet row group per batch
(so memory is bounded by a row group, not the store), and the SDK/store/reader import without torch."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.helpers.reads import count_row_group_reads
from trajstore import iter_batches, open_store, read_trajectories
from trajstore.convert import trajectories_to_table
from trajstore.reader import batch_from_table


def _fill(uri: str, make_trajectory: Any, n: int = 60, seed: int = 3, row_group_target_mb: float = 32) -> list[Any]:
    rng = np.random.default_rng(seed)
    trajs = [make_trajectory(rng, trajectory_id=f"b{seed}-{i:03d}", max_span_tokens=200,
                             with_logprobs=i % 5 != 0, with_actions=i % 11 != 4) for i in range(n)]
    open_store(uri).write_table(trajectories_to_table(trajs), row_group_target_mb=row_group_target_mb)
    return trajs


def _reference_action_mask(spans: list[Any], n_tokens: int) -> np.ndarray:
    """Slow obvious reference: 1 = token is a model action."""
    mask = np.zeros(n_tokens, dtype=bool)
    for s in spans:
        if s.kind == "action":
            for k in range(s.start, s.end):
                mask[k] = True
    return mask


def test_flat_arrays_offsets_and_action_mask(tmp_store: str, make_trajectory: Any) -> None:
    trajs = _fill(tmp_store, make_trajectory)
    batches = list(iter_batches(tmp_store, strict=True))
    assert len(batches) == 1
    b = batches[0]
    assert b.tokens.dtype == np.int32 and b.logprobs.dtype == np.float32
    assert b.token_offsets.dtype == np.int64 and b.span_offsets.dtype == np.int64
    assert b.token_offsets[0] == 0 and b.token_offsets[-1] == len(b.tokens) == sum(len(t.tokens) for t in trajs)
    assert np.array_equal(np.diff(b.token_offsets), [len(t.tokens) for t in trajs])
    assert np.array_equal(np.diff(b.span_offsets), [len(t.spans) for t in trajs])
    assert np.array_equal(b.tokens, np.concatenate([t.tokens for t in trajs]))
    ref_mask = np.concatenate([_reference_action_mask(t.spans, len(t.tokens)) for t in trajs])
    assert np.array_equal(b.action_mask(), ref_mask)
    # v2: log-probs aligned to action tokens; offsets per trajectory = its action token count.
    ref_lp = np.concatenate([t.action_logprobs[_reference_action_mask(t.spans, len(t.tokens))] for t in trajs])
    assert np.array_equal(np.diff(b.logprob_offsets),
                          [sum(s.end - s.start for s in t.spans if s.kind == "action") for t in trajs])
    assert np.array_equal(b.logprobs.view(np.uint32), ref_lp.view(np.uint32))
    assert np.array_equal(b.logprob_valid, ~np.isnan(ref_lp))
    assert np.array_equal(b.action_positions(), np.flatnonzero(ref_mask))
    full = b.logprobs_full()
    assert full.shape == b.tokens.shape
    assert np.array_equal(full.view(np.uint32), np.concatenate([t.action_logprobs for t in trajs]).view(np.uint32))
    codes = {"prompt": 0, "action": 1, "observation": 2}
    assert b.span_kind.tolist() == [codes[s.kind] for t in trajs for s in t.spans]
    assert b.span_start.tolist() == [s.start for t in trajs for s in t.spans]
    assert b.span_end.tolist() == [s.end for t in trajs for s in t.spans]
    assert np.array_equal(b.reward, [np.nan if t.reward is None else t.reward for t in trajs], equal_nan=True)


def test_action_mask_matches_reference_on_random_layouts(make_trajectory: Any) -> None:
    rng = np.random.default_rng(11)
    for trial in range(20):
        trajs = [make_trajectory(rng, trajectory_id=f"m{trial}-{i}", max_span_tokens=int(rng.integers(1, 30)),
                                 with_actions=bool(rng.random() < 0.8)) for i in range(int(rng.integers(1, 12)))]
        b = batch_from_table(trajectories_to_table(trajs))
        ref = np.concatenate([_reference_action_mask(t.spans, len(t.tokens)) for t in trajs])
        assert np.array_equal(b.action_mask(), ref), trial
        assert np.array_equal(b.action_positions(), np.flatnonzero(ref)), trial


def test_tokens_and_logprobs_are_zero_copy(tmp_store: str, make_trajectory: Any) -> None:
    _fill(tmp_store, make_trajectory)
    b = next(iter(iter_batches(tmp_store)))
    for name, arr in (("tokens", b.tokens), ("action_logprobs", b.logprobs)):
        values = b.table.column(name).chunk(0).values
        buf = np.frombuffer(values.buffers()[1], dtype=np.uint8)
        assert np.shares_memory(arr, buf), f"{name} was copied"
        assert not arr.flags.owndata


@pytest.mark.parametrize("readahead", [0, 2])
def test_batches_follow_row_groups_one_at_a_time(tmp_store: str, make_trajectory: Any,
                                                 monkeypatch: pytest.MonkeyPatch, readahead: int) -> None:
    import trajstore.reader.row_groups as row_groups

    monkeypatch.setattr(row_groups, "READAHEAD_ROW_GROUPS", readahead)
    trajs = _fill(tmp_store, make_trajectory, n=80, row_group_target_mb=0.02)
    shard = open_store(tmp_store).list_shards(strict=True)[0]
    md = pq.read_metadata(shard.path)
    assert md.num_row_groups >= 5
    rg_rows = [md.row_group(i).num_rows for i in range(md.num_row_groups)]

    reads = count_row_group_reads(monkeypatch)
    it = iter_batches(tmp_store, strict=True)
    def decoded(count: int) -> list[int]:  # what has been read once `count` reads started (worker threads)
        deadline = time.monotonic() + 120  # bounds a hang
        while len(reads) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)  # and no more after a moment (a chance for a reader that reads too far ahead)
        return sorted(reads)

    first = next(it)
    # lazily: while the caller holds row group 0, only `readahead` following ones are decoded
    assert decoded(readahead + 1) == list(range(readahead + 1))
    assert (first.row_group, len(first)) == (0, rg_rows[0])
    second = next(it)
    assert decoded(readahead + 2) == list(range(readahead + 2))
    rest = [second, *it]
    assert sorted(reads) == list(range(md.num_row_groups))  # each row group decoded once
    assert [len(b) for b in [first, *rest]] == rg_rows
    assert [t for b in [first, *rest] for t in b.trajectory_ids] == [t.trajectory_id for t in trajs]
    # Each batch holds only its own row group's tokens.
    assert max(len(b.tokens) for b in [first, *rest]) < sum(len(t.tokens) for t in trajs) / 2


def test_dedupe_across_batches(tmp_store: str, make_trajectory: Any) -> None:
    trajs = _fill(tmp_store, make_trajectory, n=10, seed=4)
    _fill(tmp_store, make_trajectory, n=10, seed=4)  # the same ids again, a later shard
    ids = [t for b in iter_batches(tmp_store) for t in b.trajectory_ids]
    assert ids == [t.trajectory_id for t in trajs]
    assert len([t for b in iter_batches(tmp_store, dedupe=False) for t in b.trajectory_ids]) == 20
    assert read_trajectories(tmp_store).num_rows == 10


def test_sdk_store_reader_import_without_torch(tmp_store: str, make_trajectory: Any) -> None:
    _fill(tmp_store, make_trajectory, n=5)
    code = (
        "import sys, trajstore\n"
        "from trajstore import iter_batches, read_trajectories, scan_trajectories, StoreWriter, TrajectoryBuilder\n"
        "import trajstore.adapters, trajstore.validate, trajstore.convert\n"
        f"n = sum(len(b) for b in iter_batches({tmp_store!r}))\n"
        f"assert n == 5 and read_trajectories({tmp_store!r}).num_rows == 5\n"
        f"scan_trajectories({tmp_store!r}).collect()\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers'))\n"
        "assert not bad, bad\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"

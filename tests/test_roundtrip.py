"""SDK -> store -> reader is bit-exact, on a local store and on S3 (moto server).

Expected values come from the trajectories handed to the writer, never from the reader.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from trajstore import (
    SamplingParams,
    StoreWriter,
    Trajectory,
    TrajectoryBuilder,
    iter_batches,
    open_store,
    read_trajectories,
    scan_trajectories,
)
from trajstore.convert import table_to_trajectories
from trajstore.schema import SPAN_FIELDS, TRAJECTORY_SCHEMA


def _sdk_trajectories(make_trajectory: Any, n: int = 40) -> list[Trajectory]:
    """Random layouts plus hand-built SDK trajectories covering every optional field."""
    rng = np.random.default_rng(1234)
    out = [make_trajectory(rng, trajectory_id=f"rand-{i:03d}", with_logprobs=i % 4 != 0,
                           with_actions=i % 7 != 3) for i in range(n)]

    b = TrajectoryBuilder(trajectory_id="sdk-built:1", prompt_id="task-7", group_id="g1", model="pol",
                          tokenizer="tok", metadata={"env": "swe", "k": [1, 2]})
    b.add_prompt([1, 2, 3], role="system")
    # Log-probs chosen to exercise float32 bit patterns: -0.0, subnormal, and the lowest value the
    # store accepts (a float32 just above MIN_SAMPLED_LOGPROB = -1000).
    b.add_action([10, 11, 12, 13], np.array([-0.0, -1e-45, -999.99994, -0.5], np.float32),
                 policy_version=3, finish_reason="tool_calls",
                 sampling=SamplingParams(temperature=0.7, top_p=0.9, top_k=40, min_p=0.05, max_tokens=512,
                                         extra={"seed": 7}),
                 call_id="resp-1", tool_call_ids=["call_a", "call_b"])
    b.add_observation([20, 21], cause_id="call_a", truncated=True)
    b.add_action([2**31 - 1, 0], [-2.0, -0.25], policy_version=5, finish_reason="stop",
                 sampling={"temperature": 1.0})
    b.set_reward(0.75, raw={"passed": 3, "total": 4})
    out.append(b.finish("truncated", created_at=datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)))

    nb = TrajectoryBuilder(trajectory_id="sdk-no-action")
    nb.add_prompt([5, 6])
    nb.add_observation([7])
    out.append(nb.finish("failed"))
    return out


def _assert_bit_exact(expected: list[Trajectory], table: pa.Table, *, exact_schema: bool = True) -> None:
    if exact_schema:
        assert table.schema.equals(TRAJECTORY_SCHEMA, check_metadata=False)
    else:  # polars hands strings back as large_string; the column set and order still match
        assert table.column_names == TRAJECTORY_SCHEMA.names
    by_id = {t.trajectory_id: t for t in expected}
    ids = table.column("trajectory_id").to_pylist()
    assert sorted(ids) == sorted(by_id)
    rows = table.to_pylist()
    span_names = [f.name for f, _ in SPAN_FIELDS]
    for i, row in enumerate(rows):
        t = by_id[row["trajectory_id"]]
        tok = table.column("tokens")[i].values.to_numpy()
        assert tok.dtype == np.int32 and np.array_equal(tok, t.tokens)
        lp = table.column("action_logprobs")[i].values
        assert lp.type == pa.float32() and lp.null_count == 0
        # v2: exactly the action tokens' values, in token order, bit for bit (NaN where the SDK had none).
        act = np.zeros(len(t.tokens), dtype=bool)
        for s in t.spans:
            if s.kind == "action":
                act[s.start:s.end] = True
        want = t.action_logprobs[act]
        assert np.array_equal(lp.to_numpy().view(np.uint32), want.view(np.uint32))
        # Each action span's derived fields: where its slice starts and how many values it lacks.
        offset = 0
        for s, stored in zip(t.spans, row["spans"]):
            if s.kind == "action":
                n = s.end - s.start
                assert stored["logprob_start"] == offset
                assert stored["num_missing_logprobs"] == int(np.isnan(t.action_logprobs[s.start:s.end]).sum())
                offset += n
            else:
                assert stored["logprob_start"] is None and stored["num_missing_logprobs"] is None
        assert row["num_missing_logprobs"] == int(np.isnan(want).sum())
        assert row["spans"] == [{**{k: s.model_dump()[k] for k in span_names if k in s.model_dump()},
                                 "logprob_start": stored["logprob_start"],
                                 "num_missing_logprobs": stored["num_missing_logprobs"]}
                                for s, stored in zip(t.spans, row["spans"])]
        for name in ("prompt_id", "group_id", "source", "model", "tokenizer", "status", "reward_raw",
                     "token_source", "logprob_source"):
            assert row[name] == getattr(t, name), name
        assert row["created_at"] == t.created_at
        if t.reward is None:
            assert row["reward"] is None
        else:
            assert np.float64(row["reward"]).tobytes() == np.float64(t.reward).tobytes()
        assert (json.loads(row["metadata"]) if row["metadata"] else {}) == t.metadata
        versions = [s.policy_version for s in t.spans if s.kind == "action" and s.policy_version is not None]
        assert row["min_policy_version"] == (min(versions) if versions else None)
        assert row["max_policy_version"] == (max(versions) if versions else None)
        n_act = sum(s.end - s.start for s in t.spans if s.kind == "action")
        assert row["num_action_tokens"] == n_act
        assert row["trainable"] == (n_act > 0)
        assert row["num_tokens"] == len(t.tokens)


def _roundtrip(uri: str, storage_options: dict[str, Any] | None, trajs: list[Trajectory]) -> None:
    with StoreWriter(uri, storage_options=storage_options, flush_rows=9, flush_seconds=None) as w:
        for t in trajs:
            w.write(t)
    assert w.rows_written == len(trajs)
    assert len(w.shards_written) == -(-len(trajs) // 9)

    table = read_trajectories(uri, storage_options=storage_options, strict=True)
    _assert_bit_exact(trajs, table)

    # Arrival order: shards sort by write time, rows keep write order inside a shard.
    assert table.column("trajectory_id").to_pylist() == [t.trajectory_id for t in trajs]

    # Back to SDK models: equal field by field (NaN == NaN for logprobs).
    back = {t.trajectory_id: t for t in table_to_trajectories(table)}
    for t in trajs:
        b = back[t.trajectory_id]
        assert b.model_dump(exclude={"tokens", "action_logprobs"}) == t.model_dump(exclude={"tokens", "action_logprobs"})
        assert np.array_equal(b.action_logprobs, t.action_logprobs, equal_nan=True)

    # The lazy reader sees the same data.
    lazy = scan_trajectories(uri, storage_options=storage_options, strict=True).collect()
    _assert_bit_exact(trajs, lazy.to_arrow(), exact_schema=False)

    # The streaming reader hands the same tokens, log-probs and versions as flat arrays.
    by_id = {t.trajectory_id: t for t in trajs}
    seen = []
    for batch in iter_batches(uri, storage_options=storage_options, strict=True):
        full, positions = batch.logprobs_full(), batch.action_positions()
        for j, tid in enumerate(batch.trajectory_ids):
            t = by_id[tid]
            a, b = batch.token_offsets[j], batch.token_offsets[j + 1]
            assert np.array_equal(batch.tokens[a:b], t.tokens)
            # Action-aligned flat log-probs, and the full-length view, both bit-exact.
            act = np.zeros(len(t.tokens), dtype=bool)
            for s in t.spans:
                if s.kind == "action":
                    act[s.start:s.end] = True
            la, lb = batch.logprob_offsets[j], batch.logprob_offsets[j + 1]
            assert np.array_equal(batch.logprobs[la:lb].view(np.uint32), t.action_logprobs[act].view(np.uint32))
            assert np.array_equal(batch.logprob_valid[la:lb], ~np.isnan(t.action_logprobs[act]))
            assert np.array_equal(full[a:b].view(np.uint32), t.action_logprobs.view(np.uint32))
            assert np.array_equal(batch.tokens[positions[la:lb]], t.tokens[act])
            s0, s1 = batch.span_offsets[j], batch.span_offsets[j + 1]
            assert batch.span_policy_version[s0:s1].tolist() == [
                -1 if s.policy_version is None else s.policy_version for s in t.spans]
            seen.append(tid)
    assert seen == [t.trajectory_id for t in trajs]


def test_roundtrip_local_bit_exact(tmp_store: str, make_trajectory: Any) -> None:
    _roundtrip(tmp_store, None, _sdk_trajectories(make_trajectory))


@pytest.mark.s3
def test_roundtrip_s3_bit_exact(s3_store_uri: tuple[str, dict[str, Any]], make_trajectory: Any) -> None:
    uri, opts = s3_store_uri
    _roundtrip(uri, opts, _sdk_trajectories(make_trajectory))
    # Shards really are objects in the bucket, not a local directory named "s3:".
    store = open_store(uri, storage_options=opts)
    assert not store.is_local
    assert all(p.endswith(".parquet") for p, _ in store.shard_paths())

"""trajstore/convert.py: the schema-v2 table layout (action-aligned log-probs, missing engine
log-probs as NaN counted per span), written out by hand (arithmetic in comments)."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

from tests.helpers.trajectories import hand_built_pair
from trajstore import iter_batches, open_store, read_trajectories
from trajstore.convert import trajectories_to_table

NAN = math.nan


def test_v2_layout_by_hand(tmp_store: str) -> None:
    h1, h2 = hand_built_pair()
    open_store(tmp_store).write_table(trajectories_to_table([h1, h2]))
    t = read_trajectories(tmp_store, strict=True)
    assert t.schema.field("action_logprobs").type == pa.large_list(pa.field("item", pa.float32(), nullable=False))
    lp = t.column("action_logprobs").combine_chunks()
    assert lp.values.null_count == 0
    got = [np.asarray(x, np.float32) for x in lp.to_pylist()]
    np.testing.assert_array_equal(got[0], np.array([-0.5, NAN, -0.25, -1.0], np.float32))
    np.testing.assert_array_equal(got[1], np.array([NAN, NAN], np.float32))
    assert t.column("num_missing_logprobs").to_pylist() == [1, 2]
    assert t.column("logprob_source").to_pylist() == ["engine", "none"]
    spans = t.column("spans").to_pylist()
    assert [(s["kind"], s["logprob_start"], s["num_missing_logprobs"]) for s in spans[0]] == [
        ("prompt", None, None), ("action", 0, 1), ("observation", None, None), ("action", 3, 0)]
    assert [(s["kind"], s["logprob_start"], s["num_missing_logprobs"]) for s in spans[1]] == [
        ("prompt", None, None), ("action", 0, 2)]

    (batch,) = list(iter_batches(tmp_store, strict=True))
    assert batch.logprob_offsets.tolist() == [0, 4, 6]
    assert batch.logprob_valid.tolist() == [True, False, True, True, False, False]
    # flat token positions of action tokens: h1 tokens 0..6 -> actions at 2,3,4 and 6; h2 starts at 7 -> 8, 9
    assert batch.action_positions().tolist() == [2, 3, 4, 6, 8, 9]
    full = batch.logprobs_full()
    np.testing.assert_array_equal(
        full, np.array([NAN, NAN, -0.5, NAN, -0.25, NAN, -1.0, NAN, NAN, NAN], np.float32))


def test_engine_action_token_without_logprob_is_stored_as_missing_not_refused() -> None:
    # Item 5 of the ingest issue: a token whose engine gave no log-prob is kept, marked, counted.
    h1, _ = hand_built_pair()
    assert h1.logprob_source == "engine"
    assert np.isnan(h1.action_logprobs[3]) and h1.action_logprobs[2] == np.float32(-0.5)

"""trajstore.sampling: which action spans' log-probs the trainer can reproduce (modes against the
sampling parameters, request changes read from sampling_params), the effective parameters it
applies, and the vectorised form over stored spans (older shards without logprob_mode included)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from trajstore import TrajectoryBuilder
from trajstore.convert import trajectories_to_table
from trajstore.models import SamplingParams
from trajstore.sampling import (
    REASON_CODES,
    REFUSALS,
    REMEDIES,
    effective_sampling,
    request_refusal,
    span_refusal,
    span_sampling,
    trajectory_refusals,
)

QWEN = {"temperature": 0.7, "top_p": 0.8, "top_k": 20}


@pytest.mark.parametrize("mode", [None, "processed"])
@pytest.mark.parametrize("params", [{}, {"temperature": 0.7}, QWEN, {"min_p": 0.05}, {"temperature": 0.0, "top_k": 5}])
def test_processed_or_unrecorded_log_probs_are_reproducible(mode, params):
    assert span_refusal(mode, **params) is None


@pytest.mark.parametrize(("mode", "params", "reason"), [
    ("raw", {"temperature": 0.7}, "raw_logprobs"),
    ("raw", {"top_p": 0.95}, "raw_logprobs"),
    ("raw", {"top_k": 50}, "raw_logprobs"),
    ("raw", {"min_p": 0.1}, "raw_logprobs"),
    ("raw", {"temperature": 1.0}, None),
    ("raw", {"temperature": 1.0, "top_k": -1, "top_p": 1.0, "min_p": 0.0}, None),  # disabled values
    ("raw", {"temperature": 0.0, "top_p": 0.5}, None),  # greedy: every engine reports the raw log-softmax
    ("tempered", {"temperature": 0.7}, None),
    ("tempered", {"temperature": 0.7, "top_p": 0.8}, "tempered_logprobs"),
    ("processed_logits", {}, "unknown_logprob_mode"),
])
def test_modes_against_sampling_parameters(mode, params, reason):
    assert span_refusal(mode, **params) == reason


@pytest.mark.parametrize(("extra", "reason"), [
    ({"presence_penalty": 0.5}, "penalty"), ({"frequency_penalty": -0.1}, "penalty"),
    ({"repetition_penalty": 1.1}, "penalty"), ({"repetition_penalty": 1.0, "presence_penalty": 0}, None),
    ({"logit_bias": {"50256": -100}}, "logit_bias"), ({"logit_bias": {}}, None),
    ({"allowed_token_ids": [1, 2]}, "allowed_tokens"), ({"bad_words": ["x"]}, "bad_words"),
    ({"min_tokens": 4}, "min_tokens"), ({"min_tokens": 0}, None),
    ({"guided_json": {"type": "object"}}, "grammar"), ({"structured_outputs": {"regex": "a+"}}, "grammar"),
    ({"response_format": {"type": "json_schema", "json_schema": {}}}, "grammar"),
    ({"response_format": {"type": "text"}}, None), ({"tool_choice": "required"}, "grammar"),
    ({"tool_choice": {"type": "function", "function": {"name": "f"}}}, "grammar"), ({"tool_choice": "auto"}, None),
    ({"ebnf": "root ::= 'a'"}, "grammar"), ({"typical_p": 0.9}, "logits_processor"), ({"typical_p": 1.0}, None),
    ({"custom_logit_processor": "x"}, "logits_processor"), ({"seed": 3, "stop": ["\n"], "n": 1}, None),
])
def test_request_changes_read_from_sampling_params(extra, reason):
    # as the proxy stores them (SamplingParams.extra) and as a flat JSON object
    nested = SamplingParams(temperature=1.0, extra=extra).to_json()
    assert request_refusal(nested) == reason
    assert request_refusal(json.dumps(extra)) == reason
    assert span_refusal("processed", 1.0, sampling_params=nested) == reason


def test_unreadable_sampling_params_say_nothing():
    assert request_refusal(None) is None and request_refusal("not json") is None and request_refusal("[1]") is None


def test_every_reason_has_words_and_a_remedy():
    assert set(REFUSALS) == set(REMEDIES) == set(REASON_CODES)
    assert "--logprobs-mode processed_logprobs" in REMEDIES["raw_logprobs"]


def test_effective_sampling():
    assert effective_sampling(None, None) == (1.0, 0, 1.0, 0.0)
    assert effective_sampling("processed", 0.7, 20, 0.8, 0.05) == (0.7, 20, 0.8, 0.05)
    assert effective_sampling("processed", 0.7, -1, 1.0, 0.0) == (0.7, 0, 1.0, 0.0)
    assert effective_sampling("processed", 0.0, 20, 0.8) == (1.0, 0, 1.0, 0.0)  # greedy
    assert effective_sampling("tempered", 0.7) == (0.7, 0, 1.0, 0.0)
    assert effective_sampling("raw", 1.0) == (1.0, 0, 1.0, 0.0)


def _trajectory(tid: str, calls: list[tuple[dict, str | None]]):
    b = TrajectoryBuilder(trajectory_id=tid, tokenizer="t")
    b.add_prompt([1, 2])
    for sampling, mode in calls:
        b.add_action([3, 4], [-0.5, -0.5], policy_version=0, sampling=sampling, logprob_mode=mode)
        b.add_observation([5])
    b.set_reward(1.0)
    return b.finish()


def test_vectorised_over_stored_spans_with_an_older_shard():
    trajs = [
        _trajectory("ok", [(QWEN, "processed"), ({"temperature": 0.7}, None)]),
        _trajectory("raw", [({"temperature": 1.0}, "raw"), (QWEN, "raw"), ({"top_p": 0.9}, "raw")]),
        _trajectory("pen", [({"temperature": 1.0, "extra": {"presence_penalty": 1.0}}, "processed")]),
    ]
    table = trajectories_to_table(trajs)
    assert trajectory_refusals(table.column("spans")) == [None, ("raw_logprobs", [3, 5]), ("penalty", [1])]
    codes, params = span_sampling(pa.concat_arrays([c.values for c in table.column("spans").chunks]))
    assert codes.tolist() == [-1, -1, -1, -1, -1] + [-1, -1, -1, 0, -1, 0, -1] + [-1, REASON_CODES["penalty"], -1]
    assert np.allclose(params.temperature[:5], [1, 0.7, 1, 0.7, 1]) and params.top_k[:5].tolist() == [0, 20, 0, 0, 0]
    assert np.allclose(params.top_p[:5], [1, 0.8, 1, 1, 1])
    # a v3 shard's spans have no logprob_mode: every span is trained as processed
    v3 = trajectories_to_table(trajs, version=3)
    assert trajectory_refusals(v3.column("spans")) == [None, None, ("penalty", [1])]

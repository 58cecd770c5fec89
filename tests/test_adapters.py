"""trajstore/adapters.py: rollout-engine adapters: exact token ids and the sampled token's log-prob,
looked up by id (a missing one, or vLLM's -9999 stand-in, is missing, never a log-prob)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from trajstore import AdapterError, TrajectoryBuilder, action_from_openai_completion, action_from_sglang_generate


def _chat_response(token_ids: list[int], content: list[dict[str, Any]] | None, **choice: Any) -> dict[str, Any]:
    ch: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": "Hello there"},
                          "finish_reason": "stop", "token_ids": token_ids}
    if content is not None:
        ch["logprobs"] = {"content": content}
    ch.update(choice)
    return {"id": "chatcmpl-1", "choices": [ch], "prompt_token_ids": [1, 2, 3]}


def test_vllm_chat_completion_with_token_id_strings() -> None:
    # vLLM with return_tokens_as_token_ids=True spells each token "token_id:<id>".
    content = [
        {"token": "token_id:15", "logprob": -0.25, "top_logprobs": []},
        {"token": "token_id:7", "logprob": -1.5, "top_logprobs": []},
        {"token": "token_id:99", "logprob": -0.0, "top_logprobs": []},
    ]
    call = action_from_openai_completion(
        _chat_response([15, 7, 99], content), request={"temperature": 0.8, "top_p": 0.95, "max_tokens": 64, "seed": 3})
    assert call.token_ids.dtype == np.int32 and call.token_ids.tolist() == [15, 7, 99]
    assert call.logprobs.dtype == np.float32 and call.logprobs.tolist() == [-0.25, -1.5, -0.0]
    assert call.prompt_token_ids.tolist() == [1, 2, 3]
    assert call.finish_reason == "stop" and call.call_id == "chatcmpl-1"
    assert call.sampling.temperature == 0.8 and call.sampling.top_p == 0.95 and call.sampling.max_tokens == 64
    assert call.sampling.extra == {"seed": 3}


def test_every_request_field_that_shapes_the_distribution_is_recorded_and_judged() -> None:
    """What the request changed (penalties, logit bias, allowed ids, grammars) is stored with the
    span, so that the trainer's admission can refuse log-probs it cannot reproduce; fields that do
    not shape the distribution (messages, tools) are not copied."""
    from trajstore.sampling import request_refusal

    resp = _chat_response([15], [{"token": "token_id:15", "logprob": -0.25}])
    base = {"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}], "min_p": 0.05}
    cases = {"presence_penalty": (0.5, "penalty"), "logit_bias": ({"15": 3}, "logit_bias"),
             "allowed_token_ids": ([15], "allowed_tokens"), "min_tokens": (4, "min_tokens"),
             "response_format": ({"type": "json_object"}, "grammar"), "tool_choice": ("required", "grammar"),
             "guided_regex": ("a+", "grammar"), "typical_p": (0.9, "logits_processor")}
    for key, (value, reason) in cases.items():
        sp = action_from_openai_completion(resp, request={**base, key: value}).sampling
        assert sp.min_p == 0.05 and sp.extra == {key: value}, key
        assert request_refusal(sp.to_json()) == reason, key
    sp = action_from_openai_completion(resp, request={**base, "tool_choice": "auto", "logit_bias": None}).sampling
    assert sp.extra == {"tool_choice": "auto"} and request_refusal(sp.to_json()) is None
    sg = action_from_sglang_generate({"text": "x", "output_ids": [15], "meta_info": {
        "output_token_logprobs": [[-0.25, 15, None]], "finish_reason": {"type": "stop"}}},
        request={"sampling_params": {"json_schema": "{}"}, "custom_logit_processor": "p"}).sampling
    assert sg.extra == {"json_schema": "{}", "custom_logit_processor": "p"}


def test_logprob_looked_up_by_sampled_id_never_by_top_k_position() -> None:
    # Position 1: the entry's own token is 8 (not the sampled 7); the sampled id 7 sits at the
    # *second* place of top_logprobs with -2.0. Taking the entry's logprob (-0.1) or the first
    # top-k entry (-0.1) would be wrong; the right value is -2.0.
    content = [
        {"token": "token_id:15", "logprob": -0.25, "top_logprobs": [{"token": "token_id:15", "logprob": -0.25}]},
        {"token": "token_id:8", "logprob": -0.1,
         "top_logprobs": [{"token": "token_id:8", "logprob": -0.1}, {"token": "token_id:7", "logprob": -2.0}]},
    ]
    call = action_from_openai_completion(_chat_response([15, 7], content))
    assert call.logprobs.tolist() == [-0.25, -2.0]


def test_sampled_id_missing_from_top_logprobs_is_an_error() -> None:
    content = [{"token": "token_id:8", "logprob": -0.1, "top_logprobs": [{"token": "token_id:9", "logprob": -3.0}]}]
    with pytest.raises(AdapterError, match=r"logprobs.content\[0\] is for token 8 but the sampled token id is 7"):
        action_from_openai_completion(_chat_response([7], content))


def test_logprob_count_mismatch_is_an_error() -> None:
    content = [{"token": "token_id:1", "logprob": -0.1}]
    with pytest.raises(AdapterError, match="1 entries for 2 token ids"):
        action_from_openai_completion(_chat_response([1, 2], content))


def test_vllm_text_completion_format() -> None:
    resp = {"id": "cmpl-9", "choices": [{
        "index": 0, "text": " world", "finish_reason": "length", "token_ids": [42, 43],
        "logprobs": {"tokens": ["token_id:42", "token_id:43"], "token_logprobs": [-0.5, -0.75],
                     "top_logprobs": [{"token_id:42": -0.5}, {"token_id:43": -0.75}]},
    }]}
    call = action_from_openai_completion(resp)
    assert call.token_ids.tolist() == [42, 43]
    assert call.logprobs.tolist() == [-0.5, -0.75]
    assert call.finish_reason == "length" and call.text == " world"
    resp["choices"][0]["logprobs"]["tokens"][1] = "token_id:44"
    with pytest.raises(AdapterError, match=r"logprobs.tokens\[1\] is 'token_id:44' but the sampled token id is 43"):
        action_from_openai_completion(resp)


def test_text_without_token_ids_is_an_error_not_dropped() -> None:
    resp = _chat_response([1], None)
    del resp["choices"][0]["token_ids"]
    with pytest.raises(AdapterError, match="generated output but no token_ids.*return_token_ids"):
        action_from_openai_completion(resp)
    tool_only = {"choices": [{"message": {"content": None, "tool_calls": [{"id": "c1"}]}, "finish_reason": "tool_calls"}]}
    with pytest.raises(AdapterError, match="generated output but no token_ids"):
        action_from_openai_completion(tool_only)
    with pytest.raises(AdapterError, match="no choice 1"):
        action_from_openai_completion(_chat_response([1], None), choice_index=1)


def test_chat_completion_without_logprobs_gives_nan_and_tool_call_ids() -> None:
    resp = _chat_response([5, 6], None, message={"role": "assistant", "content": None,
                                                  "tool_calls": [{"id": "call_x", "type": "function"}]})
    call = action_from_openai_completion(resp)
    assert np.isnan(call.logprobs).all() and call.tool_call_ids == ["call_x"]


def test_sglang_generate_output_token_logprobs() -> None:
    resp = {"text": "ok!", "output_ids": [300, 301, 302],
            "meta_info": {"id": "sg-1", "finish_reason": {"type": "stop", "matched": 2},
                          "output_token_logprobs": [[-0.5, 300, "ok"], [-0.125, 301, "!"], [-3.0, 302, None]]}}
    call = action_from_sglang_generate(resp, request={"sampling_params": {"temperature": 0.6, "top_k": 20,
                                                                          "max_new_tokens": 128}})
    assert call.token_ids.tolist() == [300, 301, 302]
    assert call.logprobs.tolist() == [-0.5, -0.125, -3.0]
    assert call.finish_reason == "stop" and call.call_id == "sg-1"
    assert call.sampling.temperature == 0.6 and call.sampling.top_k == 20 and call.sampling.max_tokens == 128
    resp["output_ids"] = [300, 301, 303]
    with pytest.raises(AdapterError, match="differ from output_ids"):
        action_from_sglang_generate(resp)


def test_sglang_text_without_ids_is_an_error() -> None:
    with pytest.raises(AdapterError, match="text but neither meta_info.output_token_logprobs nor output_ids"):
        action_from_sglang_generate({"text": "hello", "meta_info": {"finish_reason": {"type": "stop"}}})


def test_adapter_calls_build_a_valid_trajectory() -> None:
    content = [{"token": "token_id:11", "logprob": -0.5}, {"token": "token_id:12", "logprob": -0.25}]
    b = TrajectoryBuilder(trajectory_id="adapt-1")
    b.add_prompt([1, 2, 3])
    span = b.add_action_call(action_from_openai_completion(_chat_response([11, 12], content),
                                                          request={"temperature": 1.0}), policy_version=4)
    b.add_observation([9])
    sg = action_from_sglang_generate({"meta_info": {"output_token_logprobs": [[-1.0, 13, "x"]]}})
    b.add_action_call(sg, policy_version=5)
    t = b.finish()
    assert t.tokens.tolist() == [1, 2, 3, 11, 12, 9, 13]
    assert np.array_equal(t.action_logprobs, np.array([np.nan] * 3 + [-0.5, -0.25, np.nan, -1.0], np.float32), equal_nan=True)
    assert (span.start, span.end, span.policy_version, span.temperature) == (3, 5, 4, 1.0)
    assert span.call_id == "chatcmpl-1" and span.finish_reason == "stop"


@pytest.mark.parametrize(("response", "fragment"), [
    ({"choices": [{"token_ids": [1.5, 2]}]}, "token_ids[0] must be an integer token id, got 1.5"),
    ({"choices": [{"token_ids": ["1", "2"]}]}, "must be an integer token id, got '1'"),
    ({"choices": [{"token_ids": [[1], [2]]}]}, "must be an integer token id, got [1]"),
    ({"choices": [{"token_ids": [2**40]}]}, "is not a token id in [0, 2**31)"),
    ({"choices": [{"token_ids": [-3]}]}, "is not a token id"),
    ({"choices": [{"token_ids": 5}]}, "must be a list of token ids"),
    ({"choices": "x"}, "choices must be a list"),
    ({"choices": [None]}, "malformed OpenAI/vLLM completion response"),
    ({"choices": [{"token_ids": [1, 2], "logprobs": {"content": [None, None]}}]}, "logprobs.content[0] is NoneType, not an object"),
    ({"choices": [{"token_ids": [1], "message": {"tool_calls": "x"}}]}, "malformed"),
])
def test_openai_malformed_responses_raise_adapter_error(response: dict, fragment: str) -> None:
    # Floats were truncated to ints and huge ids wrapped silently; wrong shapes were raw tracebacks.
    with pytest.raises(AdapterError) as ei:
        action_from_openai_completion(response)
    assert fragment in str(ei.value)


@pytest.mark.parametrize(("response", "fragment"), [
    ({"output_ids": [1, 2], "meta_info": {"output_token_logprobs": [-1, -2]}}, "malformed SGLang"),
    ({"output_ids": [1, 2], "meta_info": {"output_token_logprobs": [None, None]}}, "malformed SGLang"),
    ({"output_ids": "abc"}, "output_ids must be a list of token ids"),
    ({"meta_info": {"output_token_logprobs": [[-1.0, 1.7, None]]}}, "must be an integer token id, got 1.7"),
    ([{"output_ids": [1]}], "malformed SGLang"),
])
def test_sglang_malformed_responses_raise_adapter_error(response: Any, fragment: str) -> None:
    with pytest.raises(AdapterError) as ei:
        action_from_sglang_generate(response)
    assert fragment in str(ei.value)


# reported: ../shared/fixtures/reported/vllm-9999-sentinel
def test_vllm_9999_sentinel_is_missing_never_a_logprob():
    # vllm-9999-sentinel/repro.py: the 2nd of 3 sampled tokens carries -9999.0, vLLM's clamp of -inf.
    resp = {"id": "chatcmpl-1", "prompt_token_ids": [1, 2, 3],
            "choices": [{"index": 0, "finish_reason": "stop", "token_ids": [10, 11, 12],
                         "message": {"role": "assistant", "content": "yes"},
                         "logprobs": {"content": [
                             {"token": "y", "logprob": -0.1, "top_logprobs": []},
                             {"token": "es", "logprob": -9999.0, "top_logprobs": []},
                             {"token": "<eos>", "logprob": -0.01, "top_logprobs": []}]}}]}
    call = action_from_openai_completion(resp)
    assert call.token_ids.tolist() == [10, 11, 12]
    assert call.logprobs[0] == np.float32(-0.1) and math.isnan(call.logprobs[1]) and call.logprobs[2] == np.float32(-0.01)
    assert call.missing_logprobs.tolist() == [1]
    # The same family: a null, a NaN/-inf (Python's json reads -Infinity) and anything below the clamp.
    for stand_in in (None, float("nan"), float("-inf"), -1e30):
        resp["choices"][0]["logprobs"]["content"][1]["logprob"] = stand_in
        assert action_from_openai_completion(resp).missing_logprobs.tolist() == [1]
    sg = action_from_sglang_generate({"meta_info": {"output_token_logprobs": [[-0.5, 4, "a"], [None, 5, "b"],
                                                                              [-9999.0, 6, "c"]]}})
    assert sg.token_ids.tolist() == [4, 5, 6] and sg.missing_logprobs.tolist() == [1, 2]
    # Text completions: the first token_logprobs entry is null in echo mode.
    tc = action_from_openai_completion({"choices": [{"text": "ab", "token_ids": [7, 8],
                                                     "logprobs": {"token_logprobs": [None, -0.25]}}]})
    assert tc.missing_logprobs.tolist() == [0] and tc.logprobs[1] == np.float32(-0.25)


# reported: ../shared/fixtures/reported/vllm-9999-sentinel
def test_vllm_9999_sentinel_a_logprob_that_is_not_a_number_names_the_token():
    resp = {"choices": [{"token_ids": [1, 2], "logprobs": {"content": [{"logprob": -0.1}, {"logprob": "-0.2"}]}}]}
    with pytest.raises(AdapterError, match=r"logprobs.content\[1\].logprob is '-0.2', not a number"):
        action_from_openai_completion(resp)
    resp["choices"][0]["logprobs"]["content"][1]["logprob"] = 0.5
    with pytest.raises(AdapterError, match=r"logprobs.content\[1\].logprob is 0.5, not a log-prob"):
        action_from_openai_completion(resp)


# reported: ../shared/fixtures/reported/ids-in-logprob-entries
def test_ids_in_logprob_entries():
    # ids-in-logprob-entries/repro.py: no choice token_ids; every entry spells its id.
    def resp(entries):
        return {"id": "c1", "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant", "content": "hi"},
                                         "logprobs": {"content": entries}}]}

    by_string = [{"token": f"token_id:{i}", "logprob": -0.5, "top_logprobs": []} for i in (42, 7, 2)]
    by_field = [{"token": "x", "token_id": i, "logprob": -0.5, "top_logprobs": []} for i in (42, 7, 2)]
    for entries in (by_string, by_field):
        c = action_from_openai_completion(resp(entries))
        assert c.token_ids.tolist() == [42, 7, 2] and c.logprobs.tolist() == [-0.5, -0.5, -0.5]
    # text completions spell them in logprobs.tokens
    c = action_from_openai_completion({"choices": [{"text": "hi", "logprobs": {
        "tokens": ["token_id:42", "token_id:7"], "token_logprobs": [-0.5, -0.25]}}]})
    assert c.token_ids.tolist() == [42, 7] and c.logprobs.tolist() == [-0.5, -0.25]
    # one entry without an id: refused, naming it (the ids would be incomplete)
    with pytest.raises(AdapterError, match=r"logprobs.content\[1\] names no token id"):
        action_from_openai_completion(resp([by_string[0], {"token": "x", "logprob": -0.5}, by_string[2]]))
    # a missing log-prob is reported as missing, not as an id mismatch
    entry = [{"token": "token_id:42", "logprob": None, "top_logprobs": []}]
    assert math.isnan(action_from_openai_completion(resp(entry)).logprobs[0])

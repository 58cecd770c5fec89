"""Write trajectories from a harness with the writer SDK, then read them back.

Run: python examples/write_with_sdk.py [--store STORE]
     (default: a new scratch directory under the system temp dir, printed first)

The responses below have the shape vLLM returns for a chat completion requested with
``return_token_ids: true, logprobs: true`` (and SGLang's /generate with ``return_logprob``);
a real harness passes the JSON it got from the engine. Every call is stamped with policy version 0
(the initial weights), as a new run's first rollouts are: a worker following a training run stamps
each call with the version its engine has loaded (``examples/rollout_worker.py``), so the trainer
sees staleness >= 0. The token ids and log-probs are made up: training on this store would mask
most tokens (SmolLM2 gives them other log-probs); train on what an engine sampled.
"""

from __future__ import annotations

import argparse
import tempfile

import trajstore
from trajstore import StoreWriter, TrajectoryBuilder, action_from_openai_completion, action_from_sglang_generate


def fake_vllm_response(token_ids: list[int], logprobs: list[float], call_id: str) -> dict:
    return {
        "id": call_id,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": "ls -la",
                        "tool_calls": [{"id": f"{call_id}-tool0", "type": "function",
                                        "function": {"name": "bash", "arguments": "{\"cmd\": \"ls\"}"}}]},
            "finish_reason": "tool_calls",
            "token_ids": token_ids,
            "logprobs": {"content": [{"token": f"token_id:{t}", "logprob": lp, "top_logprobs": []}
                                     for t, lp in zip(token_ids, logprobs)]},
        }],
    }


def main(store_uri: str) -> None:
    request = {"temperature": 1.0, "top_p": 1.0, "max_tokens": 256}
    with StoreWriter(store_uri, flush_rows=100) as writer:
        for episode in range(3):
            b = TrajectoryBuilder(trajectory_id=f"example-{episode}", prompt_id="task-1",
                                  model="my-policy", tokenizer="HuggingFaceTB/SmolLM2-135M-Instruct")
            b.add_prompt([1, 9690, 198, 2683], role="user")                 # system + task, rendered
            call = action_from_openai_completion(
                fake_vllm_response([504, 3456, 2], [-0.12, -1.5, -0.01], f"chatcmpl-{episode}a"), request=request)
            b.add_action_call(call, policy_version=0)                        # the weights version that sampled it
            b.add_observation([1, 2684, 198, 42, 2], cause_id=call.tool_call_ids[0])  # tool output
            sg = action_from_sglang_generate({
                "text": "done", "meta_info": {"id": f"sg-{episode}", "finish_reason": {"type": "stop"},
                                              "output_token_logprobs": [[-0.3, 1249, None], [-0.05, 2, None]]}},
                request={"sampling_params": {"temperature": 1.0}})
            b.add_action_call(sg, policy_version=0)                          # (a reload mid-episode: a newer one)
            b.set_reward(1.0 if episode != 1 else 0.0, raw={"resolved": episode != 1})
            writer.write(b.finish(status="completed"))

    table = trajstore.read_trajectories(store_uri, columns=["num_action_tokens", "min_policy_version",
                                                            "max_policy_version", "reward"])
    for row in table.to_pylist():
        print(row)
    for batch in trajstore.iter_batches(store_uri):
        print("flat tokens:", batch.tokens.shape, "action tokens:", int(batch.action_mask().sum()))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", help="store URI (local directory or s3://...); default: a new scratch directory")
    args = ap.parse_args()
    store = args.store or tempfile.mkdtemp(prefix="trajstore-example-")
    print(f"store: {store}")
    main(store)

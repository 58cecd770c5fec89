"""Write a valid trajectory shard with plain pyarrow (no trajstore import), as a writer in another
language would with its Arrow library, then check it with ``traj validate``.

Run: python examples/write_plain_pyarrow.py [--out FILE.parquet]
     (default: a new file under the system temp dir, printed first)

The schema comes from ``schemas/trajectory.v4.arrow`` (an Arrow IPC schema message: Rust's
``arrow_ipc``, Go's ``ipc``, C++ and JS Arrow read it too); it carries the schema version in its
metadata, so the Parquet footer is stamped with it. You compute the derived columns yourself:
counts, min/max policy version, and each action span's ``logprob_start`` (action tokens before
it) and ``num_missing_logprobs``; ``traj validate`` checks every one of them. An action span's
``logprob_mode`` says which distribution its log-probs are of (``processed``: the one the token was
drawn from; see docs/sampling.md).
"""

from __future__ import annotations

import argparse
import datetime
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA_FILE = Path(__file__).resolve().parents[1] / "schemas" / "trajectory.v4.arrow"


def one_trajectory(tid: str, reward: float) -> dict:
    """System + task prompt (4 tokens), one model call (3 tokens, policy version 0), a tool result
    (2 tokens), a final call (2 tokens, version 1): 11 tokens, 5 of them actions."""
    span = {name: None for name in ("role", "policy_version", "call_id", "cause_id", "tool_call_ids", "finish_reason",
                                    "temperature", "top_p", "top_k", "min_p", "max_tokens", "sampling_params",
                                    "truncated", "logprob_start", "num_missing_logprobs", "policy_version_max",
                                    "logprob_mode")}
    spans = [
        {**span, "kind": "prompt", "start": 0, "end": 4, "role": "user"},
        {**span, "kind": "action", "start": 4, "end": 7, "role": "assistant", "policy_version": 0,
         "finish_reason": "tool_calls", "temperature": 1.0, "logprob_start": 0, "num_missing_logprobs": 0,
         "logprob_mode": "processed"},
        {**span, "kind": "observation", "start": 7, "end": 9, "role": "tool"},
        {**span, "kind": "action", "start": 9, "end": 11, "role": "assistant", "policy_version": 1,
         "finish_reason": "stop", "temperature": 1.0, "logprob_start": 3, "num_missing_logprobs": 0,
         "logprob_mode": "processed"},
    ]
    return {
        "trajectory_id": tid, "schema_version": 4, "prompt_id": "task-1", "group_id": None,
        "episode_id": tid, "parent_trajectory_id": None, "fork_point": None, "link_kind": None, "source": "my-harness/v1", "model": "my-policy",
        "tokenizer": "HuggingFaceTB/SmolLM2-135M-Instruct", "created_at": datetime.datetime.now(datetime.timezone.utc),
        "status": "completed", "reward": reward, "reward_raw": "true" if reward else "false",
        "token_source": "engine", "logprob_source": "engine", "trainable": True, "not_trainable_reason": None,
        "min_policy_version": 0, "max_policy_version": 1, "num_tokens": 11, "num_prompt_tokens": 4,
        "num_action_tokens": 5, "num_observation_tokens": 2, "num_actions": 2, "num_observations": 1,
        "num_missing_logprobs": 0, "tokens": [1, 9690, 198, 2683, 504, 3456, 2, 2684, 198, 1249, 2],
        "action_logprobs": [-0.12, -1.5, -0.01, -0.3, -0.05], "spans": spans, "metadata": '{"harness": "example"}',
    }


def main(out: str) -> int:
    schema = pa.ipc.read_schema(pa.memory_map(str(SCHEMA_FILE)))
    table = pa.Table.from_pylist([one_trajectory("plain-0", 1.0), one_trajectory("plain-1", 0.0)], schema=schema)
    pq.write_table(table, out, compression="zstd")
    print(f"wrote {table.num_rows} trajectories to {out}")
    traj = shutil.which("traj") or str(Path(sys.executable).parent / "traj")
    return subprocess.run([traj, "validate", out]).returncode


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None, help="Parquet file to write")
    a = p.parse_args()
    path = a.out or str(Path(tempfile.mkdtemp(prefix="trajstore-plain-")) / "trajectories.parquet")
    print(path)
    sys.exit(main(path))

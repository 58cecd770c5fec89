"""examples/mini_swe_agent/run_task.py end to end: the real mini-swe-agent (LiteLLM, its text-based
config, a local environment) through `traj proxy` to `traj serve` on a tiny random Llama. Each
model call mini made is one stored action span with the token ids and log-probs the server
sampled, and the episode carries the status and reward the wrapper posted.

mini-swe-agent is not a trajstore dependency (LiteLLM and friends, ~750 MB): the test runs the
wrapper with this interpreter when it has mini-swe-agent, else with ``MINISWEAGENT_PYTHON``, and
skips when neither has it (see examples/mini_swe_agent/README.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.proxy.conftest import start_proxy  # noqa: F401 - fixture: in-thread traj proxy
from tests.proxy.test_serve_e2e import TOKENIZER, samples, serve, session_rows, tokenizer  # noqa: F401 - fixtures

pytestmark = pytest.mark.slow

WRAPPER = Path(__file__).resolve().parents[2] / "examples" / "mini_swe_agent" / "run_task.py"
TASK = "Create a file hello.txt containing the word hi, then submit."
CHECK = "grep -q hi hello.txt"


def _fence(command: str) -> str:
    return f"THOUGHT: do it.\n\n```mswea_bash_command\n{command}\n```"


def _guided(command: str) -> str:
    """Request parameters that make the tiny model answer exactly this action (serve's guided_choice)."""
    return json.dumps({"extra_body": {"guided_choice": [_fence(command)], "seed": 0}})


@pytest.fixture(scope="module")
def mini_python() -> str:
    """An interpreter that has mini-swe-agent: this one, or $MINISWEAGENT_PYTHON."""
    other = os.environ.get("MINISWEAGENT_PYTHON")
    candidates = [sys.executable, *([other] if other else [])]
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('minisweagent') is None)"
    for py in candidates:
        if subprocess.run([py, "-c", probe], capture_output=True, check=False).returncode == 0:
            return py
    pytest.skip(f"mini-swe-agent is not importable in {sys.executable} and MINISWEAGENT_PYTHON is "
                f"{'not set' if len(candidates) == 1 else 'without it'}: pip install mini-swe-agent==2.4.6 into a "
                "separate venv and set MINISWEAGENT_PYTHON=<venv>/bin/python (examples/mini_swe_agent/README.md)")


CASES = {
    # name: (wrapper arguments, status, reward, model calls, trajectories)
    "submitted": (["--model-kwargs", _guided("echo hi > hello.txt && echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
                   "--check", CHECK], "completed", 1.0, 1, 1),
    # the step limit cuts it; the check still judges the state it left
    "step-limit": (["--model-kwargs", _guided("echo hi > hello.txt"), "--check", CHECK], "truncated", 1.0, 2, 1),
    # random tokens: two format errors, each dropped from mini's history, so each call starts a trajectory
    "format-errors": (["--model-kwargs", '{"extra_body": {"seed": 0}}'], "truncated", 0.0, 2, 2),
    # mini's default cost tracking raises after the first call (the reason the wrapper switches it off)
    "exception": (["--model-kwargs", '{"extra_body": {"seed": 0}}', "-c", "model.cost_tracking=default"],
                  "failed", None, 1, 1),
}


@pytest.mark.parametrize("case", list(CASES))
def test_mini_swe_agent_episode_is_recorded_with_its_reward(mini_python, serve, start_proxy,  # noqa: F811
                                                            tmp_path, case):
    args, status, reward, calls, parts = CASES[case]
    url, log = serve
    px = start_proxy(url, tokenizer=TOKENIZER)
    workdir = tmp_path / "work"
    workdir.mkdir()
    env = {**os.environ, "MSWEA_GLOBAL_CONFIG_DIR": str(tmp_path / "mini-config"), "MSWEA_SILENT_STARTUP": "1"}
    env.pop("LITELLM_LOCAL_MODEL_COST_MAP", None)  # the wrapper sets it
    r = subprocess.run([mini_python, str(WRAPPER), "--proxy", px.url, "--session", case, "--task", TASK,
                        "--workdir", str(workdir), "--step-limit", "2", "--max-tokens", "64",
                        "--traj-out", str(tmp_path / "mini.traj.json"), *args],
                       capture_output=True, text=True, timeout=600, env=env, check=False)
    assert r.returncode == 0, r.stderr[-4000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    saved = json.loads((tmp_path / "mini.traj.json").read_text())  # mini's own record, for the messages below
    transcript = [(m["role"], m["content"][:200]) for m in saved["messages"][2:]]
    assert out["mini_model_calls"] == calls and out["requested_status"] == status, transcript
    assert out["reward"] == reward
    fin = out["finish"]
    assert fin["status"] == status and len(fin["policy_versions"]) == calls and set(fin["policy_versions"]) == {0}

    rows = session_rows(str(tmp_path / "store"), case)
    assert sorted(row["trajectory_id"] for row in rows) == sorted(fin["trajectories"]) and len(rows) == parts
    sampled = samples(log)
    actions = 0
    for row in rows:
        assert row["status"] == status and row["reward"] == reward and row["token_source"] == "engine"
        meta = json.loads(row["metadata"])
        assert meta["mini_model_calls"] == calls and meta["calls"] == calls and meta["harness"] == "mini-swe-agent"
        lps = np.asarray(row["action_logprobs"], dtype=np.float32)
        for s in row["spans"]:
            if s["kind"] != "action":
                continue
            actions += 1
            rec = sampled[s["call_id"]]  # what the server sampled for this call, bit for bit
            assert row["tokens"][:s["start"]] == rec["prompt_token_ids"]
            assert row["tokens"][s["start"]:s["end"]] == rec["token_ids"]
            a = s["logprob_start"]
            np.testing.assert_array_equal(lps[a:a + s["end"] - s["start"]], np.asarray(rec["logprobs"], np.float32))
    assert actions == calls  # one action span per model call mini made
    if case == "step-limit":  # the command's output between the two calls is an observation span
        (row,) = rows
        assert [s["kind"] for s in row["spans"]] == ["prompt", "action", "observation", "action"]

"""Run ONE mini-swe-agent task through `traj proxy` and end its episode with a reward.

mini-swe-agent (https://github.com/SWE-agent/mini-swe-agent, tested with 2.4.6) talks to the
model through LiteLLM; every call goes to the proxy's session URL, which records it. mini never
tells the proxy that the episode is over, so this wrapper does: after the agent stops it computes
a reward and posts ``POST /s/<session>/finish {"status", "reward", "metadata"}``, then prints the
proxy's reply (trajectory ids, each action's policy version, token count) as one JSON line.

Run it with the Python that has mini-swe-agent installed (a separate venv; this file imports
nothing from trajstore), e.g.:

    /tmp/mini-venv/bin/python examples/mini_swe_agent/run_task.py \
        --proxy http://127.0.0.1:8100 --session demo-1 \
        --task "Create a file hello.txt containing hi" --check "grep -q hi hello.txt" \
        --step-limit 3 --max-tokens 64

Reward (``--check`` decides when given, as a test suite decides a SWE task):
    * ``--check CMD``: CMD runs in the work directory after the agent stops; reward 1.0 if it
      exits 0, else 0.0 (also for a truncated episode: the check judges the state it left);
    * no ``--check``: reward 1.0 if the agent submitted (exit status ``Submitted``), else 0.0;
    * an episode that crashed (status ``failed``) gets no reward (null): there is no verdict.

Status:
    * ``Submitted`` -> completed;
    * a limit -> truncated: ``LimitsExceeded`` (``--step-limit``, cost limit), ``TimeExceeded``, and
      ``RepeatedFormatError`` (``agent.max_consecutive_format_errors`` unparseable answers in a row: the
      policy's own failure, cut by a harness limit, so it is kept for training with its reward);
    * an exception out of the agent (LiteLLM / HTTP error, cost-tracking error...) -> failed, and so does
      any other exit status.
The proxy itself turns ``completed`` / ``truncated`` into ``failed`` when a call of the session got an
upstream error; the printed reply has the final status.

Exit code: 0 when the proxy accepted ``/finish`` (whatever the episode's status), 2 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import traceback
import urllib.error
import urllib.request
import uuid

# Before LiteLLM is imported: read the cost map shipped with LiteLLM instead of fetching it from
# the internet at import time (offline that fetch waits for its timeout, then falls back).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# One attempt per call: a call that fails already ends the proxy's episode `failed`, so mini's
# default 10 retries (4-60 s apart) would only delay the verdict and add calls to a failed episode.
os.environ.setdefault("MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", "1")

TEXT_ACTION_FENCE = "```mswea_bash_command"
"""What mini's text-based configs ask the model to write (LitellmTextbasedModel's default action regex)."""


def _post_json(url: str, body: dict, token: str | None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read() or b"{}")
        except json.JSONDecodeError:
            return e.code, {"error": str(e)}


def _served_model(proxy: str, token: str | None) -> str:
    """The first model the server lists (GET /v1/models through the proxy; opens no session)."""
    req = urllib.request.Request(f"{proxy}/v1/models", headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())["data"][0]["id"]


def status_from_exit(exit_status: str) -> str:
    """mini's exit status -> the store's episode status (see the module docstring)."""
    s = (exit_status or "").lower()
    if not s:
        return "aborted"
    if "submit" in s:
        return "completed"
    if any(t in s for t in ("limit", "exceeded", "timeout", "context", "length", "repeatedformaterror")):
        return "truncated"
    return "failed"


def build_config(args: argparse.Namespace, session_url: str, model: str, token: str | None) -> dict:
    """mini's own config files, then what the proxy needs, then the caller's key=value specs."""
    from minisweagent.config import get_config_from_spec
    from minisweagent.utils.serialize import recursive_merge

    files = [s for s in args.config if "=" not in s] or ["mini_textbased.yaml"]
    base = recursive_merge(*(get_config_from_spec(s) for s in files))
    agent = base.get("agent", {})
    text_based = TEXT_ACTION_FENCE in agent.get("system_template", "") + agent.get("instance_template", "")
    needed = {
        "agent": {"step_limit": args.step_limit},
        "environment": {"cwd": args.workdir, "timeout": args.command_timeout},
        "model": {
            "model_name": f"openai/{model}",  # LiteLLM's OpenAI-compatible provider: POST {api_base}/chat/completions
            # a text config with the tool-calling class would send `tools` and look for tool calls: every
            # turn a format error; the text-based class parses the ```mswea_bash_command block instead
            "model_class": (base.get("model", {}).get("model_class")
                            or ("litellm_textbased" if text_based else "litellm")),
            # the proxy's cost is unknown to LiteLLM's cost map: by default mini raises after the first call
            "cost_tracking": "ignore_errors",
            "model_kwargs": {
                "api_base": session_url,
                # the OpenAI client refuses to start without a key; the proxy's own token when it has one
                "api_key": token or "unused",
                "max_tokens": args.max_tokens,
                "temperature": args.temperature,
                **json.loads(args.model_kwargs),
            },
        },
    }
    overrides = [get_config_from_spec(s) for s in args.config if "=" in s]
    return recursive_merge(base, needed, *overrides)


def compute_reward(args: argparse.Namespace, exit_status: str) -> tuple[float, dict]:
    if args.check is None:
        return (1.0 if exit_status == "Submitted" else 0.0), {"reward_rule": "submitted"}
    r = subprocess.run(args.check, shell=True, cwd=args.workdir, capture_output=True, text=True,
                       timeout=args.command_timeout, check=False)
    return (1.0 if r.returncode == 0 else 0.0), {"reward_rule": "check", "check": args.check,
                                                  "check_returncode": r.returncode}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--proxy", default="http://127.0.0.1:8100", help="traj proxy base URL")
    ap.add_argument("--session", default=None, help="session (episode) name; default: mini-<random>")
    ap.add_argument("--task", required=True, help="the task statement given to the agent")
    ap.add_argument("--check", default=None, help="shell command deciding the reward (exit 0 = 1.0); "
                                                  "default: 1.0 if the agent submitted")
    ap.add_argument("--workdir", default=None, help="where the agent's commands run; default: a new temp dir")
    ap.add_argument("--step-limit", type=int, default=3, help="model calls at most (then: truncated)")
    ap.add_argument("--max-tokens", type=int, default=256, help="max_tokens of each model call")
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (1.0: the policy itself)")
    ap.add_argument("--command-timeout", type=int, default=30, help="seconds per shell command (and the check)")
    ap.add_argument("--model", default=None, help="served model name; default: the first in the proxy's /v1/models")
    ap.add_argument("--model-kwargs", default="{}", help="JSON merged into the request parameters, "
                                                         'e.g. \'{"extra_body": {"seed": 0}}\'')
    ap.add_argument("-c", "--config", action="append", default=[],
                    help="mini config file (default mini_textbased.yaml; several merge) or key=value spec "
                         "applied last, as mini's -c (e.g. agent.max_consecutive_format_errors=5)")
    ap.add_argument("--traj-out", default=None, help="also save mini's own .traj.json here")
    ap.add_argument("--prompt-id", default=None, help="prompt_id to store with the episode")
    args = ap.parse_args(argv)

    token = os.environ.get("TRAJ_PROXY_TOKEN") or None
    proxy = args.proxy.rstrip("/")
    session = args.session or f"mini-{uuid.uuid4().hex[:8]}"
    session_url = f"{proxy}/s/{session}/v1"
    args.workdir = args.workdir or tempfile.mkdtemp(prefix="mini-task-")

    import litellm
    import minisweagent
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models import get_model

    litellm.suppress_debug_info = True  # its "Provider List" banner after each (ignored) cost-map miss
    model = args.model or _served_model(proxy, token)
    config = build_config(args, session_url, model, token)
    agent_cfg = {k: v for k, v in config.get("agent", {}).items() if k not in ("agent_class", "mode")}
    if args.traj_out:
        agent_cfg["output_path"] = args.traj_out
    env_cfg = {k: v for k, v in config.get("environment", {}).items() if k != "environment_class"}
    print(f"mini-swe-agent {minisweagent.__version__}: session {session_url}, model class "
          f"{config['model']['model_class']}, workdir {args.workdir}", file=sys.stderr)

    agent = DefaultAgent(get_model(config=config["model"]), LocalEnvironment(**env_cfg), **agent_cfg)
    error = None
    try:
        exit_status = agent.run(args.task).get("exit_status", "")
        status = status_from_exit(exit_status)
    except Exception as e:  # noqa: BLE001 - any crash of the agent ends the episode failed
        error = f"{type(e).__name__}: {e}"
        traceback.print_exc()
        exit_status, status = type(e).__name__, "failed"

    reward, reward_meta = (None, {}) if status == "failed" else compute_reward(args, exit_status)
    body = {"status": status, "reward": reward, "prompt_id": args.prompt_id,
            "metadata": {"harness": "mini-swe-agent", "mini_version": minisweagent.__version__,
                         "mini_exit_status": exit_status, "mini_model_calls": agent.n_calls, "task": args.task,
                         **reward_meta, **({"harness_error": error[:2000]} if error else {})}}
    if body["prompt_id"] is None:
        del body["prompt_id"]
    code, reply = _post_json(f"{proxy}/s/{session}/finish", body, token)
    print(json.dumps({"session": session, "mini_exit_status": exit_status, "mini_model_calls": agent.n_calls,
                      "requested_status": status, "reward": reward, "finish_http_status": code, "finish": reply}))
    return 0 if code == 200 else 2


if __name__ == "__main__":
    sys.exit(main())

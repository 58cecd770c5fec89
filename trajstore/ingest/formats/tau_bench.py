"""tau-bench results files -> conversations.

A results file (``results/<strategy>-<model>-...json``) is a JSON list of task results, each
``{"task_id", "reward", "info", "traj", "trial"}``; ``traj`` is the agent's OpenAI chat (system
policy, the simulated user's turns, assistant turns with tool calls, tool results). The reward
is the environment's score (``info.reward_info`` holds its parts).

A result whose ``info`` holds an ``error`` is an evaluator crash: the harness writes reward 0.0
for it, which is not a score. With an empty ``traj`` it is reported (no trajectory), never
stored with a reward of 0; with a partial ``traj`` it is stored as ``failed`` with no reward.
"""

from __future__ import annotations

from typing import Any

from trajstore.ingest.formats.chat import chat_messages, link_observations
from trajstore.ingest.formats.rewards import float_reward
from trajstore.ingest.formats.spec import InputFormat, Records
from trajstore.ingest.records import Conversation, Origin, Problem, RecordError, Reward

SOURCE = "tau-bench"


def parse_result(row: Any, origin: Origin) -> Conversation | Problem:
    """One task result of a tau-bench results list.

    Returns:
        The conversation, or a ``no_trajectory`` :class:`Problem` for an evaluator crash with
        an empty ``traj``.

    Raises:
        RecordError: ``traj`` is not a list of chat messages.
    """
    if not isinstance(row, dict) or not isinstance(row.get("traj"), list):
        raise RecordError("tau-bench result has no 'traj' list")
    info = row["info"] if isinstance(row.get("info"), dict) else {}
    error = info.get("error")
    if error and not row["traj"]:
        return Problem(origin, "no_trajectory", f"evaluator crash, no trajectory (info.error: {str(error)[:160]}); "
                       f"its reward {row.get('reward')!r} is not a score")
    msgs = link_observations(chat_messages(row["traj"], "traj"))
    task_id, trial = row.get("task_id"), row.get("trial")
    key = f"task-{task_id}" + (f"-trial-{trial}" if trial is not None else "")
    task = info.get("task") if isinstance(info.get("task"), dict) else None
    meta: dict[str, Any] = {"task_id": task_id, "trial": trial, "task": task,
                            "reward_info": info.get("reward_info")}
    if error:
        meta["error"] = str(error)[:2000]
        reward = Reward(None, row.get("reward"), error=f"evaluator error: {str(error)[:160]}")
        status = "failed"
    else:
        reward = float_reward(row.get("reward"))
        status = "completed"
    gaps = {}
    if any(m.tool_calls for m in msgs):
        gaps["tools"] = "tau-bench sends the environment's tools with every call; the results file does not log them"
    return Conversation(source=SOURCE, key=key, messages=msgs, origin=origin, reward=reward, status=status,
                        prompt_id=f"task-{task_id}", metadata=meta, fidelity_gaps=gaps)


TAU_BENCH = InputFormat(
    "tau-bench", "tau-bench results files (task results with 'traj', 'reward', 'info')", SOURCE,
    records=Records(parse_result, keys=("traj",), signature=lambda d: "traj" in d and "reward" in d and ("task_id" in d or "info" in d)))

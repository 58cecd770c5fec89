"""OpenHands V1 (software-agent-sdk) evaluation output -> conversations with the run's reward and
status: ``output.jsonl`` rows (an event ``history`` each), and per-task ``traj_<task>.json`` event
lists whose score is the ``eval_<task>.json`` beside them.
"""

from __future__ import annotations

import os
from typing import Any

from trajstore.ingest.formats.openhands import status_from_error, worse_status
from trajstore.ingest.formats.openhands_v1_messages import events_conversation
from trajstore.ingest.formats.rewards import float_reward
from trajstore.ingest.formats.spec import InputFormat, NoTrajectory, Records
from trajstore.ingest.records import Conversation, EngineRollout, Message, Origin, RecordError, Reward

SOURCE = "openhands/v1-eval"
TASK_FILE_PREFIX = "traj_"
"""A per-task event list is ``traj_<task>.json``; its score is ``eval_<task>.json`` beside it."""
SCORE_FILE_PREFIX = "eval_"


def score_reward(test_result: Any) -> Reward:
    """Reward from a V1 eval ``test_result`` / ``eval_<task>.json``: ``final_score.result``
    (bool -> 1.0 / 0.0), raw = the ``final_score`` object. An evaluator crash (``error`` /
    ``traceback`` instead of a score) is no reward, with the error kept; so is a score with no
    graded checkpoints (``total = 0``)."""
    if not isinstance(test_result, dict):
        return Reward()
    if "final_score" not in test_result:
        if "error" in test_result:
            return Reward(None, None, error=str(test_result["error"]))
        return Reward()
    fs = test_result["final_score"]
    if isinstance(fs, dict) and fs.get("total") == 0 and not test_result.get("checkpoints"):
        # nothing was graded (no checkpoints, total 0): "0 of 0" is not a score of 0
        return Reward(None, fs, error="no checkpoints graded (final_score.total = 0)")
    r = float_reward(fs.get("result") if isinstance(fs, dict) else fs,
                     "final_score.result" if isinstance(fs, dict) else "final_score")
    return Reward(r.value, fs, error=r.error)


def parse_v1_eval_output(row: Any, origin: Origin) -> Conversation | EngineRollout:
    """One line of a V1 eval ``output.jsonl``. The task ``instruction`` is the user prompt when
    the history holds no user message (these histories record no MessageEvent); flagged, as
    the SDK's exact user message (its template around the instruction) is not logged."""
    if not isinstance(row, dict) or "history" not in row:
        raise RecordError("V1 eval row has no 'history'")
    key = str(row["instance_id"]) if row.get("instance_id") else None
    conv = events_conversation(row["history"], origin, source=SOURCE, key=key)
    if isinstance(conv, Conversation) and not any(m.role == "user" for m in conv.messages) \
            and isinstance(row.get("instruction"), str):
        sys_n = sum(1 for m in conv.messages[:1] if m.role == "system")
        conv.messages.insert(sys_n, Message("user", row["instruction"]))
        conv.fidelity_gaps["prompt"] = ("no user MessageEvent in the history: the row's instruction stands in for "
                                        "the task message the model was sent")
    conv.reward = score_reward(row.get("test_result"))
    conv.status = worse_status(conv.status, status_from_error(row.get("error")))
    conv.prompt_id = key
    md = row.get("metadata") if isinstance(row.get("metadata"), dict) else {}
    llm = md.get("llm") if isinstance(md.get("llm"), dict) else {}
    conv.model = llm.get("model") or conv.model
    conv.metadata.update({"instance_id": key, "error": row.get("error")})
    if conv.reward.error:
        conv.metadata["reward_error"] = conv.reward.error
    return conv


def task_of(path: str, prefix: str) -> str:
    """``traj_safety-x.json`` -> ``safety-x``."""
    return os.path.basename(path)[len(prefix):].rsplit(".", 1)[0]


def is_task_file(path: str) -> bool:
    """A per-task event list, ``traj_<task>.json``."""
    return os.path.basename(path).startswith(TASK_FILE_PREFIX)


def score_file(task_file: str) -> str:
    """The ``eval_<task>.json`` beside a ``traj_<task>.json``."""
    return os.path.join(os.path.dirname(task_file), f"{SCORE_FILE_PREFIX}{task_of(task_file, TASK_FILE_PREFIX)}.json")


def parse_task_trajectory(events: Any, origin: Origin, eval_result: Any | None,
                          eval_path: str | None) -> Conversation | EngineRollout:
    """A per-task ``traj_<task>.json`` with its ``eval_<task>.json`` (None when absent: no reward)."""
    key = task_of(origin.path, TASK_FILE_PREFIX)
    conv = events_conversation(events, origin, source=SOURCE, key=key)
    conv.prompt_id = key
    conv.reward = score_reward(eval_result) if eval_result is not None else Reward()
    conv.metadata.update({"instance_id": key, "eval_file": eval_path})
    if conv.reward.error:
        conv.metadata["reward_error"] = conv.reward.error
    return conv


def _no_trajectory_reason(d: dict[str, Any], path: str) -> str | None:
    """Why an evaluation's score file (``eval_<task>.json``: a score, or the evaluator's crash
    report) holds no trajectory, naming a missing ``traj_<task>.json`` beside it."""
    if "final_score" in d or "checkpoints" in d:
        why = "evaluation score only (its trajectory is the matching traj_<task>.json)"
    elif "error" in d and "traceback" in d:
        why = f"evaluator crash report, no trajectory and no score: {str(d['error'])[:120]}"
    else:
        return None
    if os.path.basename(path).startswith(SCORE_FILE_PREFIX):
        task = task_of(path, SCORE_FILE_PREFIX)
        if not os.path.exists(os.path.join(os.path.dirname(path), f"{TASK_FILE_PREFIX}{task}.json")):
            why += f"; no {TASK_FILE_PREFIX}{task}.json next to it"
    return why


V1_EVAL = InputFormat("openhands-v1-eval", "OpenHands V1 evaluation output", SOURCE,
                   records=Records(parse_v1_eval_output, keys=("history",), history=("v1-events",)),
                   no_trajectory=NoTrajectory(("final_score", "checkpoints", "traceback"), _no_trajectory_reason))

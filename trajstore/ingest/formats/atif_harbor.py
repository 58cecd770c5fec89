"""The files of a Harbor trial read beside its agent's ATIF ``trajectory.json``
(``<trial>/agent/trajectory.json``): the verifier's score (``<trial>/verifier/reward.txt``) and the
trial's outcome (``<trial>/result.json``, whose ``exception_info`` says how the run ended).
"""

from __future__ import annotations

import json
import os
from typing import Any

from trajstore.ingest.formats.rewards import float_reward
from trajstore.ingest.records import Reward

REWARD_FILE = os.path.join("verifier", "reward.txt")
"""Where a Harbor trial keeps its verifier score, relative to the trial directory."""
RESULT_FILE = "result.json"
"""Where a Harbor trial keeps its outcome (``exception_info`` when the run raised), relative to the trial directory."""


def harbor_reward_file(path: str) -> str:
    """Where the Harbor trial `path` (``<trial>/agent/trajectory.json``) belongs to keeps its verifier score."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(path))), REWARD_FILE)


def harbor_reward(path: str) -> Reward:
    """The verifier score of the Harbor trial `path` (``<trial>/agent/trajectory.json``) belongs to."""
    f = harbor_reward_file(path)
    if not os.path.isfile(f):
        return Reward()
    try:
        with open(f, encoding="utf-8") as fh:
            text = fh.read().strip()
        return float_reward(json.loads(text))
    except (OSError, ValueError):
        return Reward(None, None, error=f"{f} holds no number")


def harbor_exception(path: str) -> dict[str, Any] | None:
    """The exception Harbor recorded for the trial `path` belongs to (``<trial>/result.json``
    ``exception_info``: ``exception_type``, ``exception_message``), or None."""
    f = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(path))), RESULT_FILE)
    try:
        with open(f, encoding="utf-8") as fh:
            info = json.load(fh).get("exception_info")
    except (OSError, ValueError, AttributeError):
        return None
    return info if isinstance(info, dict) and info.get("exception_type") else None


def harbor_trial_result(d: dict[str, Any], path: str) -> str | None:
    """Why a Harbor trial's ``result.json`` holds no trajectory (its exception is read with the trajectory)."""
    if "trial_name" in d and "task_name" in d and isinstance(d.get("agent_info"), dict):
        return "Harbor trial result (result.json: its exception is read with the trial's agent/trajectory.json)"
    return None

"""Rows of published chat-trajectory datasets (JSON, JSONL or Parquet) -> conversations.

- SWE-smith (``SWE-bench/SWE-smith-trajectories``): ``messages`` is the chat as a *JSON-encoded
  string*; ``resolved`` is the reward; ``model``, ``traj_id``, ``instance_id`` and ``patch``
  are provenance.
- nebius SWE-rebench-openhands (``nebius/SWE-rebench-openhands-trajectories``): the OpenAI chat
  under ``trajectory``, the tool definitions under ``tools``, ``resolved`` (0/1) the reward,
  ``exit_status`` how the run ended.

- plain chat records (``chat-messages``): a bare list of OpenAI chat messages, or an object
  holding one under ``messages`` (the OpenAI fine-tuning JSONL shape), optionally with
  ``tools`` and a ``reward`` (or ``score``) and ``resolved``.

All keep the model name and provenance columns when the row has them.
"""

from __future__ import annotations

from typing import Any

from trajstore.ingest.formats.chat import chat_messages, link_observations
from trajstore.ingest.formats.rewards import bool_reward, float_reward
from trajstore.ingest.records import Conversation, Origin, RecordError, Reward
from trajstore.ingest.values import json_field

PROVENANCE_KEYS = ("instance_id", "traj_id", "trajectory_id", "run_id", "repo", "model", "model_name",
                   "exit_status", "split", "source")
"""Row columns copied into metadata when present (scalars only)."""


def _provenance(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row[k] for k in PROVENANCE_KEYS if isinstance(row.get(k), (str, int, float, bool))}


def tool_list(raw: Any) -> list[dict[str, Any]] | None:
    """Tool definitions of a row (a list, or a JSON-encoded list) as given; None when absent or empty.

    Raises:
        RecordError: not a list of objects.
    """
    raw = json_field(raw, "tools")
    if raw is None or raw == []:
        return None
    if not isinstance(raw, list) or not all(isinstance(t, dict) for t in raw):
        raise RecordError("tools is not a list of tool definitions")
    return raw


def status_from_exit(exit_status: Any) -> str:
    """An OpenHands-style ``exit_status``: none, ``submit`` or ``finish`` -> completed; a
    limit, budget or context overflow -> truncated; anything else -> failed."""
    if not exit_status:
        return "completed"
    s = str(exit_status).lower()
    if "submit" in s or "finish" in s:
        return "completed"
    if any(t in s for t in ("limit", "budget", "context", "max", "exceeded", "timeout")):
        return "truncated"
    return "failed"


def parse_swe_smith_row(row: Any, origin: Origin) -> Conversation:
    """One SWE-smith trajectory row; reward = ``resolved``.

    Raises:
        RecordError: no ``messages``, a string that is not JSON, or not a chat.
    """
    if not isinstance(row, dict) or "messages" not in row:
        raise RecordError("SWE-smith row has no 'messages'")
    msgs = link_observations(chat_messages(json_field(row["messages"], "messages"), "messages"))
    key = str(row.get("traj_id") or row.get("instance_id") or "") or None
    model = row.get("model") if isinstance(row.get("model"), str) else None
    return Conversation(source="swe-smith", key=key, messages=msgs, origin=origin, model=model,
                        reward=bool_reward(row.get("resolved")),
                        prompt_id=str(row["instance_id"]) if row.get("instance_id") else None,
                        metadata=_provenance(row))


def parse_swe_rebench_openhands_row(row: Any, origin: Origin) -> Conversation:
    """One nebius SWE-rebench-openhands row: chat under ``trajectory``; reward = ``resolved``.

    Raises:
        RecordError: no ``trajectory`` chat, or ``tools`` that are not tool definitions.
    """
    if not isinstance(row, dict) or "trajectory" not in row:
        raise RecordError("SWE-rebench-openhands row has no 'trajectory'")
    msgs = link_observations(chat_messages(json_field(row["trajectory"], "trajectory"), "trajectory"))
    key = str(row.get("trajectory_id") or row.get("instance_id") or "") or None
    model = next((row[k] for k in ("model", "model_name") if isinstance(row.get(k), str)), None)
    conv = Conversation(source="nebius/swe-rebench-openhands", key=key, messages=msgs, origin=origin, model=model,
                        reward=bool_reward(row.get("resolved")), status=status_from_exit(row.get("exit_status")),
                        prompt_id=str(row["instance_id"]) if row.get("instance_id") else None,
                        metadata=_provenance(row))
    tools = tool_list(row.get("tools"))
    if tools is not None:
        conv.tools = tools
    elif any(m.tool_calls for m in msgs):
        conv.fidelity_gaps["tools"] = "the row's 'tools' is empty, but the model made tool calls"
    return conv


def parse_chat_record(row: Any, origin: Origin) -> Conversation:
    """One plain chat record: a bare list of OpenAI chat messages, or an object with the chat
    under ``messages`` (a list, or a JSON-encoded list) and optionally ``tools``, a numeric
    ``reward`` or ``score``, a boolean-ish ``resolved``, an ``id`` and the provenance keys of
    :data:`PROVENANCE_KEYS`. A file holding a single bare list is one record too.

    Raises:
        RecordError: neither a list of messages nor an object with ``messages``; a ``reward``,
            ``score`` or ``resolved`` that is not a number / outcome; ``tools`` that are not tool
            definitions.
    """
    if isinstance(row, list):
        return Conversation(source="chat-messages", key=None, origin=origin, messages=chat_messages(row, "messages"))
    if not isinstance(row, dict) or "messages" not in row:
        raise RecordError("a chat record is a list of chat messages or an object with 'messages' "
                          f"(got {'an object with keys ' + ', '.join(map(str, list(row)[:6])) if isinstance(row, dict) else 'a JSON ' + type(row).__name__})")
    msgs = chat_messages(json_field(row["messages"], "messages"), "messages")
    reward = Reward()
    for k in ("reward", "score"):
        if row.get(k) is not None:
            reward = float_reward(row[k], k)
            break
    else:
        if row.get("resolved") is not None:
            reward = bool_reward(row["resolved"])
    key = next((str(row[k]) for k in ("id", "trajectory_id", "traj_id", "instance_id")
                if isinstance(row.get(k), (str, int)) and not isinstance(row.get(k), bool) and str(row[k])), None)
    model = next((row[k] for k in ("model", "model_name") if isinstance(row.get(k), str)), None)
    conv = Conversation(source="chat-messages", key=key, messages=msgs, origin=origin, model=model, reward=reward,
                        prompt_id=str(row["instance_id"]) if row.get("instance_id") else None,
                        metadata=_provenance(row))
    tools = tool_list(row.get("tools"))
    if tools is not None:
        conv.tools = tools
    return conv

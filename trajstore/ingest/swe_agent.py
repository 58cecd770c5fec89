"""SWE-agent ``.traj`` files (0.x and 1.x) and nebius ``SWE-agent-trajectories`` rows ->
conversations.

SWE-agent: the ``history`` is the model's chat. Everything before the first assistant
message (system prompt, demonstrations, the issue) is the prompt. 1.x links tool results by
``tool_call_ids``; 0.x logs no ids, so each observation answers the action just before it
(synthetic ids ``step-<n>``: the harness strictly alternates). ``.traj`` files carry no
reward (``exit_status`` sets the status).

nebius: roles ``system`` (text in ``system_prompt``), ``user``, ``ai``; ``mask`` marks the
trained (model) messages; reward = ``target`` (resolved).
"""

from __future__ import annotations

import json
from typing import Any

from trajstore.ingest.core import (
    Conversation,
    Message,
    Origin,
    RecordError,
    bool_reward,
    text_of,
    tool_calls_of,
)


def status_from_exit(exit_status: Any) -> str:
    """``submitted`` (or missing) -> completed; ``exit_cost`` / ``exit_context`` / ``exit_format``
    / autosubmitted limits -> truncated; ``exit_error`` and others -> failed."""
    if not exit_status or exit_status == "submitted":
        return "completed"
    s = str(exit_status)
    if any(t in s for t in ("cost", "context", "format", "autosubmit", "limit", "early_exit")):
        return "truncated"
    return "failed"


def parse_traj(d: Any, origin: Origin) -> Conversation:
    """One SWE-agent ``.traj`` file.

    Raises:
        RecordError: no ``history`` list, or a history item without a role.
    """
    if not isinstance(d, dict) or not isinstance(d.get("history"), list):
        raise RecordError("SWE-agent trajectory has no 'history' list")
    msgs: list[Message] = []
    pending: list[str] = []
    step = 0
    for i, h in enumerate(d["history"]):
        if not isinstance(h, dict) or h.get("role") not in ("system", "user", "assistant", "tool"):
            raise RecordError(f"history[{i}] has no valid 'role'")
        role = h["role"]
        text = text_of(h.get("content"))
        if role == "assistant":
            calls = tool_calls_of(h.get("tool_calls"))
            cid = f"step-{step}"
            step += 1
            msgs.append(Message("assistant", text, tool_calls=calls, call_id=cid))
            pending = [c.id for c in calls if c.id] or [cid]
        else:
            cause = None
            if role == "tool" and h.get("tool_call_ids"):
                cause = str(h["tool_call_ids"][0])
            elif any(m.role == "assistant" for m in msgs) and pending:
                cause = pending[0]
            msgs.append(Message(role, text, cause_id=cause))
    info = d.get("info") if isinstance(d.get("info"), dict) else {}
    env = d.get("environment")
    key = None
    if isinstance(d.get("replay_config"), str):
        try:
            key = json.loads(d["replay_config"])["problem_statement"]["id"]
        except (ValueError, KeyError, TypeError):
            key = None
    key = key or origin.path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    stats = info.get("model_stats") if isinstance(info.get("model_stats"), dict) else {}
    return Conversation(source="swe-agent", key=key, messages=msgs, origin=origin, prompt_id=key,
                        status=status_from_exit(info.get("exit_status")),
                        metadata={"exit_status": info.get("exit_status"), "environment": env,
                                  "swe_agent_version": info.get("swe_agent_version"),
                                  "replayed": "replay_config" in d, "model_stats": stats,
                                  "format_version": "1.x" if any("message_type" in h for h in d["history"]) else "0.x"})


def parse_nebius_row(row: Any, origin: Origin) -> Conversation:
    """One nebius SWE-agent trajectory row.

    Raises:
        RecordError: no ``trajectory`` list or an unknown role.
    """
    if not isinstance(row, dict) or not isinstance(row.get("trajectory"), list):
        raise RecordError("nebius row has no 'trajectory' list")
    msgs: list[Message] = []
    step = 0
    for i, m in enumerate(row["trajectory"]):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "ai", "assistant"):
            raise RecordError(f"trajectory[{i}] has no valid 'role'")
        role = m["role"]
        if role == "system":
            msgs.append(Message("system", text_of(m.get("system_prompt") or m.get("text"))))
        elif role in ("ai", "assistant"):
            msgs.append(Message("assistant", text_of(m.get("text")), call_id=f"step-{step}"))
            step += 1
        else:
            cause = f"step-{step - 1}" if step else None
            msgs.append(Message("user", text_of(m.get("text")), cause_id=cause))
    unmasked = [i for i, m in enumerate(row["trajectory"]) if m.get("role") in ("ai", "assistant") and not m.get("mask")]
    key = str(row["instance_id"]) if row.get("instance_id") else None
    return Conversation(source="nebius/swe-agent", key=key, messages=msgs, origin=origin, prompt_id=key,
                        reward=bool_reward(row.get("target")), model=row.get("model_name"),
                        status=status_from_exit(row.get("exit_status")),
                        metadata={"instance_id": key, "exit_status": row.get("exit_status"),
                                  "unmasked_ai_messages": unmasked})

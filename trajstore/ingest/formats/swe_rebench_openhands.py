"""nebius SWE-rebench-openhands (``nebius/SWE-rebench-openhands-trajectories``) rows ->
conversations: the OpenAI chat under ``trajectory``, the tool definitions under ``tools``,
``resolved`` (0/1) the reward, ``exit_status`` how the run ended.
"""

from __future__ import annotations

from typing import Any

from trajstore.ingest.formats.chat import chat_messages, is_chat, link_observations, provenance, tool_list
from trajstore.ingest.formats.rewards import bool_reward
from trajstore.ingest.formats.spec import InputFormat, Records
from trajstore.ingest.records import Conversation, Origin, RecordError
from trajstore.ingest.values import json_field

SOURCE = "nebius/swe-rebench-openhands"


def swe_rebench_status(exit_status: Any) -> str:
    """The run status of an OpenHands-style ``exit_status``: none, ``submit`` or ``finish`` ->
    completed; a limit, budget or context overflow -> truncated; anything else -> failed."""
    if not exit_status:
        return "completed"
    s = str(exit_status).lower()
    if "submit" in s or "finish" in s:
        return "completed"
    if any(t in s for t in ("limit", "budget", "context", "max", "exceeded", "timeout")):
        return "truncated"
    return "failed"


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
    conv = Conversation(source=SOURCE, key=key, messages=msgs, origin=origin, model=model,
                        reward=bool_reward(row.get("resolved")), status=swe_rebench_status(row.get("exit_status")),
                        prompt_id=str(row["instance_id"]) if row.get("instance_id") else None,
                        metadata=provenance(row))
    tools = tool_list(row.get("tools"))
    if tools is not None:
        conv.tools = tools
    elif any(m.tool_calls for m in msgs):
        conv.fidelity_gaps["tools"] = "the row's 'tools' is empty, but the model made tool calls"
    return conv


def _is_row(d: dict[str, Any]) -> bool:
    """A chat (or a JSON-encoded one next to ``resolved``) under ``trajectory``, with ``resolved`` or ``tools``."""
    t = d.get("trajectory")
    return "trajectory" in d and (is_chat(t) or (isinstance(t, str) and "resolved" in d)) \
        and ("resolved" in d or "tools" in d)


SWE_REBENCH_OPENHANDS = InputFormat(
    "nebius-swe-rebench-openhands", "nebius SWE-rebench-openhands rows (chat under 'trajectory', 'tools')", SOURCE,
    records=Records(parse_swe_rebench_openhands_row, keys=("resolved", "tools"), signature=_is_row))

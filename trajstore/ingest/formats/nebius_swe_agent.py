"""nebius ``SWE-agent-trajectories`` rows (SWE-agent runs published as a dataset) -> conversations.

Roles ``system`` (text in ``system_prompt``), ``user``, ``ai``; ``mask`` marks the trained
(model) messages; reward = ``target`` (resolved); ``exit_status`` is SWE-agent's.
"""

from __future__ import annotations

from typing import Any

from trajstore.ingest.formats.chat import text_of
from trajstore.ingest.formats.rewards import bool_reward
from trajstore.ingest.formats.spec import InputFormat, Records
from trajstore.ingest.formats.swe_agent import swe_agent_status
from trajstore.ingest.records import Conversation, Message, Origin, RecordError

SOURCE = "nebius/swe-agent"


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
    return Conversation(source=SOURCE, key=key, messages=msgs, origin=origin, prompt_id=key,
                        reward=bool_reward(row.get("target"), "target"), model=row.get("model_name"),
                        status=swe_agent_status(row.get("exit_status")),
                        metadata={"instance_id": key, "exit_status": row.get("exit_status"),
                                  "unmasked_ai_messages": unmasked})


NEBIUS_SWE_AGENT = InputFormat(
    "nebius-swe-agent", "nebius SWE-agent-trajectories rows", SOURCE,
    records=Records(parse_nebius_row, keys=("target", "model_name"),
                    signature=lambda d: isinstance(d.get("trajectory"), list) and ("target" in d or "model_name" in d),
                    excludes=("nebius-swe-rebench-openhands", "openhands-v0-feedback")))

"""SWE-Gym ``OpenHands-Sampled-Trajectories`` rows (OpenHands runs published as OpenAI chat
``messages``, a ``resolved`` reward and the run's ``tools``) -> conversations.
"""

from __future__ import annotations

from typing import Any

from trajstore.ingest.formats.chat import chat_messages, tool_definitions
from trajstore.ingest.formats.rewards import bool_reward
from trajstore.ingest.formats.spec import InputFormat, Records
from trajstore.ingest.records import Conversation, Origin, RecordError
from trajstore.ingest.values import json_field

SOURCE = "openhands/swe-gym"


def parse_swe_gym_row(row: Any, origin: Origin) -> Conversation:
    """One SWE-Gym ``OpenHands-Sampled-Trajectories`` row; reward = ``resolved``."""
    if not isinstance(row, dict) or "messages" not in row:
        raise RecordError("SWE-Gym row has no 'messages'")
    msgs = chat_messages(json_field(row["messages"], "messages"), "messages")
    key = str(row.get("instance_id")) if row.get("instance_id") else None
    return Conversation(source=SOURCE, key=key, messages=msgs, origin=origin,
                        reward=bool_reward(row.get("resolved")), prompt_id=key, tools=tool_definitions(row.get("tools")),
                        metadata={"instance_id": row.get("instance_id"), "run_id": row.get("run_id")})


SWE_GYM = InputFormat(
    "openhands-swe-gym", "SWE-Gym OpenHands-Sampled-Trajectories rows", SOURCE,
    records=Records(parse_swe_gym_row, keys=("messages",), signature=lambda d: "messages" in d and ("resolved" in d or "instance_id" in d),
                    excludes=("swe-smith", "mini-swe-agent", "openhands-v1-completions")))

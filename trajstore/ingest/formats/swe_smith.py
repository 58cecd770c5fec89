"""SWE-smith (``SWE-bench/SWE-smith-trajectories``) rows -> conversations: ``messages`` is the chat
as a *JSON-encoded string*; ``resolved`` is the reward; ``model``, ``traj_id``, ``instance_id`` and
``patch`` are provenance (kept in metadata).
"""

from __future__ import annotations

from typing import Any

from trajstore.ingest.formats.chat import chat_messages, link_observations, provenance
from trajstore.ingest.formats.rewards import bool_reward
from trajstore.ingest.formats.spec import InputFormat, Records
from trajstore.ingest.records import Conversation, Origin, RecordError
from trajstore.ingest.values import json_field

SOURCE = "swe-smith"


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
    return Conversation(source=SOURCE, key=key, messages=msgs, origin=origin, model=model,
                        reward=bool_reward(row.get("resolved")),
                        prompt_id=str(row["instance_id"]) if row.get("instance_id") else None,
                        metadata=provenance(row))


SWE_SMITH = InputFormat(
    "swe-smith", "SWE-smith-trajectories rows (messages as a JSON string)", SOURCE,
    records=Records(parse_swe_smith_row, keys=("messages",),
                    signature=lambda d: "messages" in d and ("traj_id" in d or ("patch" in d and "model" in d)),
                    excludes=("mini-swe-agent",)))

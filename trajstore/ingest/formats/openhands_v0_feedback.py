"""The 2024 ``all-hands/openhands-feedback`` dataset: rows holding a V0 event ``trajectory``
(websocket messages mixed in) and the user's feedback -> conversations.
"""

from __future__ import annotations

from typing import Any

from trajstore.ingest.formats.openhands_v0_events import events_to_conversation
from trajstore.ingest.formats.spec import InputFormat, Records
from trajstore.ingest.records import Conversation, Origin, RecordError, Reward
from trajstore.ingest.values import parse_time

SOURCE = "openhands/v0-feedback"


def parse_feedback_row(row: Any, origin: Origin) -> Conversation:
    """One row of the 2024 ``all-hands/openhands-feedback`` dataset; reward 1.0 for
    ``positive`` feedback, 0.0 for ``negative`` (raw value kept)."""
    if not isinstance(row, dict) or "trajectory" not in row:
        raise RecordError("feedback row has no 'trajectory'")
    conv = events_to_conversation(row["trajectory"], source=SOURCE, key=None, origin=origin)
    fb = row.get("feedback")
    conv.reward = Reward({"positive": 1.0, "negative": 0.0}.get(fb) if isinstance(fb, str) else None, fb)
    for ev in row["trajectory"]:
        if isinstance(ev, dict) and ev.get("action") == "initialize" and isinstance(ev.get("args"), dict):
            conv.model = ev["args"].get("LLM_MODEL") or conv.model
    conv.created_at = conv.created_at or parse_time(row.get("timestamp"))
    conv.metadata.update({"feedback": fb, "feedback_version": row.get("version"), "permissions": row.get("permissions")})
    return conv


V0_FEEDBACK = InputFormat("openhands-v0-feedback", "OpenHands 2024 feedback dataset rows", SOURCE,
                          records=Records(parse_feedback_row, keys=("feedback",), signature=lambda d: "feedback" in d and "trajectory" in d))

"""An event directory -> one conversation: the ``events/<n>.json`` files of an OpenHands V0
session store or V1 conversation folder, with the folder's ``metadata.json`` (conversation id,
model, title) and, for V1, ``base_state.json`` (model, run status, sampling settings).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from trajstore.ingest import detect
from trajstore.ingest.discover import InputUnit
from trajstore.ingest.formats import openhands_v0, openhands_v1
from trajstore.ingest.formats.openhands_v1_events import events_conversation
from trajstore.ingest.read import json_loads, read_text
from trajstore.ingest.reasons import problem_reason
from trajstore.ingest.records import Origin, Parsed, Problem


def parse_event_dir(unit: InputUnit, fmt: str) -> Iterator[Parsed]:
    """The conversation of one event directory (`unit.files`, in order), and a :class:`Problem`
    for each event or folder file that cannot be read (the others are still used)."""
    events: list[Any] = []
    for f in unit.files:
        try:
            events.append(json_loads(read_text(f)))
        except (ValueError, OSError) as e:
            yield Problem(Origin(f), "malformed", f"event file is not valid JSON: {e}")
    if not events:
        return
    session_dir = os.path.dirname(unit.path)
    meta: dict[str, Any] = {}
    meta_path = os.path.join(session_dir, "metadata.json")
    if os.path.exists(meta_path):
        try:
            meta = json_loads(read_text(meta_path))
        except (ValueError, OSError) as e:
            yield Problem(Origin(meta_path), "malformed", f"session metadata is not valid JSON: {e}")
        if not isinstance(meta, dict):
            yield Problem(Origin(meta_path), "malformed", f"session metadata is a JSON {type(meta).__name__}, "
                          "not an object; ignored")
            meta = {}
    state: Any = None
    state_path = os.path.join(session_dir, "base_state.json")
    if os.path.exists(state_path):  # OpenHands V1 conversation folder
        try:
            state = json_loads(read_text(state_path))
        except (ValueError, OSError) as e:
            yield Problem(Origin(state_path), "malformed", f"conversation state is not valid JSON: {e}")
    key = str(meta.get("conversation_id") or os.path.basename(session_dir))
    kind = fmt if fmt != "auto" else detect.detect_event(next((e for e in events if isinstance(e, dict)), None))
    try:
        if kind == "openhands-v1-events":
            conv = events_conversation(events, Origin(unit.path), source="openhands/v1-events", key=key)
        else:
            conv = openhands_v0.events_to_conversation(events, source="openhands/v0-session", key=key,
                                                       origin=Origin(unit.path))
    except Exception as e:  # noqa: BLE001
        yield Problem(Origin(unit.path), "malformed", problem_reason(e))
        return
    if state is not None:
        openhands_v1.apply_base_state(conv, state)
    conv.model = meta["llm_model"] if isinstance(meta.get("llm_model"), str) else conv.model
    conv.metadata.update({k: meta[k] for k in ("conversation_id", "title", "trigger", "selected_repository")
                          if k in meta})
    yield conv

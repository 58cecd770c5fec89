"""OpenHands V1 (software-agent-sdk) persisted events -> conversations: an event log
(``events.jsonl``, or a JSON list), a conversation folder (``<id>/events/event-*.json`` with the
folder's ``base_state.json``), and a per-task ``traj_<task>.json`` of an evaluation (read with its
score, :mod:`~trajstore.ingest.formats.openhands_v1_eval`). What each event becomes is
:mod:`~trajstore.ingest.formats.openhands_v1_messages`'s.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from trajstore.ingest.formats.openhands import base_state_file, read_conversation_folder
from trajstore.ingest.formats.openhands_v1_eval import is_task_file, parse_task_trajectory, score_file
from trajstore.ingest.formats.openhands_v1_messages import events_conversation
from trajstore.ingest.formats.spec import Events, InputFormat, NoTrajectory
from trajstore.ingest.read import json_loads, read_text
from trajstore.ingest.records import Conversation, EngineRollout, Origin, Parsed, Problem

SOURCE = "openhands/v1-events"


def _is_event(d: dict[str, Any]) -> bool:
    """A V1 event: a ``kind`` class name and an ``id`` or ``source`` (an ``ActionEvent`` also has
    an ``action`` object)."""
    return isinstance(d.get("kind"), str) and ("id" in d or "source" in d)


def parse_persisted_events(events: list[Any], origin: Origin) -> Conversation | EngineRollout:
    """A persisted V1 event log (``events.jsonl``: one event per line, already decoded)."""
    return events_conversation(events, origin, source=SOURCE, key=None)


def parse_document(doc: Any, origin: Origin) -> Iterator[Parsed]:
    """A JSON list of V1 events: a per-task ``traj_<task>.json`` with the score of the
    ``eval_<task>.json`` beside it (a :class:`Problem` when that file cannot be read), else an
    event log."""
    if not is_task_file(origin.path):
        yield parse_persisted_events(doc, origin)
        return
    ev_path = score_file(origin.path)
    ev = None
    if os.path.exists(ev_path):
        try:
            ev = json_loads(read_text(ev_path))
        except (ValueError, OSError) as e:
            yield Problem(Origin(ev_path), "malformed", f"eval file cannot be read: {e}")
    yield parse_task_trajectory(doc, origin, ev, ev_path if ev is not None else None)


def _folder_conversation(events: list[Any], origin: Origin, key: str) -> Conversation | EngineRollout:
    return events_conversation(events, origin, source=SOURCE, key=key)


def read_folder(events: list[Any], events_dir: str) -> Iterator[Parsed]:
    """A conversation folder's ``events/``: one conversation, with ``base_state.json``."""
    return read_conversation_folder(events, events_dir, _folder_conversation)


V1_EVENTS = InputFormat("openhands-v1-events", "OpenHands V1 persisted events", SOURCE,
                     events=Events(keys=("kind",), signature=_is_event, parse=parse_persisted_events, document=parse_document,
                                   folder=read_folder),
                     no_trajectory=NoTrajectory(("agent",), base_state_file))

"""Plain chat records (``chat-messages``) -> conversations: a bare list of OpenAI chat messages,
or an object holding one under ``messages`` (the OpenAI fine-tuning JSONL shape), optionally with
``tools``, a ``reward`` (or ``score``), ``resolved`` and the provenance keys of
:data:`~trajstore.ingest.formats.chat.PROVENANCE_KEYS`. The shape every chat format shares: a
record is read as this format only when no other format claims it.
"""

from __future__ import annotations

from typing import Any

from trajstore.ingest.formats.chat import chat_messages, is_chat, is_message, provenance, tool_list
from trajstore.ingest.formats.rewards import bool_reward, float_reward
from trajstore.ingest.formats.spec import InputFormat, Records
from trajstore.ingest.records import Conversation, Origin, RecordError, Reward
from trajstore.ingest.values import json_field

SOURCE = "chat-messages"


def parse_chat_record(row: Any, origin: Origin) -> Conversation:
    """One plain chat record: a bare list of OpenAI chat messages, or an object with the chat
    under ``messages`` (a list, or a JSON-encoded list) and optionally ``tools``, a numeric
    ``reward`` or ``score``, a boolean-ish ``resolved``, an ``id`` and the provenance keys of
    :data:`~trajstore.ingest.formats.chat.PROVENANCE_KEYS`. A file holding a single bare list is
    one record too.

    Raises:
        RecordError: neither a list of messages nor an object with ``messages``; a ``reward``,
            ``score`` or ``resolved`` that is not a number / outcome; ``tools`` that are not tool
            definitions.
    """
    if isinstance(row, list):
        return Conversation(source=SOURCE, key=None, origin=origin, messages=chat_messages(row, "messages"))
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
    conv = Conversation(source=SOURCE, key=key, messages=msgs, origin=origin, model=model, reward=reward,
                        prompt_id=str(row["instance_id"]) if row.get("instance_id") else None,
                        metadata=provenance(row))
    tools = tool_list(row.get("tools"))
    if tools is not None:
        conv.tools = tools
    return conv


CHAT_MESSAGES = InputFormat(
    "chat-messages", "OpenAI chat messages: a JSON list of them, or per JSONL line a list or {\"messages\": [...]}",
    SOURCE, records=Records(parse_chat_record, keys=("messages",), signature=lambda d: "messages" in d and is_chat(d["messages"]), fallback=True,
                            list_item=is_message))

"""The reason of a record's problem, on one line and in the input's terms: a parser's own
message, or the broken rules of the trajectory built from the record, naming the input's
field (the reward's ``resolved``) rather than a stored column (``reward_raw``).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError as PydanticValidationError

from trajstore.errors import TrajectoryValidationError, one_line
from trajstore.ingest.records import RecordError
from trajstore.ingest.values import clip_value

FIELD_WORDS: dict[str, str] = {
    "reward": "the reward", "reward_raw": "the reward", "model": "the model name", "prompt_id": "the task id",
    "group_id": "the group id", "created_at": "the time stamp", "status": "the status",
    "tokens": "the token ids", "action_logprobs": "the log-probs", "logprobs": "the log-probs", "spans": "the turns",
    "metadata": "the fields kept as metadata", "trajectory_id": "the instance id", "tokenizer": "the tokenizer name",
    "not_trainable_reason": "the not-trainable reason", "call_id": "a model call's id (response or message id)",
    "cause_id": "an observation's tool call id", "finish_reason": "a model call's finish_reason",
    "tool_call_ids": "a model call's tool call ids", "role": "a message's role",
}
"""Stored-trajectory fields in the words of the input they come from (never ``reward_raw``)."""


def _field_words(name: str, item: Any = None) -> str:
    head = re.split(r"[.\[]", name, maxsplit=1)[0]
    if head in ("reward", "reward_raw") and getattr(getattr(item, "reward", None), "field", None):
        return f"the reward (field {item.reward.field!r})"
    if head == "spans":
        m = re.match(r"spans\[(\d+)\]\.?(.*)", name)
        if m:
            return f"turn span {int(m.group(1)) + 1}" + (f" ({m.group(2)})" if m.group(2) else "")
    return FIELD_WORDS.get(head, name)


def problem_reason(e: BaseException, item: Any = None) -> str:
    """The reason of a record's problem, on one line in the input's terms: a parser's own
    message; the broken rules of the trajectory built from the record (naming the input's
    field, e.g. the reward's ``resolved``, never a stored column such as ``reward_raw``); a
    pydantic error as ``field: message (got value)``; else the error's type and text."""
    if isinstance(e, RecordError):
        return one_line(str(e))
    if isinstance(e, TrajectoryValidationError):
        return "the trajectory built from it would be invalid: " + "; ".join(
            f"{_field_words(v.field, item)}: {one_line(v.message)}" for v in e.violations)
    if isinstance(e, PydanticValidationError):
        parts = []
        for err in e.errors():
            loc = ".".join(str(x) for x in err.get("loc", ())) or "value"
            got = clip_value(err.get("input"), 60)
            parts.append(f"{_field_words(loc, item)}: {err.get('msg', 'invalid')} (got {got})")
        return "; ".join(parts)
    return one_line(f"{type(e).__name__}: {e}")

"""OpenHands V1 ``log_completions`` files -> conversations: each file is one model call (the
request's ``messages`` and the ``response``), native or prompt-based tool calling; the logs of
one conversation repeat it call after call, so only the longest of each is kept.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from trajstore.ingest.formats.chat import chat_messages, tool_calls_of, tool_definitions
from trajstore.ingest.formats.spec import InputFormat, Records
from trajstore.ingest.records import Conversation, Origin, ParsedTrajectory, RecordError
from trajstore.ingest.values import parse_time

SOURCE = "openhands/v1-completions"
SUPERSEDED = "superseded_completion_log"
"""The ingest summary's skip reason of a completion log whose conversation a later log repeats."""


def parse_completion_log(d: Any, origin: Origin) -> Conversation:
    """One V1 ``log_completions`` file: the request ``messages`` and the ``response``.

    Prompt-based tool calling (``raw_response`` present): ``messages`` are what the model saw
    and ``raw_response`` is its literal text, so both are used verbatim; tool-call ids come
    from the index-aligned ``raw_messages`` / ``response``.
    """
    if not isinstance(d, dict) or "messages" not in d or "response" not in d:
        raise RecordError("completion log needs 'messages' and 'response'")
    msgs = chat_messages(d["messages"], "messages")
    prompt_based = isinstance(d.get("raw_response"), dict)
    resp = d["raw_response"] if prompt_based else d["response"]
    try:
        choice = resp["choices"][0]
        rmsg = choice["message"]
        calls_msg = d["response"]["choices"][0]["message"]  # holds the parsed tool calls (see below)
        if not isinstance(rmsg, dict) or not isinstance(calls_msg, dict):
            raise TypeError("the message is not an object")
    except (KeyError, IndexError, TypeError) as e:
        raise RecordError(f"response has no choices[0].message ({e})") from None
    out = chat_messages([{**rmsg, "role": "assistant"}], "response.choices[0].message")[0]
    out.finish_reason = choice.get("finish_reason")
    out.call_id = resp.get("id")
    if prompt_based:
        raw = d.get("raw_messages")
        if isinstance(raw, list) and len(raw) == len(msgs):
            linked = chat_messages(raw, "raw_messages")
            for m, r in zip(msgs, linked):
                if m.role == "assistant" and r.tool_calls:
                    m.tool_calls, m.tool_calls_in_content = r.tool_calls, True
                elif r.role == "tool":
                    m.cause_id = r.cause_id
        # raw_response stops before the tool-call text (stop word ``</function``): the parsed
        # calls of ``response`` are rendered after it
        out.tool_calls = tool_calls_of(calls_msg.get("tool_calls"), "response.choices[0].message.tool_calls")
    msgs.append(out)
    model = resp.get("model") if isinstance(resp.get("model"), str) else None
    # prompt-based tool calling: the SDK already wrote the tools into the system message of `messages`
    tools = None if prompt_based else tool_definitions(d.get("tools"))
    return Conversation(source=SOURCE, key=None, messages=msgs, origin=origin, model=model,
                        created_at=parse_time(d.get("timestamp")), tools=tools,
                        metadata={"tool_calling": "prompt-based" if prompt_based else "native",
                                  "latency_sec": d.get("latency_sec"), "cost": d.get("cost")})


def drop_superseded(convs: list[Conversation]) -> tuple[list[Conversation], list[Conversation]]:
    """Completion logs of one conversation repeat it call after call; keep only the logs whose
    conversation is not the start of another log's conversation in the same directory.

    Returns:
        (kept, superseded).
    """
    def sig(c: Conversation) -> list[tuple[str, str]]:
        return [(m.role, m.content) for m in c.messages]

    def extends(longer: list[tuple[str, str]], s: list[tuple[str, str]]) -> bool:
        # the last (logged) response may lack the tool-call text the next request carries
        if len(longer) <= len(s) or longer[:len(s) - 1] != s[:-1]:
            return False
        (role, text), (role2, text2) = s[-1], longer[len(s) - 1]
        return role == role2 and text2.startswith(text)

    by_dir: dict[str, list[Conversation]] = {}
    for c in convs:
        by_dir.setdefault(os.path.dirname(c.origin.path), []).append(c)
    kept, gone = [], []
    for group in by_dir.values():
        sigs = [sig(c) for c in group]
        for i, c in enumerate(group):
            if any(j != i and extends(o, sigs[i]) for j, o in enumerate(sigs)):
                gone.append(c)
            else:
                kept.append(c)
    return kept, gone


def settle(logs: list[ParsedTrajectory]) -> tuple[list[ParsedTrajectory], Counter[str]]:
    """The completion logs of the whole ingest, once every input is read: those to build (no other
    log of their directory repeats their conversation), and the others counted as
    :data:`SUPERSEDED` (see :func:`drop_superseded`)."""
    kept, superseded = drop_superseded([c for c in logs if isinstance(c, Conversation)])
    return list(kept), Counter({SUPERSEDED: len(superseded)})


def is_completion_log(d: dict[str, Any]) -> bool:
    """A request's ``messages`` and the ``response`` object (a chat row may carry a text ``response``)."""
    return "messages" in d and isinstance(d.get("response"), dict)


V1_COMPLETIONS = InputFormat("openhands-v1-completions", "OpenHands V1 log_completions files", SOURCE,
                          records=Records(parse_completion_log, keys=("messages",), signature=is_completion_log), settle=settle)

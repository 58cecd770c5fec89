"""One model output logged as two assistant messages, rejoined: the rule every chat-like format
shares.

Some harnesses log one response as a text message and then a message that holds only its tool
call (Qwen-Agent and other users of OpenAI's legacy ``function_call`` write
``{"role": "assistant", "content": ""``, ``"function_call": ...}`` after the text). Stored as two
actions they would invent a turn boundary: an end of turn the model never generated and a
template-only observation between. Two adjacent assistant messages are one output when the first
has no tool call and was not logged as stopped (``finish_reason`` none or ``tool_calls``), the
second holds tool calls and nothing else (no text, no reasoning, no context of its own). (Call
ids do not tell: parsers number unnamed calls themselves; a log that does name two calls logs the
first one's stop.) Later messages that answer the second message's id answer the joined one. Any
other adjacent pair stays two calls, and the conversation is flagged ``observations``: what the model was shown between them is
not in the log, or they are one output the log does not let ingest tell apart.
"""

from __future__ import annotations

from dataclasses import replace

from trajstore.ingest.records import Context, Message

CONSECUTIVE_CALLS = ("consecutive assistant messages with nothing logged between them that are not one output "
                     "(text, then only its tool call): stored as separate model calls; what the model was shown "
                     "between them is not logged, or they are one output the log does not tell apart")
"""The ``observations`` flag of a conversation with adjacent model calls left apart."""


def _one_output(a: Message, b: Message) -> bool:
    return (a.role == b.role == "assistant" and not a.tool_calls and not a.tool_calls_in_content
            and a.finish_reason in (None, "tool_calls") and bool(b.tool_calls) and not b.tool_calls_in_content
            and not b.content.strip() and not b.reasoning and b.context is None)


def join_split_outputs(messages: list[Message]) -> tuple[list[Message], int, bool]:
    """`messages` with each output logged as text + tool-call message joined into one assistant
    message (the first's text, reasoning, id and context; the second's tool calls and finish reason).

    Returns:
        (messages, number of joins, whether adjacent assistant messages remain apart). Contexts
        of later calls are joined the same way, so they render as the earlier actions did.
    """
    out: list[Message] = []
    joined = 0
    renamed: dict[str, str] = {}
    for m in messages:
        prev = out[-1] if out else None
        if prev is not None and _one_output(prev, m):
            out[-1] = replace(prev, tool_calls=list(m.tool_calls), finish_reason=m.finish_reason or prev.finish_reason,
                              call_id=prev.call_id or m.call_id)
            if m.call_id and out[-1].call_id != m.call_id:
                renamed[m.call_id] = out[-1].call_id  # type: ignore[assignment]
            joined += 1
            continue
        if m.cause_id in renamed:
            m = replace(m, cause_id=renamed[m.cause_id])
        if m.role == "assistant" and m.context is not None:
            ctx, n, _ = join_split_outputs(m.context.messages)
            if n:
                m = replace(m, context=Context(ctx, m.context.tools, m.context.change))
        out.append(m)
    apart = any(a.role == b.role == "assistant" for a, b in zip(out, out[1:]))
    return out, joined, apart

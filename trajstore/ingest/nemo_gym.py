"""NeMo Gym rollouts (OpenAI Responses API with vLLM token ids) -> engine rollouts.

Output items of type ``message`` / ``function_call`` that carry ``prompt_token_ids``,
``generation_token_ids`` and ``generation_log_probs`` are model calls: the first call's
prompt ids are the prompt span, each call's generation ids (with their log-probs, exactly as
logged) an action span, and the tokens a later call's prompt adds after the previous
generation an observation span. Rows whose token-id lists are empty are text-only and are
turned into a conversation (retokenized). The policy version is not in the logs: action
spans get version 0 and metadata ``policy_version_known: false``.
"""

from __future__ import annotations

import json
from typing import Any

from trajstore.ingest.core import (
    Conversation,
    EngineRollout,
    EngineSegment,
    Message,
    Origin,
    RecordError,
    ToolCall,
    arguments_text,
    float_reward,
    parse_time,
    text_of,
)

UNKNOWN_POLICY_VERSION = 0
"""Stored on action spans of engine rollouts whose logs do not say which version generated them."""


def _input_messages(params: dict[str, Any]) -> list[Message]:
    out: list[Message] = []
    if isinstance(params.get("instructions"), str) and params["instructions"]:
        out.append(Message("system", params["instructions"]))
    inp = params.get("input")
    if isinstance(inp, str):
        out.append(Message("user", inp))
    elif isinstance(inp, list):
        out.extend(_items_to_messages(inp))
    return out


def _items_to_messages(items: list[Any]) -> list[Message]:
    out: list[Message] = []
    cur: Message | None = None  # consecutive reasoning/message/function_call items = one model call
    for i, it in enumerate(items):
        if not isinstance(it, dict):
            raise RecordError(f"item {i} is not an object")
        typ = it.get("type", "message")
        role = it.get("role")
        if typ == "message" and role in ("system", "developer", "user"):
            out.append(Message("system" if role != "user" else "user", text_of(it.get("content"))))
            cur = None
        elif typ in ("message", "reasoning", "function_call"):
            if cur is None:
                cur = Message("assistant", "", call_id=it.get("id"))
                out.append(cur)
            if typ == "reasoning":
                cur.reasoning = (cur.reasoning or "") + "".join(text_of(s.get("text")) for s in it.get("summary") or []
                                                               if isinstance(s, dict))
            elif typ == "message":
                cur.content += text_of(it.get("content"))
            else:
                cur.tool_calls.append(ToolCall(str(it.get("call_id")), str(it.get("name")),
                                               arguments_text(it.get("arguments", ""))))
        elif typ == "function_call_output":
            out.append(Message("tool", text_of(it.get("output")), cause_id=str(it.get("call_id"))))
            cur = None
        else:
            raise RecordError(f"item {i}: unknown item type {typ!r}")
    return out


def parse_rollout(row: Any, origin: Origin) -> EngineRollout | Conversation:
    """One NeMo Gym rollout line; reward = ``reward``.

    Raises:
        RecordError: missing ``response.output``, mismatched ids / log-probs lengths, or a call
            whose prompt does not extend the previous call's prompt + generation.
    """
    if not isinstance(row, dict) or not isinstance(row.get("response"), dict):
        raise RecordError("NeMo Gym row has no 'response' object")
    resp = row["response"]
    output = resp.get("output")
    if not isinstance(output, list):
        raise RecordError("response.output is not a list")
    params = row.get("responses_create_params") if isinstance(row.get("responses_create_params"), dict) else {}
    reward = float_reward(row.get("reward"))
    key = None
    for k in ("problem_id", "id", "_ng_task_index"):
        if row.get(k) is not None:
            key = f"{row[k]}"
            break
    if row.get("_ng_rollout_index") is not None:
        key = f"{key}-r{row['_ng_rollout_index']}"
    model = resp.get("model") if isinstance(resp.get("model"), str) else None
    created = parse_time(resp.get("created_at"))
    meta = {k: row.get(k) for k in ("problem_id", "competition_id", "subtask", "subtask_score", "turns_used",
                                    "finished_naturally", "expected_answer", "extracted_answer", "_ng_task_index",
                                    "_ng_rollout_index") if k in row}
    status = "completed" if resp.get("status") in (None, "completed") else "truncated"
    calls = [it for it in output if isinstance(it, dict) and it.get("generation_token_ids")]
    if not calls:  # text-only rows (token id fields absent or empty)
        msgs = _input_messages(params) + _items_to_messages(output)
        return Conversation(source="nemo-gym", key=key, messages=msgs, origin=origin, reward=reward, model=model,
                            created_at=created, status=status, prompt_id=key,
                            metadata={**meta, "engine_token_ids": "absent"})
    segs: list[EngineSegment] = []
    seen: list[int] = []
    for n, it in enumerate(calls):
        p = it.get("prompt_token_ids") or []
        g = it["generation_token_ids"]
        lp = it.get("generation_log_probs")
        if not isinstance(lp, list) or len(lp) != len(g):
            raise RecordError(f"output call {n} ({it.get('id')}): {len(g)} generation_token_ids but "
                              f"{len(lp) if isinstance(lp, list) else 'no'} generation_log_probs")
        if n == 0:
            if not p:
                raise RecordError("first call has no prompt_token_ids")
            segs.append(EngineSegment("prompt", list(p), role="user"))
        else:
            if p[:len(seen)] != seen:
                raise RecordError(f"output call {n}: prompt_token_ids do not extend the previous call's "
                                  "prompt + generation (the template is not append-only); cannot join calls")
            extra = p[len(seen):]
            if extra:
                segs.append(EngineSegment("observation", list(extra), role="tool", cause_id=segs[-1].call_id))
        segs.append(EngineSegment("action", list(g), [float(x) for x in lp], role="assistant",
                                  call_id=str(it.get("id")), finish_reason=it.get("status"),
                                  temperature=resp.get("temperature"), top_p=resp.get("top_p")))
        seen = list(p) + list(g)
    return EngineRollout(source="nemo-gym", key=key, segments=segs, origin=origin, reward=reward, model=model,
                         created_at=created, status=status, prompt_id=key,
                         metadata={**meta, "policy_version_known": False,
                                   "params": json.dumps({k: params.get(k) for k in ("temperature", "top_p",
                                                                                    "max_output_tokens")})})

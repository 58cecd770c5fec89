"""NeMo Gym rollouts (OpenAI Responses API, vLLM token ids when logged) -> engine rollouts or
conversations.

Model calls: the ``response.output`` items of one call are its reasoning, at most one
``message`` and its ``function_call`` s, in whatever order the log lists them (a call is one
action: reasoning first, then text, then tool calls, closed by its own end of turn). A call ends
at a ``function_call_output`` or user message; a new call starts at a ``message`` item when the
current call already has one (agent loops that log one message per step, e.g. ``msg-step-N``),
at a ``reasoning`` item when the current call already has reasoning or a message, and at an item
whose token ids differ from the call's. A ``reasoning`` item right after a call's function
call(s) belongs to that call: some environments (``conversational_tool_use_simulation``) log the
reasoning after the call it led to, and nothing can reach the model between the two (flagged
``item_order``: the order the model produced them in is not logged).

Engine token ids are all-or-nothing per rollout: when every call carries real ids
(``prompt_token_ids``, ``generation_token_ids``, ``generation_log_probs``), the first call's
prompt ids are the prompt span, each call's generation ids (with their log-probs, exactly as
logged) an action span, and the tokens a later call's prompt adds after the previous prompt +
generation an observation span (a prompt that does not extend them starts a new trajectory of
the episode). Otherwise (no ids, placeholder ids such as ``[0]``, or only some calls with ids)
the rollout is a text conversation, re-tokenized, and metadata says which ids were discarded.
The policy version is not in the logs: action spans carry none (null) and metadata says
``policy_version_known: false``; their staleness is undefined.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from trajstore.ingest.formats.chat import arguments_text, text_of, tool_definitions
from trajstore.ingest.formats.engine_chain import EngineChain
from trajstore.ingest.formats.rewards import float_reward
from trajstore.ingest.formats.spec import InputFormat, Records
from trajstore.ingest.records import Context, Conversation, EngineRollout, Message, Origin, RecordError, ToolCall
from trajstore.ingest.values import json_type, parse_time, text_or_none

SOURCE = "nemo-gym"
HARNESS_CALL_COUNTS = ("turns_used",)
"""Row fields in which a NeMo Gym agent records its own number of model calls."""


@dataclass
class _Call:
    """One model call read from output items: its assistant message and engine ids."""

    message: Message
    prompt_ids: list[int] | None = None
    generation_ids: list[int] | None = None
    logprobs: list[Any] | None = None
    has_message: bool = False
    has_reasoning: bool = False
    reasoning_after_call: bool = False  # a reasoning item came after this call's function call(s)
    placeholder: bool = False
    status: str | None = None
    items: list[str] = field(default_factory=list)


def _ids(it: dict[str, Any]) -> tuple[list[int], list[int], Any] | None:
    g = it.get("generation_token_ids")
    if not isinstance(g, list) or not g:
        return None
    if it.get("prompt_token_ids") is not None and not isinstance(it["prompt_token_ids"], list):
        raise RecordError(f"an output item's prompt_token_ids is {json_type(it['prompt_token_ids'])}, "
                          "expected a list of token ids")
    return list(it.get("prompt_token_ids") or []), list(g), it.get("generation_log_probs")


def _is_placeholder(ids: tuple[list[int], list[int], Any]) -> bool:
    # a real prompt holds at least the chat template's role header; an empty or [0] prompt is a
    # stand-in (a one-token prompt of another id is read as real: too short to judge)
    return len(ids[0]) <= 1 and all(x == 0 for x in ids[0])


def _read_items(items: list[Any], where: str) -> tuple[list[Message], list[_Call]]:
    """Messages and model calls from Responses-API items."""
    out: list[Message] = []
    calls: list[_Call] = []
    cur: _Call | None = None
    for i, it in enumerate(items):
        if not isinstance(it, dict):
            raise RecordError(f"{where}[{i}] is not an object")
        typ = it.get("type", "message")
        role = it.get("role")
        if typ == "message" and role in ("system", "developer", "user"):
            out.append(Message("system" if role != "user" else "user", text_of(it.get("content"))))
            cur = None
            continue
        if typ == "function_call_output":
            out.append(Message("tool", text_of(it.get("output")), cause_id=str(it.get("call_id"))))
            cur = None
            continue
        if typ not in ("message", "reasoning", "function_call"):
            raise RecordError(f"{where}[{i}]: unknown item type {typ!r}")
        ids = _ids(it)
        new = (cur is None or (typ == "message" and cur.has_message)
               or (typ == "reasoning" and (cur.has_reasoning or cur.has_message))
               or (ids is not None and cur.generation_ids is not None and ids[1] != cur.generation_ids))
        if new:
            cur = _Call(Message("assistant", "", call_id=it.get("id")))
            calls.append(cur)
            out.append(cur.message)
        assert cur is not None
        cur.items.append(str(it.get("id")))
        if isinstance(it.get("status"), str):
            cur.status = it["status"]
        if ids is not None and cur.generation_ids is None:
            cur.prompt_ids, cur.generation_ids, cur.logprobs = ids
            cur.placeholder = _is_placeholder(ids)
        m = cur.message
        if typ == "reasoning":
            parts = [text_of(s.get("text")) for s in it.get("summary") or [] if isinstance(s, dict)]
            parts += [text_of(s.get("text")) for s in it.get("content") or [] if isinstance(s, dict)]
            m.reasoning = ((m.reasoning + "\n") if m.reasoning else "") + "".join(parts)
            cur.has_reasoning = True
            cur.reasoning_after_call = bool(m.tool_calls)
        elif typ == "message":
            m.content += text_of(it.get("content"))
            cur.has_message = True
            if m.call_id is None:
                m.call_id = it.get("id")
        else:
            m.tool_calls.append(ToolCall(str(it.get("call_id")), str(it.get("name")),
                                         arguments_text(it.get("arguments", ""))))
    return out, calls


def _status(row: dict[str, Any], resp: dict[str, Any]) -> str:
    """failed on a response / harness error; truncated when the row or response says so; else completed."""
    vm = row.get("verifier_metadata") if isinstance(row.get("verifier_metadata"), dict) else {}
    if resp.get("error") or vm.get("osworld_error"):
        return "failed"
    if row.get("truncated") is True or resp.get("status") == "incomplete" or resp.get("incomplete_details"):
        return "truncated"
    if resp.get("status") not in (None, "completed"):
        return "failed" if resp.get("status") == "failed" else "aborted"
    return "completed"


def harness_call_count(row: dict[str, Any]) -> int | None:
    """The agent's own count of model calls, when the row records one (``turns_used``, the
    number of ``verifier_metadata.osworld_steps``)."""
    for k in HARNESS_CALL_COUNTS:
        if isinstance(row.get(k), int) and not isinstance(row.get(k), bool):
            return int(row[k])
    vm = row.get("verifier_metadata")
    if isinstance(vm, dict) and isinstance(vm.get("osworld_steps"), list):
        return len(vm["osworld_steps"])
    return None


def parse_rollout(row: Any, origin: Origin) -> EngineRollout | Conversation:
    """One NeMo Gym rollout line; reward = ``reward``.

    Raises:
        RecordError: missing ``response.output``, an unknown item type, or a call whose
            generation ids and log-probs differ in length.
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
    model = text_or_none(resp.get("model")) or text_or_none(params.get("model"))  # tau2 writes model: ""
    created = parse_time(resp.get("created_at"))
    meta: dict[str, Any] = {k: row.get(k) for k in (
        "problem_id", "competition_id", "subtask", "subtask_score", "turns_used", "finished_naturally",
        "expected_answer", "extracted_answer", "terminated", "truncated", "_ng_task_index", "_ng_rollout_index")
        if k in row}
    n_harness = harness_call_count(row)
    if n_harness is not None:
        meta["harness_model_calls"] = n_harness
    status = _status(row, resp)
    tools = tool_definitions(params.get("tools")) or tool_definitions(resp.get("tools"))

    prompt: list[Message] = []
    if isinstance(params.get("instructions"), str) and params["instructions"]:
        prompt.append(Message("system", params["instructions"]))
    inp = params.get("input")
    if isinstance(inp, str):
        prompt.append(Message("user", inp))
    elif isinstance(inp, list):
        prompt += _read_items(inp, "responses_create_params.input")[0]
    msgs, calls = _read_items(output, "response.output")
    gaps: dict[str, str] = {}
    after = sum(c.reasoning_after_call for c in calls)
    if after:
        gaps["item_order"] = (f"{after} reasoning item(s) logged after the function call they led to, with nothing "
                              "between: each is stored with its call, before it (the order the model produced "
                              "them in is not logged)")

    real = [c for c in calls if c.generation_ids is not None and not c.placeholder]
    if calls and len(real) == len(calls):
        return _engine_rollout(calls, resp, params, row, key=key, origin=origin, reward=reward, model=model,
                               created=created, status=status, meta=meta)

    placeholders = [c for c in calls if c.placeholder]
    if real or placeholders:
        meta["engine_token_ids_discarded"] = (
            f"{len(real)} of {len(calls)} model calls carry token ids ({len(placeholders)} placeholder(s) such as "
            "[0]): engine ids are used only when every call has them; the conversation is re-tokenized")
    # a placeholder call that generated nothing is no model turn of the conversation
    dropped = {id(c.message) for c in placeholders
               if not c.message.content and not c.message.tool_calls and not c.message.reasoning}
    msgs = [m for m in msgs if id(m) not in dropped]
    if dropped:
        meta["placeholder_calls_dropped"] = len(dropped)
    prev = None
    for m in msgs:
        if m.role == "assistant" and prev is not None and prev.role == "assistant":
            gaps["observations"] = ("consecutive model calls with nothing logged between them: what the "
                                    "environment showed the model after each step (e.g. screenshots) is not logged")
        prev = m
    if any(m.role == "assistant" for m in prompt):
        # earlier turns given as input are context, not calls of this rollout
        first = next((m for m in msgs if m.role == "assistant"), None)
        if first is not None:
            first.context = Context(prompt + msgs[:msgs.index(first)], tools, "input-history")
            msgs = msgs[msgs.index(first):]
    else:
        msgs = prompt + msgs
    if not msgs:
        raise RecordError("no input or output messages")
    return Conversation(source=SOURCE, key=key, messages=msgs, origin=origin, reward=reward, model=model,
                        created_at=created, status=status, prompt_id=key, tools=tools, fidelity_gaps=gaps,
                        metadata={**meta, "engine_token_ids": "absent" if not real else "discarded"})


def _engine_rollout(calls: list[_Call], resp: dict[str, Any], params: dict[str, Any], row: dict[str, Any], *,
                    key: str | None, origin: Origin, reward: Any, model: str | None, created: Any, status: str,
                    meta: dict[str, Any]) -> EngineRollout:
    chain = EngineChain(prompt_role="user")  # a prompt that rewrote the history starts a new context
    for n, c in enumerate(calls):
        assert c.prompt_ids is not None and c.generation_ids is not None
        p, g, lp = c.prompt_ids, c.generation_ids, c.logprobs
        if lp is not None and (not isinstance(lp, list) or len(lp) != len(g)):
            raise RecordError(f"output call {n} ({c.message.call_id}): {len(g)} generation_token_ids but "
                              f"{len(lp) if isinstance(lp, list) else 'no'} generation_log_probs")
        chain.add(p, g, list(lp) if lp is not None else None, call_id=str(c.message.call_id),
                  tool_call_ids=[t.id for t in c.message.tool_calls if t.id], finish_reason=c.status,
                  temperature=resp.get("temperature"), top_p=resp.get("top_p"))
    named = row.get("tokenizer") if isinstance(row.get("tokenizer"), str) else None
    md = params.get("metadata") if isinstance(params.get("metadata"), dict) else {}
    named = named or (md.get("tokenizer") if isinstance(md.get("tokenizer"), str) else None)
    return EngineRollout(source=SOURCE, key=key, segments=chain.segments, origin=origin, reward=reward, model=model,
                         created_at=created, status=status, prompt_id=key, tokenizer=named,
                         metadata={**meta, "policy_version_known": False,
                                   "params": json.dumps({k: params.get(k) for k in ("temperature", "top_p",
                                                                                    "max_output_tokens")})})


NEMO_GYM = InputFormat("nemo-gym", "NeMo Gym rollouts with engine token ids", SOURCE,
                       records=Records(parse_rollout, keys=("responses_create_params",), signature=lambda d: "responses_create_params" in d and "response" in d))

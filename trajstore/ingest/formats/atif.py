"""ATIF ``trajectory.json`` (Agent Trajectory Interchange Format, Harbor / Terminal-Bench) ->
engine rollouts or conversations.

An ATIF document is ``{"schema_version": "ATIF-v1.x", "session_id", "agent", "steps": [...]}``;
each step has ``source`` system | user | agent, a ``message``, and agent steps may carry
``tool_calls`` (``tool_call_id``, ``function_name``, ``arguments``), an ``observation``
(``results`` answering ``source_call_id``) and ``metrics``. Since v1.3 / v1.4 ``metrics`` can
hold ``completion_token_ids``, ``logprobs`` and ``prompt_token_ids`` (the whole context sent).

Engine tokens: when every agent step has ``prompt_token_ids`` and ``completion_token_ids``, and
each step's prompt extends the previous prompt + completion, the trajectory is built from them
(``token_source = engine``): the first prompt is the prompt span, each completion an action
span with its ``logprobs`` as engine log-probs, and what a later prompt adds an observation
span. The last step's observation reached no model call, so it has no token ids and is not
stored (noted in metadata). Otherwise the steps become a chat, re-tokenized, and the reason
the engine ids were not used is kept in metadata (``engine_token_ids_discarded``, counted as
``engine_ids_discarded``). Token ids are read per lineage (see :func:`parse_trajectory`).

Steps are read in ``step_id`` order. A Harbor trial keeps its score next to the agent
directory (``<trial>/verifier/reward.txt``); when present it is the reward. Its ``result.json``
keeps the exception that ended the run, if any: that sets the status; otherwise the status is
``completed`` only when the log shows the agent finished (ATIF has no status field).

What the producing agent puts in the steps beyond the format (which text the model really wrote,
whether reasoning went back to it, what ends a run) is :mod:`~trajstore.ingest.formats.atif_agents`'s:
the chat is built from the steps with those conventions; ``agent.tool_definitions`` are the
tools; ``source: system`` steps after the task are harness notes (metadata ``harness_notes``),
never messages; results such a step carries (ATIF 1.2+) are the observation of the tool call they
answer, or kept with the note. Context rewrites, copied context, sub-agent and continuation files,
sub-agent trajectories embedded in the file (ATIF 1.7) and a log with no evidence of a model call:
see :func:`parse_trajectory`. The same document streamed as JSONL (a header line, then one step per
line) is read by :func:`parse_stream`.
"""

from __future__ import annotations

import json
import os
from typing import Any

from trajstore.ingest.formats.atif_agents import Conventions, conventions_for, run_status
from trajstore.ingest.formats.atif_exported import exported_fields
from trajstore.ingest.formats.atif_harbor import (
    harbor_exception,
    harbor_reward,
    harbor_reward_file,
    harbor_trial_result,
)
from trajstore.ingest.formats.atif_stream import index_file, is_stream_line, stream_document
from trajstore.ingest.formats.chat import arguments_text, drop_sent_back_reasoning, text_of, tool_definitions
from trajstore.ingest.formats.engine_chain import EngineChain
from trajstore.ingest.formats.spec import Events, InputFormat, NoTrajectory, Records
from trajstore.ingest.records import (
    Context,
    Conversation,
    EngineRollout,
    EngineSegment,
    Message,
    Origin,
    ParsedLineage,
    RecordError,
    ToolCall,
)
from trajstore.ingest.summary import ENGINE_IDS_DISCARDED_KEY, NO_MODEL_CALL
from trajstore.ingest.values import json_type, order_by_id, parse_time, text_or_none
from trajstore.models import CallUsage

SOURCE = "atif"


def _steps(d: dict[str, Any]) -> list[dict[str, Any]]:
    steps = d.get("steps")
    if not isinstance(steps, list):
        raise RecordError("ATIF trajectory has no 'steps' list")
    for i, s in enumerate(steps):
        if not isinstance(s, dict) or s.get("source") not in ("system", "user", "agent"):
            raise RecordError(f"steps[{i}] has no valid 'source' (system, user or agent)")
        if s.get("tool_calls") is not None and not isinstance(s["tool_calls"], list):
            raise RecordError(f"steps[{i}].tool_calls is {json_type(s['tool_calls'])}, expected a list of tool calls "
                              "(objects with tool_call_id, function_name, arguments)")
    ordered, _ = order_by_id(steps, key="step_id", what="step")
    return ordered


def _metrics(step: dict[str, Any]) -> dict[str, Any]:
    m = step.get("metrics")
    return m if isinstance(m, dict) else {}


def _engine_segments(steps: list[dict[str, Any]]) -> tuple[list[EngineSegment] | None, str]:
    """Engine segments from the agent steps' token ids, or (None, why not)."""
    agents = [s for s in steps if s["source"] == "agent"]
    if not agents:
        return None, "no agent step"
    chain = EngineChain(prompt_role="user")
    for n, s in enumerate(agents):
        m = _metrics(s)
        p, c = m.get("prompt_token_ids"), m.get("completion_token_ids")
        if not isinstance(c, list):
            return None, f"agent step {s.get('step_id')} has no completion_token_ids"
        if not isinstance(p, list):
            return None, f"agent step {s.get('step_id')} has no prompt_token_ids"
        cid = str(s.get("step_id"))
        lp = m.get("logprobs")
        if n == 0 and not p:
            return None, f"agent step {s.get('step_id')} has empty prompt_token_ids"
        if n and not chain.extends(p):
            return None, (f"agent step {s.get('step_id')}: prompt_token_ids do not extend the previous step's "
                          "prompt + completion (ids that do not chain within one lineage)")
        if not c:
            return None, f"agent step {s.get('step_id')} has no completion tokens"
        ids = [str(tc["tool_call_id"]) for tc in s.get("tool_calls") or []
               if isinstance(tc, dict) and tc.get("tool_call_id")]
        usage = CallUsage.from_openai({"prompt_tokens": m.get("prompt_tokens"), "completion_tokens": m.get("completion_tokens"),
                                       "prompt_tokens_details": {"cached_tokens": m.get("cached_tokens")}})
        chain.add(p, c, list(lp) if isinstance(lp, list) else None, call_id=cid, tool_call_ids=ids, usage=usage)
    return chain.segments, ""


NOTE_OBSERVATION_CHARS = 200_000
"""Characters of each result a harness note keeps in metadata (as many as an observation keeps at
ingest by default; the rest is counted, not kept)."""


def _results(step: dict[str, Any]) -> list[dict[str, Any]]:
    """The step's ``observation.results`` that hold text (a bare pointer to a sub-agent's
    trajectory is no text the model read).

    Raises:
        RecordError: a result that is not an object.
    """
    obs = step.get("observation")
    out = []
    for k, r in enumerate(obs.get("results") or [] if isinstance(obs, dict) else []):
        if not isinstance(r, dict):
            raise RecordError(f"step {step.get('step_id')}: observation.results[{k}] is not an object")
        if "content" not in r and r.get("subagent_trajectory_ref"):
            continue
        out.append(r)
    return out


def _system_step(step: dict[str, Any], text: str, issued: set[str], full: list[tuple[Message, bool]], *,
                 as_note: bool) -> dict[str, Any] | None:
    """The results a ``source: system`` step carries (ATIF 1.2+): one answering a tool call an agent
    step made is that call's observation (added to `full`); the others are kept, with their
    content, in the step's harness note. Returns the note (None for a step that is no note: one
    that only carries tool results, or one before the conversation began, kept as a message,
    carrying no other result)."""
    kept, answered = [], 0
    for r in _results(step):
        content = text_of(r.get("content"))
        if r.get("source_call_id") is not None and str(r["source_call_id"]) in issued:
            full.append((Message("tool", content, cause_id=str(r["source_call_id"])), False))
            answered += 1
            continue
        cut = len(content) - NOTE_OBSERVATION_CHARS
        kept.append(content if cut <= 0 else content[:NOTE_OBSERVATION_CHARS] + f"[... {cut} characters not kept ...]")
    if not kept and (answered or not as_note):  # a step that only carries tool results is no note
        return None
    note: dict[str, Any] = {"step_id": step.get("step_id"), "message": text[:200]}
    if kept:
        note["results"] = kept
    return note


def _messages(steps: list[dict[str, Any]], replayed: list[bool], conv: Conventions,
              prefix: list[Message], change: str, tools: Any) -> tuple[list[Message], list[dict[str, Any]], int]:
    """The chat of the steps, the harness notes left out of it (``source: system`` steps after the
    conversation began) and how many agent steps are reconstructions (:mod:`~trajstore.ingest.formats.atif_agents`).

    `prefix` (messages the context was reset to) and the `replayed` steps (copied from another
    log) are context, never calls: the first call of this file after an assistant message of that
    context is given the whole context it was sent (a :class:`Context` of change `change`)."""
    full: list[tuple[Message, bool]] = [(m, m.role == "assistant") for m in prefix]
    notes: list[dict[str, Any]] = []
    rebuilt = 0
    begun = bool(prefix)
    issued: set[str] = {t.id for m in prefix for t in m.tool_calls if t.id}
    for s, copied in zip(steps, replayed):
        src = s["source"]
        text = text_of(s.get("message"))
        if src == "system":
            note = _system_step(s, text, issued, full, as_note=begun)
            if note:
                notes.append(note)
            if begun:
                continue
        if src in ("system", "user"):
            begun = begun or src == "user"
            full.append((Message(src, text, call_id=str(s.get("step_id"))), False))
            continue
        begun = True
        calls = []
        for k, tc in enumerate(s.get("tool_calls") or []):
            if not isinstance(tc, dict) or not isinstance(tc.get("function_name"), str):
                raise RecordError(f"step {s.get('step_id')}: tool_calls[{k}] has no function_name")
            calls.append(ToolCall(str(tc["tool_call_id"]) if tc.get("tool_call_id") else None, tc["function_name"],
                                  arguments_text(tc.get("arguments", {}))))
        reasoning = s.get("reasoning_content") if isinstance(s.get("reasoning_content"), str) else None
        cid = str(s.get("step_id"))
        said = conv.agent_text(s, text)
        rebuilt += said.rebuilt and not copied
        full.append((Message("assistant", said.content, reasoning=reasoning or None, tool_calls=calls, call_id=cid,
                             tool_calls_in_content=said.calls_in_content), copied))
        issued.update(t.id for t in calls if t.id)
        for r in _results(s):
            src_call = r.get("source_call_id")
            full.append((Message("tool" if src_call else "user", text_of(r.get("content")),
                                 cause_id=str(src_call) if src_call else cid), False))
    msgs: list[Message] = []
    context_since = False  # an assistant message of the context since the last call of this file
    for i, (m, ctx) in enumerate(full):
        if ctx:
            context_since = True
            continue
        if m.role == "assistant" and context_since:
            m.context = Context([x for x, _ in full[:i]], tools, change)
            context_since = False
        msgs.append(m)
    return msgs, notes, rebuilt


def _chat_gaps(msgs: list[Message], tools: Any, notes: list[dict[str, Any]], rebuilt: int,
               conv: Conventions) -> dict[str, str]:
    gaps: dict[str, str] = {}
    if rebuilt:
        gaps["action_text"] = conv.rebuilt_reason()
    if conv.native_tools and not tools and any(m.tool_calls for m in msgs):
        gaps["tools"] = "the file has no agent.tool_definitions: the tool definitions the agent sent are not logged"
    if conv.system_prompt_expected and not any(m.role == "system" for m in msgs):
        gaps["system_prompt"] = "no system step: the agent's system prompt is not in the trajectory"
    if notes and conv.notes_stand_for_context:
        kept = sum(len(n.get("results") or []) for n in notes)
        gaps["harness_notes"] = (
            f"{len(notes)} system step(s) ({notes[0]['message'][:60]!r}, ...) carry results no agent step's tool call "
            f"asked for or are the harness's notes: their {kept} result(s) are kept with them in metadata "
            "harness_notes; whether and how the harness sent them to a model is not in the file" if kept else
            f"{len(notes)} system step(s) after the task ({notes[0]['message'][:60]!r}, ...) are the harness's notes, "
            "not stored as messages: what it sent the model for them, if anything, is not in the file")
    calls = [m for m in msgs if m.role == "assistant"]
    if conv.reasoning_sent_back is None and any(m.reasoning for m in calls[:-1]):
        gaps["reasoning"] = ("ATIF does not record whether the agent sent reasoning_content back in later calls: kept "
                             "in the later contexts")
    return gaps


def _is_subagent_note(step: dict[str, Any]) -> bool:
    obs = step.get("observation")
    return step["source"] == "system" and isinstance(obs, dict) and any(
        isinstance(r, dict) and r.get("subagent_trajectory_ref") for r in obs.get("results") or [])


def _refs(step: dict[str, Any]) -> list[dict[str, Any]]:
    obs = step.get("observation") if isinstance(step.get("observation"), dict) else {}
    return [ref for r in obs.get("results") or [] if isinstance(r, dict)
            for ref in r.get("subagent_trajectory_ref") or [] if isinstance(ref, dict)]


def _sibling(path: str, name: Any) -> str | None:
    """The file `name` (a ref's ``trajectory_path``; only its last component) next to `path`."""
    return os.path.join(os.path.dirname(os.path.abspath(path)), os.path.basename(name)) if name else None


def _read_sibling(path: str, ref: dict[str, Any]) -> Any:
    f = _sibling(path, ref.get("trajectory_path"))
    try:
        with open(f, encoding="utf-8") as fh:  # type: ignore[arg-type]
            return json.load(fh)
    except (OSError, TypeError, ValueError):
        return None


def _record(steps: list[dict[str, Any]], replayed: list[bool], conv: Conventions, prefix: list[Message],
            change: str, tools: Any, fields: dict[str, Any], meta: dict[str, Any]) -> EngineRollout | Conversation:
    """One lineage of the file (all its steps, or those between two context rewrites)."""
    meta = dict(meta)
    own = [s for s, r in zip(steps, replayed) if not r]
    segs, why_not = _engine_segments(own)
    if segs is not None:
        last = next(s for s in reversed(own) if s["source"] == "agent")
        if isinstance(last.get("observation"), dict) and last["observation"].get("results"):
            meta["last_observation"] = "not stored: it reached no model call, so it has no token ids"
        return EngineRollout(segments=segs, metadata=meta, **fields)  # policy versions: exported_fields
    if any("completion_token_ids" in _metrics(s) for s in own):
        meta[ENGINE_IDS_DISCARDED_KEY] = f"not used: {why_not}; re-tokenized from the messages"
    msgs, notes, rebuilt = _messages(steps, replayed, conv, prefix, change, tools)
    gaps = _chat_gaps(msgs, tools, notes, rebuilt, conv)
    if notes:
        meta["harness_notes"] = notes
    if rebuilt:
        meta["reconstructed_actions"] = rebuilt
    if conv.reasoning_sent_back is False and drop_sent_back_reasoning(msgs, tools):
        meta["reasoning_sent_back"] = False  # each later call's context lacks the earlier calls' reasoning
    return Conversation(messages=msgs, tools=tools, metadata=meta, fidelity_gaps=gaps, **fields)


def parse_trajectory(d: Any, origin: Origin) -> list[EngineRollout | Conversation]:
    """One ATIF trajectory document: one record per lineage of it (usually one), then those of
    the sub-agent trajectories it embeds (ATIF 1.7 ``subagent_trajectories``).

    A context rewrite the producing agent logs (a Terminus-2 summarisation: a harness note pointing
    to the summarisation sub-agents' files) ends a lineage; the calls after it are the next
    record, whose context is the one the agent reset it to. Steps copied from another log
    (``is_copied_context``; a Terminus-2 sub-agent's replay of the main agent's history) are
    context, never calls. Engine token ids are used per lineage, where they chain within it.
    Records that belong to a tree of records carry a :class:`~trajstore.ingest.records.ParsedLineage`:
    a lineage after a rewrite is the child (``context_rewrite``) of the one before; the sub-agent
    files a note points to, and the embedded sub-agent trajectories a ref names by
    ``trajectory_id``, are ``subagent`` children of the lineage whose step points to them (an
    embedded one no step names: of the document's first); the file named by
    ``continued_trajectory_ref`` (Harbor's ``linear_history``) is the ``continuation`` of the last.
    A document with no evidence of a model call (:func:`no_model_call`) is flagged ``no_model_call``.

    Raises:
        RecordError: no ``steps`` list, a step without a valid ``source``, two steps sharing a
            ``step_id``, a malformed tool call / observation, or an embedded sub-agent trajectory
            without a ``trajectory_id``.
    """
    return _document(d, origin, os.path.abspath(origin.path), embedded=False)


def _embedded(d: dict[str, Any]) -> list[dict[str, Any]]:
    subs = d.get("subagent_trajectories")
    if subs is None:
        return []
    if not isinstance(subs, list):
        raise RecordError(f"subagent_trajectories is {json_type(subs)}, expected a list of trajectories")
    for k, sub in enumerate(subs):
        if not isinstance(sub, dict) or not text_or_none(sub.get("trajectory_id")):
            raise RecordError(f"subagent_trajectories[{k}] has no trajectory_id (required on an embedded sub-agent)")
    return subs


def _evidence_of_calls(step: dict[str, Any]) -> bool:
    m = _metrics(step)
    return any(isinstance(m.get(k), (int, float)) and not isinstance(m.get(k), bool) and m[k] > 0
               for k in ("prompt_tokens", "completion_tokens", "cost_usd")) or any(
        m.get(k) for k in ("completion_token_ids", "prompt_token_ids", "logprobs"))


def no_model_call(d: dict[str, Any], steps: list[dict[str, Any]], final_metrics: Any = None) -> str | None:
    """Why the agent steps of an ATIF document are not known to be a model's output, or None:
    every agent step says it made no model call (``llm_call_count`` 0, ATIF 1.7's deterministic
    dispatch), or the document reports 0 prompt and 0 completion tokens (``final_metrics``, or the
    given one of a stream's index) and no agent step has model metrics."""
    agents = [s for s in steps if s["source"] == "agent"]
    if not agents or any(_evidence_of_calls(s) for s in agents):
        return None
    if all(s.get("llm_call_count") == 0 for s in agents):
        return "every agent step has llm_call_count 0: deterministic dispatch, no model call"
    fm = d.get("final_metrics") if isinstance(d.get("final_metrics"), dict) else final_metrics
    if isinstance(fm, dict) and fm.get("total_prompt_tokens") == 0 and fm.get("total_completion_tokens") == 0:
        return ("the file reports 0 prompt and 0 completion tokens and no agent step has model metrics: no evidence "
                "that a model produced its agent steps (a deterministic orchestrator's log?)")
    return None


def _document(d: Any, origin: Origin, key: str, *, embedded: bool, session: str | None = None,
              final_metrics: Any = None) -> list[EngineRollout | Conversation]:
    """The records of one ATIF document (the file's, or one it embeds) whose first lineage's key
    is `key`: its own lineages, then its embedded sub-agents' (see :func:`parse_trajectory`)."""
    if not isinstance(d, dict):
        raise RecordError("ATIF trajectory is not an object")
    steps = _steps(d)
    subs = _embedded(d)
    agent = d["agent"] if isinstance(d.get("agent"), dict) else {}
    conv = conventions_for(agent)
    model = text_or_none(agent.get("model_name"))
    model = model or next((s["model_name"] for s in steps if text_or_none(s.get("model_name"))), None)
    own_key = str(d["session_id"]) if d.get("session_id") else None
    if embedded:  # session_id is run-scoped: shared with the parent, or left out
        own_key = f"{own_key or session}/{d['trajectory_id']}" if (own_key or session) else str(d["trajectory_id"])
    meta: dict[str, Any] = {"schema_version": d.get("schema_version"), "session_id": d.get("session_id") or session,
                            "agent": {k: agent.get(k) for k in ("name", "version") if k in agent},
                            "final_metrics": d.get("final_metrics") if isinstance(d.get("final_metrics"), dict) else None}
    if d.get("trajectory_id"):
        meta["trajectory_id"] = d["trajectory_id"]
    created = parse_time(next((s.get("timestamp") for s in reversed(steps) if s.get("timestamp")), None))
    status, meta["status_evidence"] = run_status(conv, steps, harbor_exception(origin.path))
    reward_file = harbor_reward_file(origin.path)
    fields = {"source": SOURCE, "key": own_key, "origin": origin, "reward": harbor_reward(origin.path),
              "model": model, "created_at": created, "prompt_id": own_key, "status": status,
              "read_files": (reward_file,) if os.path.isfile(reward_file) else ()}
    tools = tool_definitions(agent.get("tool_definitions"))
    replayed = conv.replayed(steps)
    cuts = [i for i, s in enumerate(steps) if conv.rewrites_at_subagent_note and _is_subagent_note(s)
            and any(x["source"] == "agent" for x in steps[i + 1:])]
    first = next((s for s in steps if s["source"] in ("system", "user")), None)
    bounds = list(zip([0] + [c + 1 for c in cuts], [c + 1 for c in cuts] + [len(steps)]))
    records: list[EngineRollout | Conversation] = []
    for n, (lo, hi) in enumerate(bounds):
        prefix: list[Message] = []
        gap = None
        if n:
            reset, gap = conv.context_after_rewrite(first, steps[lo - 1], lambda ref: _read_sibling(origin.path, ref))
            prefix = [Message(m["role"], text_of(m.get("content"))) for m in reset]
        part_meta = {**meta, "context_rewritten_at": steps[lo - 1].get("step_id")} if n else meta
        rec = _record(steps[lo:hi], replayed[lo:hi], conv, prefix, "summarization" if n else "copied-context",
                      tools, dict(fields), part_meta)
        if gap:
            rec.fidelity_gaps["context_rewritten"] = gap
        records.append(rec)
    no_call = no_model_call(d, steps, final_metrics)
    for rec in records:
        if isinstance(rec, EngineRollout):
            exported_fields(d, [x for x in steps if x["source"] == "agent"], rec, whole=len(records) == 1 and not embedded and not subs)
        elif no_call:
            rec.fidelity_gaps[NO_MODEL_CALL] = no_call
    _link(records, steps, bounds, agent, d, key, origin, any(replayed) or embedded,
          {str(s["trajectory_id"]) for s in subs})
    out = list(records)
    for sub in subs:
        out += _document(sub, origin, _sub_key(key, sub), embedded=True, session=d.get("session_id") or session)
    return out


def _sub_key(key: str, sub: dict[str, Any]) -> str:
    """The lineage key of the embedded sub-agent trajectory `sub` of the document keyed `key`."""
    return f"{key}#subagent:{sub['trajectory_id']}"


def _link(records: list[EngineRollout | Conversation], steps: list[dict[str, Any]], bounds: list[tuple[int, int]],
          agent: dict[str, Any], d: dict[str, Any], key: str, origin: Origin, claimable: bool,
          embedded: set[str]) -> None:
    """The :class:`ParsedLineage` of each record of one document (keyed from `key`), when it is
    part of a tree of records (`claimable`: another record may name it as its child)."""
    path = os.path.abspath(origin.path)
    claims: list[list[tuple[str, str]]] = [[] for _ in records]
    named: set[str] = set()
    for n, (lo, hi) in enumerate(bounds):
        for s in steps[lo:hi]:
            for ref in _refs(s):
                tid = text_or_none(ref.get("trajectory_id"))
                if tid in embedded:
                    claims[n].append((_sub_key(key, {"trajectory_id": tid}), "subagent"))
                    named.add(tid)  # type: ignore[arg-type]
                    continue
                f = _sibling(path, ref.get("trajectory_path"))
                if f:
                    claims[n].append((f, "subagent"))
    claims[0] += [(_sub_key(key, {"trajectory_id": t}), "subagent") for t in sorted(embedded - named)]
    nxt = _sibling(path, d.get("continued_trajectory_ref")) if isinstance(d.get("continued_trajectory_ref"), str) else None
    if nxt:
        claims[-1].append((nxt, "continuation"))
    extra = agent.get("extra") if isinstance(agent.get("extra"), dict) else {}
    claimable = claimable or "parent_session_id" in extra or "continuation_index" in extra
    if len(records) == 1 and not claims[0] and not claimable:
        return
    for n, rec in enumerate(records):
        rec.lineage = ParsedLineage(key if not n else f"{key}#{n + 1}", parent=None if not n else (
            key if n == 1 else f"{key}#{n}"), link_kind="context_rewrite" if n else None, claims=claims[n])


def parse_stream(lines: list[Any], origin: Origin) -> list[EngineRollout | Conversation]:
    """A streamed ATIF file (``.atif.jsonl``: a header line, then one step per line; its lines
    decoded): the records of the document they make (:func:`~.atif_stream.stream_document`),
    marked ``streamed`` in metadata.

    Raises:
        RecordError: see :func:`~.atif_stream.stream_document` and :func:`parse_trajectory`.
    """
    doc, index = stream_document(lines, origin)
    records = parse_trajectory(doc, origin)
    for rec in records:
        rec.metadata["streamed"] = True
        if index:
            rec.read_files = (*rec.read_files, index)
    return records


def _not_a_trajectory(d: dict[str, Any], path: str) -> str | None:
    return harbor_trial_result(d, path) or index_file(d, path)


ATIF = InputFormat(
    "atif", "ATIF trajectory.json (Harbor / Terminal-Bench) or streamed .atif.jsonl, engine token ids kept", SOURCE,
    records=Records(parse_trajectory, keys=("schema_version",), signature=lambda d: isinstance(d.get("schema_version"), str)
                    and d["schema_version"].startswith("ATIF") and "steps" in d),
    events=Events(keys=("schema_version", "step_id"), signature=is_stream_line, parse=parse_stream),
    no_trajectory=NoTrajectory(("trial_name", "checkpoint"), _not_a_trajectory))

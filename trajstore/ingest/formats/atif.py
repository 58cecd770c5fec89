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
never messages. Context rewrites, copied context, sub-agent and continuation files: see
:func:`parse_trajectory`.
"""

from __future__ import annotations

import json
import os
from typing import Any

from trajstore.ingest.formats.atif_agents import Conventions, conventions_for, run_status
from trajstore.ingest.formats.chat import arguments_text, drop_sent_back_reasoning, text_of, tool_definitions
from trajstore.ingest.formats.engine_chain import EngineChain
from trajstore.ingest.formats.rewards import float_reward
from trajstore.ingest.formats.spec import InputFormat, NoTrajectory, Records
from trajstore.ingest.records import (
    Context,
    Conversation,
    EngineRollout,
    EngineSegment,
    ExportedFields,
    Message,
    Origin,
    ParsedLineage,
    RecordError,
    Reward,
    ToolCall,
)
from trajstore.ingest.summary import ENGINE_IDS_DISCARDED_KEY
from trajstore.ingest.values import json_type, order_by_id, parse_time, text_or_none
from trajstore.models import CallUsage

SOURCE = "atif"
REWARD_FILE = os.path.join("verifier", "reward.txt")
"""Where a Harbor trial keeps its verifier score, relative to the trial directory."""
RESULT_FILE = "result.json"
"""Where a Harbor trial keeps its outcome (``exception_info`` when the run raised), relative to the trial directory."""


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


EXPORT_EXTRA_KEY = "trajstore"
"""Key of the values ``traj export --to atif`` keeps in ATIF ``extra`` objects (trajstore.export.atif)."""


def _exported_fields(d: dict[str, Any], rollout: EngineRollout, *, whole: bool) -> EngineRollout:
    """What a trajstore ATIF export kept beside the token ids, put back on `rollout` (in place):
    each agent step's ``extra.trajstore.policy_version`` / ``policy_version_max`` and
    ``finish_reason`` on its action segment, the root ``extra.trajstore`` tokenizer and status,
    and the token ids of an observation after the last step (``trailing_observation_token_ids``,
    checked with the other ids when the rollout is built). When `rollout` is the `whole` document,
    also the stored row's other fields: its id, group, lineage, trainability, token and log-prob
    sources (``rollout.exported``), prompt id, time, raw reward, and its metadata under this
    ingest's own keys, ``fidelity_gaps`` included. Other ATIF logs have none of these: their
    metadata says ``policy_version_known: false``, as before."""
    root = d.get("extra") if isinstance(d.get("extra"), dict) else {}
    ours = root.get(EXPORT_EXTRA_KEY) if isinstance(root.get(EXPORT_EXTRA_KEY), dict) else {}
    if isinstance(ours.get("tokenizer"), str):
        rollout.tokenizer = ours["tokenizer"]
    if ours.get("status") in ("completed", "truncated", "aborted", "failed"):
        rollout.status = ours["status"]
    if whole and isinstance(ours.get("trajectory_id"), str):
        _stored_row(ours, rollout)
    agents = [s for s in _steps(d) if s["source"] == "agent"]
    actions = [seg for seg in rollout.segments if seg.kind == "action"]
    for step, seg in zip(agents, actions):
        extra = step.get("extra") if isinstance(step.get("extra"), dict) else {}
        kept = extra.get(EXPORT_EXTRA_KEY) if isinstance(extra.get(EXPORT_EXTRA_KEY), dict) else {}
        for name in ("policy_version", "policy_version_max"):
            v = kept.get(name)
            if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                setattr(seg, name, v)
        if isinstance(kept.get("finish_reason"), str):
            seg.finish_reason = kept["finish_reason"]
    if any(seg.policy_version is None for seg in actions):
        rollout.metadata["policy_version_known"] = False
    tail = ours.get("trailing_observation_token_ids")
    if isinstance(tail, list) and tail and actions:
        last = actions[-1]
        rollout.segments.append(EngineSegment("observation", list(tail), role="tool",
                                              cause_id=(last.tool_call_ids or [last.call_id])[0]))
        rollout.metadata.pop("last_observation", None)
    return rollout


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _stored_row(ours: dict[str, Any], rollout: EngineRollout) -> None:
    """The stored row's fields a trajstore ATIF export kept in the root ``extra.trajstore`` (see
    :func:`_exported_fields`), put back on `rollout`; a value of the wrong type is left out (the
    row is then built as from any engine log, and the trajectory's own checks still apply)."""
    fork = ours.get("fork_point")
    trainable = ours.get("trainable")
    rollout.exported = ExportedFields(
        trajectory_id=ours["trajectory_id"], group_id=_text(ours.get("group_id")),
        episode_id=_text(ours.get("episode_id")), parent_trajectory_id=_text(ours.get("parent_trajectory_id")),
        fork_point=fork if isinstance(fork, int) and not isinstance(fork, bool) else None,
        link_kind=_text(ours.get("link_kind")),
        abandoned=ours["abandoned"] if isinstance(ours.get("abandoned"), bool) else None, trainable=trainable if isinstance(trainable, bool) else None,
        not_trainable_reason=_text(ours.get("not_trainable_reason")),
        token_source="retokenized" if ours.get("token_source") == "retokenized" else "engine",
        logprob_source="none" if ours.get("logprob_source") == "none" else "engine")
    rollout.prompt_id = _text(ours.get("prompt_id"))
    rollout.created_at = parse_time(ours.get("created_at")) or rollout.created_at
    raw = _text(ours.get("reward_raw"))
    if raw is not None and rollout.reward.error is None:
        try:
            rollout.reward.raw = json.loads(raw)
        except ValueError:
            pass  # not JSON: the reward file's value stands
    stored = ours.get("metadata") if isinstance(ours.get("metadata"), dict) else {}
    gaps = stored.get("fidelity_gaps") if isinstance(stored.get("fidelity_gaps"), dict) else {}
    rollout.fidelity_gaps = {**{k: str(v) for k, v in gaps.items()}, **rollout.fidelity_gaps}
    rollout.metadata = {**{k: v for k, v in stored.items() if k != "fidelity_gaps"}, **rollout.metadata}


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
    for s, copied in zip(steps, replayed):
        src = s["source"]
        text = text_of(s.get("message"))
        if src == "system" and begun:
            notes.append({"step_id": s.get("step_id"), "message": text[:200]})
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
        obs = s.get("observation")
        for k, r in enumerate(obs.get("results") or [] if isinstance(obs, dict) else []):
            if not isinstance(r, dict):
                raise RecordError(f"step {s.get('step_id')}: observation.results[{k}] is not an object")
            if "content" not in r and r.get("subagent_trajectory_ref"):
                continue  # a pointer to a sub-agent's file, not text the model read
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
        gaps["harness_notes"] = (f"{len(notes)} system step(s) after the task ({notes[0]['message'][:60]!r}, ...) are "
                                 "the harness's notes, not stored as messages: what it sent the model for them, if "
                                 "anything, is not in the file")
    calls = [m for m in msgs if m.role == "assistant"]
    if conv.reasoning_sent_back is None and any(m.reasoning for m in calls[:-1]):
        gaps["reasoning"] = ("ATIF does not record whether the agent sent reasoning_content back in later calls: kept "
                             "in the later contexts")
    return gaps


def _harbor_reward_file(path: str) -> str:
    """Where the Harbor trial `path` (``<trial>/agent/trajectory.json``) belongs to keeps its verifier score."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(path))), REWARD_FILE)


def _harbor_reward(path: str) -> Reward:
    """The verifier score of the Harbor trial `path` (``<trial>/agent/trajectory.json``) belongs to."""
    f = _harbor_reward_file(path)
    if not os.path.isfile(f):
        return Reward()
    try:
        with open(f, encoding="utf-8") as fh:
            text = fh.read().strip()
        return float_reward(json.loads(text))
    except (OSError, ValueError):
        return Reward(None, None, error=f"{f} holds no number")


def _harbor_exception(path: str) -> dict[str, Any] | None:
    """The exception Harbor recorded for the trial `path` belongs to (``<trial>/result.json``
    ``exception_info``: ``exception_type``, ``exception_message``), or None."""
    f = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(path))), RESULT_FILE)
    try:
        with open(f, encoding="utf-8") as fh:
            info = json.load(fh).get("exception_info")
    except (OSError, ValueError, AttributeError):
        return None
    return info if isinstance(info, dict) and info.get("exception_type") else None


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
        return EngineRollout(segments=segs, metadata=meta, **fields)  # policy versions: _exported_fields
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
    """One ATIF trajectory document: one record per lineage of it (usually one).

    A context rewrite the producing agent logs (a Terminus-2 summarisation: a harness note pointing
    to the summarisation sub-agents' files) ends a lineage; the calls after it are the next
    record, whose context is the one the agent reset it to. Steps copied from another log
    (``is_copied_context``; a Terminus-2 sub-agent's replay of the main agent's history) are
    context, never calls. Engine token ids are used per lineage, where they chain within it.
    Records that belong to a tree of files carry a :class:`~trajstore.ingest.records.ParsedLineage`:
    a lineage after a rewrite is the child (``context_rewrite``) of the one before; the sub-agent
    files a note points to are ``subagent`` children of the lineage it ends; the file named by
    ``continued_trajectory_ref`` (Harbor's ``linear_history``) is the ``continuation`` of the last.

    Raises:
        RecordError: no ``steps`` list, a step without a valid ``source``, two steps sharing a
            ``step_id``, or a malformed tool call / observation.
    """
    if not isinstance(d, dict):
        raise RecordError("ATIF trajectory is not an object")
    steps = _steps(d)
    agent = d["agent"] if isinstance(d.get("agent"), dict) else {}
    conv = conventions_for(agent)
    model = text_or_none(agent.get("model_name"))
    model = model or next((s["model_name"] for s in steps if text_or_none(s.get("model_name"))), None)
    key = str(d["session_id"]) if d.get("session_id") else None
    meta: dict[str, Any] = {"schema_version": d.get("schema_version"), "session_id": key,
                            "agent": {k: agent.get(k) for k in ("name", "version") if k in agent},
                            "final_metrics": d.get("final_metrics") if isinstance(d.get("final_metrics"), dict) else None}
    created = parse_time(next((s.get("timestamp") for s in reversed(steps) if s.get("timestamp")), None))
    status, meta["status_evidence"] = run_status(conv, steps, _harbor_exception(origin.path))
    reward_file = _harbor_reward_file(origin.path)
    fields = {"source": SOURCE, "key": key, "origin": origin, "reward": _harbor_reward(origin.path), "model": model,
              "created_at": created, "prompt_id": key, "status": status,
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
    for rec in records:
        if isinstance(rec, EngineRollout):
            _exported_fields(d, rec, whole=len(records) == 1)
    _link(records, steps, bounds, agent, d, origin, any(replayed))
    return records


def _link(records: list[EngineRollout | Conversation], steps: list[dict[str, Any]], bounds: list[tuple[int, int]],
          agent: dict[str, Any], d: dict[str, Any], origin: Origin, replays: bool) -> None:
    """The :class:`ParsedLineage` of each record of one file, when it is part of a tree of records."""
    path = os.path.abspath(origin.path)
    claims: list[list[tuple[str, str]]] = [[] for _ in records]
    for n, (lo, hi) in enumerate(bounds):
        for s in steps[lo:hi]:
            for ref in _refs(s):
                f = _sibling(path, ref.get("trajectory_path"))
                if f:
                    claims[n].append((f, "subagent"))
    nxt = _sibling(path, d.get("continued_trajectory_ref")) if isinstance(d.get("continued_trajectory_ref"), str) else None
    if nxt:
        claims[-1].append((nxt, "continuation"))
    extra = agent.get("extra") if isinstance(agent.get("extra"), dict) else {}
    claimable = replays or "parent_session_id" in extra or "continuation_index" in extra
    if len(records) == 1 and not claims[0] and not claimable:
        return
    for n, rec in enumerate(records):
        rec.lineage = ParsedLineage(path if not n else f"{path}#{n + 1}", parent=None if not n else (
            path if n == 1 else f"{path}#{n}"), link_kind="context_rewrite" if n else None, claims=claims[n])


def _harbor_trial_result(d: dict[str, Any], path: str) -> str | None:
    """Why a Harbor trial's ``result.json`` holds no trajectory (its exception is read with the trajectory)."""
    if "trial_name" in d and "task_name" in d and isinstance(d.get("agent_info"), dict):
        return "Harbor trial result (result.json: its exception is read with the trial's agent/trajectory.json)"
    return None


ATIF = InputFormat(
    "atif", "ATIF trajectory.json (Harbor / Terminal-Bench), engine token ids kept", SOURCE,
    records=Records(parse_trajectory, keys=("schema_version",), signature=lambda d: isinstance(d.get("schema_version"), str)
                    and d["schema_version"].startswith("ATIF") and "steps" in d),
    no_trajectory=NoTrajectory(("trial_name",), _harbor_trial_result))

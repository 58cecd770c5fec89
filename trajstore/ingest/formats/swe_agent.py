"""SWE-agent ``.traj`` files (0.x and 1.x) -> conversations.

The ``history`` is the model's chat. Everything before the first assistant
message (system prompt, demonstrations, the issue) is the prompt. 1.x links tool results by
``tool_call_ids``; 0.x logs no ids, so each observation answers the action just before it
(synthetic ids ``step-<n>``: the harness strictly alternates). ``.traj`` files carry no
reward (``exit_status`` sets the status). Steps only in ``trajectory`` (1.x: the final one) are
model calls too; a ``last_n_observations`` history processor is reproduced per call
(:func:`parse_swe_agent_traj`).
"""

from __future__ import annotations

import json
from typing import Any

from trajstore.ingest.formats.chat import reasoning_of, text_of, tool_calls_of
from trajstore.ingest.formats.spec import InputFormat, Records
from trajstore.ingest.records import Context, Conversation, Message, Origin, RecordError, ToolCall
from trajstore.ingest.values import json_type

SOURCE = "swe-agent"
TRAJ_KEYS = ("trajectory", "info", "environment", "replay_config")
"""Top-level keys of a SWE-agent ``.traj`` besides ``history`` (any of them tells an empty
history apart from an OpenHands record's)."""


def swe_agent_status(exit_status: Any) -> str:
    """The run status of a SWE-agent ``exit_status``: ``submitted`` (or missing) -> completed;
    ``exit_cost`` / ``exit_context`` / ``exit_format`` / autosubmitted limits -> truncated;
    ``exit_error`` and others -> failed."""
    if not exit_status or exit_status == "submitted":
        return "completed"
    s = str(exit_status)
    if any(t in s for t in ("cost", "context", "format", "autosubmit", "limit", "early_exit")):
        return "truncated"
    return "failed"


def _run_config(d: dict[str, Any]) -> dict[str, Any]:
    rc = d.get("replay_config")
    if isinstance(rc, str):
        try:
            rc = json.loads(rc)
        except ValueError:
            return {}
    return rc if isinstance(rc, dict) else {}


def is_replay(d: dict[str, Any], config: dict[str, Any]) -> bool:
    """A replayed demonstration, not a model's run: the run's model is a replay / scripted
    model, or the model stats logged spent nothing: no tokens sent or received and no cost,
    whatever ``api_calls`` says (hand-written demonstrations log all-zero stats, ``api_calls``
    0 included; replays count calls but no tokens). Stats that are not logged say nothing (not
    logged is not zero), and neither does ``replay_config``: every SWE-agent 1.x run writes it."""
    model = ((config.get("agent") or {}).get("model") or {}) if isinstance(config.get("agent"), dict) else {}
    name = str(model.get("name") or "") if isinstance(model, dict) else ""
    if name.startswith(("replay", "instant_empty_submit", "human")):
        return True
    info = d.get("info") if isinstance(d.get("info"), dict) else {}
    stats = info.get("model_stats") if isinstance(info.get("model_stats"), dict) else {}
    if not all(k in stats for k in ("tokens_sent", "tokens_received")):
        return False
    try:
        spent = sum(float(stats.get(k) or 0) for k in ("tokens_sent", "tokens_received", "instance_cost"))
    except (TypeError, ValueError):
        return False
    return spent == 0


def _processors(config: dict[str, Any]) -> list[dict[str, Any]]:
    agent = config.get("agent") if isinstance(config.get("agent"), dict) else {}
    procs = agent.get("history_processors", agent.get("history_processor"))
    if isinstance(procs, dict):
        procs = [procs]
    return [p for p in procs or [] if isinstance(p, dict)]


def _elided(history: list[dict[str, Any]], upto: int, n: int, polling: int) -> dict[int, str]:
    """SWE-agent's ``last_n_observations`` on ``history[:upto]``: index -> the text that
    replaced that observation ("Old environment output: (N lines omitted)"); the first
    observation (the task) and demonstrations are never elided."""
    obs = [i for i in range(upto) if history[i].get("message_type") == "observation" and not history[i].get("is_demo")]
    last = max(0, (len(obs) // polling) * polling - n)
    out = {}
    for i in obs[1:last]:
        tags = set(history[i].get("tags") or [])
        if "keep_output" in tags:
            continue
        lines = len(text_of(history[i].get("content")).splitlines())
        out[i] = f"Old environment output: ({lines} lines omitted)"
    for i in obs:
        if "remove_output" in set(history[i].get("tags") or []) and i not in out:
            out[i] = f"Old environment output: ({len(text_of(history[i].get('content')).splitlines())} lines omitted)"
    return out


def parse_swe_agent_traj(d: Any, origin: Origin) -> Conversation:
    """One SWE-agent ``.traj`` file.

    Model calls: the assistant messages of ``history``; steps of ``trajectory`` beyond them
    (1.x logs the final step, e.g. ``submit``, only there) are appended, rebuilt from the step's
    ``response`` and ``action`` and flagged (``final_step``). Model = the run configuration's
    ``agent.model.name``; ``replayed`` from :func:`is_replay`; the harness's count of model
    calls (``info.model_stats.api_calls``) is kept as metadata ``harness_model_calls``. A
    ``last_n_observations`` history processor is reproduced: each call gets the context with
    old observations elided, as SWE-agent sent it (a new trajectory of the episode wherever
    that rewrites what an earlier call saw); other processors are flagged.

    Raises:
        RecordError: no ``history`` list, or a history item without a role.
    """
    if not isinstance(d, dict) or not isinstance(d.get("history"), list):
        raise RecordError("SWE-agent trajectory has no 'history' list")
    history = d["history"]
    msgs: list[Message] = []
    pending: list[str] = []
    step = 0
    gaps: dict[str, str] = {}
    at: dict[int, int] = {}  # history index -> message index
    demos: set[int] = set()
    for i, h in enumerate(history):
        if not isinstance(h, dict) or h.get("role") not in ("system", "user", "assistant", "tool"):
            raise RecordError(f"history[{i}] has no valid 'role'")
        role = h["role"]
        text = text_of(h.get("content"))
        at[i] = len(msgs)
        if role == "assistant" and h.get("is_demo"):  # a demonstration: prompt text, not a model call
            demos.add(len(msgs))
            msgs.append(Message("assistant", text))
        elif role == "assistant":
            calls = tool_calls_of(h.get("tool_calls"), f"history[{i}].tool_calls")
            cid = f"step-{step}"
            step += 1
            reasoning, redacted = reasoning_of(h)
            if redacted:
                gaps.setdefault("reasoning", "redacted (encrypted) thinking blocks sent back to the model")
            msgs.append(Message("assistant", text, reasoning=reasoning, tool_calls=calls, call_id=cid))
            pending = [c.id for c in calls if c.id] or [cid]
        else:
            cause = None
            if role == "tool" and h.get("tool_call_ids"):
                cause = str(h["tool_call_ids"][0])
            elif any(m.role == "assistant" for m in msgs) and pending:
                cause = pending[0]
            msgs.append(Message(role, text, cause_id=cause))
    if d.get("trajectory") is not None and not isinstance(d["trajectory"], list):
        raise RecordError(f"trajectory is {json_type(d['trajectory'])}, expected a list of steps")
    traj_steps = [s for s in d.get("trajectory") or [] if isinstance(s, dict)]
    function_calling = any(m.tool_calls for m in msgs)
    for n in range(step, len(traj_steps)):  # steps the history does not hold (1.x: the final one)
        s = traj_steps[n]
        action = str(s.get("action") or "").strip()
        text = text_of(s.get("response") if s.get("response") is not None else s.get("thought"))
        calls = []
        if function_calling and action:
            calls = [ToolCall(None, "submit", "{}")] if action == "submit" else [
                ToolCall(None, "bash", json.dumps({"command": action}, ensure_ascii=False))]
        msgs.append(Message("assistant", text, tool_calls=calls, call_id=f"step-{n}"))
        gaps["final_step"] = (f"model call(s) {step}..{len(traj_steps) - 1} exist only in 'trajectory': rebuilt from "
                              "the step's response and action (tool-call id and exact arguments not logged)")
    if demos:  # demonstrations given as assistant turns are context of the first call
        first = next(i for i, m in enumerate(msgs) if m.role == "assistant" and i not in demos)
        msgs[first].context = Context(msgs[:first], None, "demonstrations")
        keep = [i for i in range(len(msgs)) if i not in demos]
        at = {j: keep.index(k) for j, k in at.items() if k in keep}
        msgs = [msgs[i] for i in keep]
    info = d.get("info") if isinstance(d.get("info"), dict) else {}
    env = d.get("environment")
    config = _run_config(d)
    key = None
    ps = config.get("problem_statement")
    if isinstance(ps, dict) and ps.get("id"):
        key = str(ps["id"])
    key = key or origin.path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    stats = info.get("model_stats") if isinstance(info.get("model_stats"), dict) else {}
    agent = config.get("agent") if isinstance(config.get("agent"), dict) else {}
    model_cfg = agent.get("model") if isinstance(agent.get("model"), dict) else {}
    model = model_cfg.get("name") if isinstance(model_cfg.get("name"), str) else None
    if function_calling:
        gaps.setdefault("tools", "SWE-agent sends its tool definitions with every call (function calling); "
                                 "the .traj file does not log them")
    # history processors: the context each call was sent
    for p in _processors(config):
        typ = p.get("type")
        if typ == "last_n_observations" and isinstance(p.get("n"), int) and p["n"] > 0:
            calls_at = [i for i, h in enumerate(history) if h.get("role") == "assistant" and not h.get("is_demo")]
            for i in calls_at:
                elided = _elided(history, i, p["n"], int(p.get("polling") or 1))
                if elided:
                    ctx = []
                    for j in range(i):
                        if j not in at:
                            continue
                        m = msgs[at[j]]
                        if j in elided:
                            m = Message(m.role, elided[j], call_id=m.call_id, cause_id=m.cause_id)
                        ctx.append(m)
                    msgs[at[i]].context = Context(ctx, None, "history-processor")
        elif typ not in (None, "default", "cache_control", "tag_tool_call_observations"):
            gaps.setdefault("history_processor", f"history processor {typ!r} is not reproduced: later calls may have "
                                                 "been sent a different context than stored")
    replayed = is_replay(d, config)
    meta = {"exit_status": info.get("exit_status"), "environment": env,
            "swe_agent_version": info.get("swe_agent_version"), "replayed": replayed,
            "model_stats": stats,
            "format_version": "1.x" if any("message_type" in h for h in history) else "0.x"}
    if isinstance(stats.get("api_calls"), int) and not (replayed and stats["api_calls"] == 0):
        meta["harness_model_calls"] = stats["api_calls"]  # a demonstration made no model call to count
    return Conversation(source=SOURCE, key=key, messages=msgs, origin=origin, prompt_id=key, model=model,
                        status=swe_agent_status(info.get("exit_status")), fidelity_gaps=gaps, metadata=meta)


def _is_traj(d: dict[str, Any]) -> bool:
    """A ``history`` of chat messages, or an empty one beside the other keys of a ``.traj``."""
    return bool(d["history"]) or any(k in d for k in TRAJ_KEYS)


SWE_AGENT = InputFormat("swe-agent", "SWE-agent .traj files", SOURCE,
                        records=Records(parse_swe_agent_traj, keys=("history",), history=("chat", "empty"),
                                        signature=_is_traj))

"""What the OpenHands formats share: a conversation folder (V0 session store
``sessions/<id>/events/<n>.json``, V1 conversation folder ``<id>/events/event-*.json``) read with
the folder's ``metadata.json`` (conversation id, model, title) and ``base_state.json`` (V1: model,
run status, sampling settings); a shell command's observation text; a run's status from an eval
``error`` and from the conversation state.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

from trajstore.ingest.read import json_loads, read_text
from trajstore.ingest.reasons import problem_reason
from trajstore.ingest.records import Conversation, EngineRollout, Origin, Parsed, Problem
from trajstore.ingest.values import text_or_none

STATUS_ORDER = ("completed", "truncated", "aborted", "failed")
"""Run statuses from best to worst."""
TRUNCATING_ERRORS = ("maximum iteration", "max_iterations", "budget", "context window", "ContextWindowExceeded")
"""Words of an eval ``error`` that mean the run hit a limit (truncated), not that it failed."""
EXECUTION_STATUS = {"finished": "completed", "error": "failed", "stuck": "aborted", "paused": "aborted",
                    "waiting_for_confirmation": "aborted", "running": "aborted", "idle": "aborted",
                    "deleting": "aborted"}
"""``base_state.json`` ``execution_status`` -> stored status: only ``finished`` is completed; an error is
failed; a stuck or interrupted run is aborted."""
STATE_KEYS = ("execution_status", "agent_status")
"""Where ``base_state.json`` keeps the run's state: ``execution_status`` (SDKs since 2025-10),
``agent_status`` (the first V1 SDKs, 2025-09); same values."""
METRICS_KEYS = ("usage_to_metrics", "service_to_metrics")
"""Where ``base_state.json`` keeps per-LLM metrics (``stats.usage_to_metrics``, earlier
``stats.service_to_metrics``), keyed by the LLM's ``usage_id`` (earlier ``service_id``)."""
METADATA_FILE = "metadata.json"
BASE_STATE_FILE = "base_state.json"
FOLDER_METADATA_KEYS = ("conversation_id", "title", "trigger", "selected_repository")
"""``metadata.json`` fields kept in the trajectory's metadata."""

_ABSENT = object()
"""A side file that is not there (or cannot be read), told apart from one that holds JSON ``null``."""

FolderEvents = Callable[[list[Any], Origin, str], Conversation | EngineRollout]
"""A conversation folder's events, its origin and its conversation id -> its conversation."""


def status_from_error(error: Any) -> str:
    """Run status from an eval ``error`` field: none -> completed; iteration / budget / context
    limits (:data:`TRUNCATING_ERRORS`) -> truncated; anything else -> failed."""
    if not error:
        return "completed"
    s = str(error)
    return "truncated" if any(t.lower() in s.lower() for t in TRUNCATING_ERRORS) else "failed"


def worse_status(a: str, b: str) -> str:
    """The worse of two run statuses (:data:`STATUS_ORDER`)."""
    return a if STATUS_ORDER.index(a) >= STATUS_ORDER.index(b) else b


def terminal_text(output: str, md: dict[str, Any]) -> str:
    """A shell command's observation as OpenHands sends it (V0 ``CmdOutputObservation.
    to_agent_observation``, V1 ``TerminalObservation.to_llm_content``): ``prefix + output +
    suffix``, then the working directory, the Python interpreter and the exit code (unless it
    is -1) on lines of their own, each when logged in the observation's `md` metadata."""
    ret = f"{md.get('prefix') or ''}{output}{md.get('suffix') or ''}"
    if md.get("working_dir"):
        ret += f"\n[Current working directory: {md['working_dir']}]"
    if md.get("py_interpreter_path"):
        ret += f"\n[Python interpreter: {md['py_interpreter_path']}]"
    exit_code = md.get("exit_code", -1)
    if exit_code is not None and exit_code != -1:
        ret += f"\n[Command finished with exit code {exit_code}]"
    return ret


def is_base_state(d: Any) -> bool:
    """An OpenHands V1 conversation's ``base_state.json``: an ``agent`` object and the run's state,
    ``execution_status`` (later SDKs) or ``agent_status`` (SDKs of 2025-09)."""
    return isinstance(d, dict) and isinstance(d.get("agent"), dict) \
        and ("execution_status" in d or "agent_status" in d)


def base_state_file(d: dict[str, Any], path: str) -> str | None:
    """Why a V1 ``base_state.json`` holds no trajectory (it is read with its folder's events)."""
    if is_base_state(d):
        return "conversation state (OpenHands V1 base_state.json: read with the events/ directory next to it)"
    return None


def metadata_file(d: dict[str, Any], path: str) -> str | None:
    """Why a conversation folder's ``metadata.json`` holds no trajectory (it is read with its events)."""
    if "conversation_id" in d and ("llm_model" in d or "title" in d):
        return "conversation metadata only (its events are in the events/ directory next to it)"
    return None


def _llm_metrics(state: dict[str, Any]) -> dict[str, Any]:
    stats = state.get("stats") if isinstance(state.get("stats"), dict) else {}
    return next((stats[k] for k in METRICS_KEYS if isinstance(stats.get(k), dict)), {})


def apply_base_state(conv: Conversation | EngineRollout, state: Any) -> None:
    """Fold a conversation folder's ``base_state.json`` into its trajectory: model
    (``agent.llm.model``, else the usage metrics' ``model_name``), status from the run's state
    (:data:`STATE_KEYS`, values in :data:`EXECUTION_STATUS`; never better than what the events
    say), the sampling settings in metadata ``llm``, and the agent LLM's count of calls.
    A conversation in which the model was never called is not ``completed`` whatever the state
    says: it is stored ``aborted`` (a paused or interrupted run before its first call)."""
    if not isinstance(state, dict):
        return
    agent = state.get("agent") if isinstance(state.get("agent"), dict) else {}
    llm = agent.get("llm") if isinstance(agent.get("llm"), dict) else {}
    usage = _llm_metrics(state)
    model = text_or_none(llm.get("model"))
    if model is None:
        model = next((text_or_none(u.get("model_name")) for u in usage.values() if isinstance(u, dict)
                      and text_or_none(u.get("model_name"))), None)
    conv.model = model or conv.model
    key = next((k for k in STATE_KEYS if isinstance(state.get(k), str)), None)
    if key is not None:
        es = state[key]
        conv.status = worse_status(conv.status, EXECUTION_STATUS.get(es, "aborted"))
        conv.metadata["execution_status"] = es
    calls = (sum(s.kind == "action" for s in conv.segments) if isinstance(conv, EngineRollout)
             else sum(m.role == "assistant" for m in conv.messages))
    if calls == 0 and conv.status == "completed":
        conv.status = "aborted"
        conv.metadata["status_evidence"] = "no model call in the conversation: the run never got to the model"
    conv.metadata["llm"] = {k: llm.get(k) for k in ("model", "temperature", "top_p", "max_output_tokens",
                                                    "native_tool_calling") if k in llm}
    if state.get("max_iterations") is not None:
        conv.metadata["max_iterations"] = state.get("max_iterations")
    if usage:
        # the SDK records one token usage per LLM call, per LLM (the agent's and e.g. a condenser's)
        uid = llm.get("usage_id", llm.get("service_id"))
        agent_usage = usage.get(uid) if uid in usage else None
        counted = [u.get("token_usages") for u in ([agent_usage] if agent_usage else usage.values())
                   if isinstance(u, dict) and isinstance(u.get("token_usages"), list)]
        if counted:
            conv.metadata["harness_model_calls"] = sum(len(c) for c in counted)


def _side_file(path: str, what: str) -> tuple[Any, Problem | None]:
    """The JSON of a folder's side file (:data:`_ABSENT` when there is none), or the problem that
    it cannot be read."""
    if not os.path.exists(path):
        return _ABSENT, None
    try:
        return json_loads(read_text(path)), None
    except (ValueError, OSError) as e:
        return _ABSENT, Problem(Origin(path), "malformed", f"{what} is not valid JSON: {e}")


def read_conversation_folder(events: list[Any], events_dir: str, conversation: FolderEvents) -> Iterator[Parsed]:
    """The conversation of one folder's events, with the folder's ``metadata.json`` (conversation
    id, model, title; kept in metadata) and ``base_state.json`` (:func:`apply_base_state`), and a
    :class:`Problem` for each of those files that cannot be read (the events are still used).

    Args:
        events: the decoded ``events/`` files, in order.
        events_dir: the ``events/`` folder (its parent holds the side files).
        conversation: the format's events -> conversation.
    """
    folder = os.path.dirname(events_dir)
    meta, problem = _side_file(os.path.join(folder, METADATA_FILE), "session metadata")
    if problem:
        yield problem
    if meta is not _ABSENT and not isinstance(meta, dict):
        yield Problem(Origin(os.path.join(folder, METADATA_FILE)), "malformed",
                      f"session metadata is a JSON {type(meta).__name__}, not an object; ignored")
    meta = meta if isinstance(meta, dict) else {}
    state, problem = _side_file(os.path.join(folder, BASE_STATE_FILE), "conversation state")
    if problem:
        yield problem
    key = str(meta.get("conversation_id") or os.path.basename(folder))
    try:
        conv = conversation(events, Origin(events_dir), key)
    except Exception as e:  # noqa: BLE001 - this folder's problem only
        yield Problem(Origin(events_dir), "malformed", problem_reason(e))
        return
    if state is not _ABSENT:
        apply_base_state(conv, state)
    conv.model = meta["llm_model"] if isinstance(meta.get("llm_model"), str) else conv.model
    conv.metadata.update({k: meta[k] for k in FOLDER_METADATA_KEYS if k in meta})
    yield conv

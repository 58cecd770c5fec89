"""OpenHands V1 (software-agent-sdk) files around an event list: eval output (``output.jsonl``,
``traj_<task>.json`` + ``eval_<task>.json``: reward, status), persisted ``events.jsonl`` logs and
a conversation folder's ``base_state.json`` (model, run status, sampling settings).
"""

from __future__ import annotations

import os
from typing import Any

from trajstore.ingest.formats.openhands_v0 import status_from_error
from trajstore.ingest.formats.openhands_v1_events import events_conversation
from trajstore.ingest.formats.rewards import float_reward
from trajstore.ingest.records import Conversation, EngineRollout, Message, Origin, RecordError, Reward
from trajstore.ingest.values import text_or_none

EXECUTION_STATUS = {"finished": "completed", "error": "failed", "stuck": "aborted", "paused": "aborted",
                    "waiting_for_confirmation": "aborted", "running": "aborted", "idle": "aborted",
                    "deleting": "aborted"}
"""``base_state.json`` ``execution_status`` -> stored status: only ``finished`` is completed; an error is
failed; a stuck or interrupted run is aborted."""


def score_reward(test_result: Any) -> Reward:
    """Reward from a V1 eval ``test_result`` / ``eval_<task>.json``: ``final_score.result``
    (bool -> 1.0 / 0.0), raw = the ``final_score`` object. An evaluator crash (``error`` /
    ``traceback`` instead of a score) is no reward, with the error kept; so is a score with no
    graded checkpoints (``total = 0``)."""
    if not isinstance(test_result, dict):
        return Reward()
    if "final_score" not in test_result:
        if "error" in test_result:
            return Reward(None, None, error=str(test_result["error"]))
        return Reward()
    fs = test_result["final_score"]
    if isinstance(fs, dict) and fs.get("total") == 0 and not test_result.get("checkpoints"):
        # nothing was graded (no checkpoints, total 0): "0 of 0" is not a score of 0
        return Reward(None, fs, error="no checkpoints graded (final_score.total = 0)")
    r = float_reward(fs.get("result") if isinstance(fs, dict) else fs,
                     "final_score.result" if isinstance(fs, dict) else "final_score")
    return Reward(r.value, fs, error=r.error)


def _worse(a: str, b: str) -> str:
    order = ("completed", "truncated", "aborted", "failed")
    return a if order.index(a) >= order.index(b) else b


def parse_eval_output(row: Any, origin: Origin) -> Conversation | EngineRollout:
    """One line of a V1 eval ``output.jsonl``. The task ``instruction`` is the user prompt when
    the history holds no user message (these histories record no MessageEvent); flagged, as
    the SDK's exact user message (its template around the instruction) is not logged."""
    if not isinstance(row, dict) or "history" not in row:
        raise RecordError("V1 eval row has no 'history'")
    key = str(row["instance_id"]) if row.get("instance_id") else None
    conv = events_conversation(row["history"], origin, source="openhands/v1-eval", key=key)
    if isinstance(conv, Conversation) and not any(m.role == "user" for m in conv.messages) \
            and isinstance(row.get("instruction"), str):
        sys_n = sum(1 for m in conv.messages[:1] if m.role == "system")
        conv.messages.insert(sys_n, Message("user", row["instruction"]))
        conv.fidelity_gaps["prompt"] = ("no user MessageEvent in the history: the row's instruction stands in for "
                                        "the task message the model was sent")
    conv.reward = score_reward(row.get("test_result"))
    conv.status = _worse(conv.status, status_from_error(row.get("error")))
    conv.prompt_id = key
    md = row.get("metadata") if isinstance(row.get("metadata"), dict) else {}
    llm = md.get("llm") if isinstance(md.get("llm"), dict) else {}
    conv.model = llm.get("model") or conv.model
    conv.metadata.update({"instance_id": key, "error": row.get("error")})
    if conv.reward.error:
        conv.metadata["reward_error"] = conv.reward.error
    return conv


def task_of(path: str, prefix: str) -> str:
    """``traj_safety-x.json`` -> ``safety-x``."""
    return os.path.basename(path)[len(prefix):].rsplit(".", 1)[0]


def parse_task_trajectory(events: Any, origin: Origin, eval_result: Any | None,
                          eval_path: str | None) -> Conversation | EngineRollout:
    """A per-task ``traj_<task>.json`` with its ``eval_<task>.json`` (None when absent: no reward)."""
    key = task_of(origin.path, "traj_")
    conv = events_conversation(events, origin, source="openhands/v1-eval", key=key)
    conv.prompt_id = key
    conv.reward = score_reward(eval_result) if eval_result is not None else Reward()
    conv.metadata.update({"instance_id": key, "eval_file": eval_path})
    if conv.reward.error:
        conv.metadata["reward_error"] = conv.reward.error
    return conv


def parse_persisted_events(events: list[Any], origin: Origin) -> Conversation | EngineRollout:
    """A persisted V1 event log (``events.jsonl``: one event per line, already decoded)."""
    return events_conversation(events, origin, source="openhands/v1-events", key=None)


STATE_KEYS = ("execution_status", "agent_status")
"""Where ``base_state.json`` keeps the run's state: ``execution_status`` (SDKs since 2025-10),
``agent_status`` (the first V1 SDKs, 2025-09); same values."""
METRICS_KEYS = ("usage_to_metrics", "service_to_metrics")
"""Where ``base_state.json`` keeps per-LLM metrics (``stats.usage_to_metrics``, earlier
``stats.service_to_metrics``), keyed by the LLM's ``usage_id`` (earlier ``service_id``)."""


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
        conv.status = _worse(conv.status, EXECUTION_STATUS.get(es, "aborted"))
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

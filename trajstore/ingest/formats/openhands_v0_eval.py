"""OpenHands V0 evaluation and resolver output (``output.jsonl``: one run per line, its event
``history``) -> conversations with the run's reward and status.
"""

from __future__ import annotations

from typing import Any

from trajstore.ingest.formats.openhands import status_from_error
from trajstore.ingest.formats.openhands_v0_events import events_to_conversation
from trajstore.ingest.formats.rewards import bool_reward
from trajstore.ingest.formats.spec import InputFormat, Records
from trajstore.ingest.records import Conversation, Origin, RecordError

EVAL_SOURCE = "openhands/v0-eval"
RESOLVER_SOURCE = "openhands/v0-resolver"


def parse_v0_eval_output(row: Any, origin: Origin) -> Conversation:
    """One line of a V0 evaluation ``output.jsonl`` (``EvalOutput``).

    Reward: ``test_result.report.resolved`` (SWE-bench harness) when present, else null.
    Status from ``error`` (see :func:`status_from_error`).
    """
    if not isinstance(row, dict) or "history" not in row:
        raise RecordError("eval output row has no 'history'")
    conv = events_to_conversation(row["history"], source=EVAL_SOURCE,
                                  key=str(row.get("instance_id")) if row.get("instance_id") else None, origin=origin)
    tr = row.get("test_result") if isinstance(row.get("test_result"), dict) else {}
    report = tr.get("report") if isinstance(tr.get("report"), dict) else {}
    if "resolved" in report:
        conv.reward = bool_reward(report["resolved"], "test_result.report.resolved")
    conv.status = status_from_error(row.get("error"))
    conv.prompt_id = conv.key
    md = row.get("metadata") if isinstance(row.get("metadata"), dict) else {}
    llm = md.get("llm_config") if isinstance(md.get("llm_config"), dict) else {}
    conv.model = llm.get("model") or conv.model
    conv.metadata.update({"instance_id": row.get("instance_id"), "error": row.get("error"),
                          "agent_class": md.get("agent_class")})
    metrics = row.get("metrics") if isinstance(row.get("metrics"), dict) else {}
    if isinstance(metrics.get("token_usages"), list):  # one entry per LLM call
        conv.metadata["harness_model_calls"] = len(metrics["token_usages"])
    if conv.status == "completed" and not conv.reward.raw and "resolved" not in report:
        conv.metadata["reward_note"] = "no test_result.report.resolved: not evaluated"
    return conv


def parse_v0_resolver_output(row: Any, origin: Origin) -> Conversation:
    """One line of a V0 resolver ``output.jsonl``; reward = ``success`` (LLM-judged), the
    explanation is kept in metadata."""
    if not isinstance(row, dict) or "history" not in row:
        raise RecordError("resolver output row has no 'history'")
    issue = row.get("issue") if isinstance(row.get("issue"), dict) else {}
    key = "{}/{}#{}".format(issue.get("owner"), issue.get("repo"), issue.get("number")) if issue else None
    conv = events_to_conversation(row["history"], source=RESOLVER_SOURCE, key=key, origin=origin)
    conv.reward = bool_reward(row.get("success"), "success")
    conv.status = status_from_error(row.get("error"))
    conv.prompt_id = key
    conv.metadata.update({"issue": key, "base_commit": row.get("base_commit"), "error": row.get("error"),
                          "success_explanation": row.get("success_explanation", row.get("result_explanation"))})
    return conv


V0_HISTORY = ("v0-events", "empty")
"""The ``history`` of a V0 row: V0 events (or none)."""


def _resolver(d: dict[str, Any]) -> bool:
    """The resolver's ``issue`` or ``success``, and no ``instance_id`` (an eval row's)."""
    return ("issue" in d or "success" in d) and "instance_id" not in d


V0_EVAL = InputFormat(
    "openhands-v0-eval", "OpenHands V0 evaluation output.jsonl", EVAL_SOURCE,
    records=Records(parse_v0_eval_output, keys=("history",), history=V0_HISTORY, excludes=("swe-agent", "openhands-v0-resolver")))
V0_RESOLVER = InputFormat(
    "openhands-v0-resolver", "OpenHands V0 resolver output.jsonl", RESOLVER_SOURCE,
    records=Records(parse_v0_resolver_output, keys=("history",), history=V0_HISTORY, signature=_resolver, excludes=("swe-agent",)))

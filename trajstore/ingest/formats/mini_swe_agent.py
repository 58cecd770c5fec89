"""mini-swe-agent ``.traj.json`` files -> conversations.

Two formats (``trajectory_format``): ``mini-swe-agent-1`` (v1.x: text actions, the model writes
a bash block and observations come back as ``user`` messages) and ``mini-swe-agent-1.1`` (v2.x:
tool calls by default, observations as ``tool`` messages answering a ``tool_call_id``; text
actions remain possible). ``info.exit_status`` says how the run ended and sets ``status``.

What the model never saw is not a turn: v2's ``exit`` message (the submission, or why the run
stopped) and, in v1, the user message the agent appends after a terminating exit (its text is
the submission). Both are kept in metadata. The files carry no reward (evaluation is separate).
``info.model_stats.api_calls`` (the agent's own count of model calls) is kept as metadata
``harness_model_calls``; a log holding another number of actions is flagged (``model_calls``).
"""

from __future__ import annotations

from typing import Any

from trajstore.ingest.formats.chat import chat_messages, link_observations
from trajstore.ingest.formats.spec import InputFormat, Records
from trajstore.ingest.records import Conversation, Origin, RecordError

SOURCE = "mini-swe-agent"
SUBMISSION_META_CHARS = 100_000
"""A submission (usually a patch) longer than this many characters is not copied into metadata."""


def mini_swe_agent_status(exit_status: Any) -> str:
    """The run status of a mini-swe-agent ``info.exit_status``: ``Submitted`` -> completed; a limit, timeout or context overflow (``LimitsExceeded``,
    ``CostLimitExceeded``, ``ExecutionTimeoutError``, ``ContextWindowExceeded``...) ->
    truncated; no exit status (the process stopped before saving one) -> aborted; any other
    (an exception's class name) -> failed."""
    if exit_status is None or exit_status == "":
        return "aborted"
    s = str(exit_status).lower()
    if "submit" in s:
        return "completed"
    if any(t in s for t in ("limit", "exceeded", "timeout", "context", "length")):
        return "truncated"
    return "failed"


def _key(d: dict[str, Any], origin: Origin) -> str:
    if isinstance(d.get("instance_id"), str) and d["instance_id"]:
        return d["instance_id"]
    name = origin.path.rsplit("/", 1)[-1]
    for suffix in (".traj.json", ".json", ".traj"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def parse_mini_swe_agent_traj(d: Any, origin: Origin) -> Conversation:
    """One mini-swe-agent ``.traj.json`` (either format).

    Raises:
        RecordError: no ``messages`` list, or a message without a known role.
    """
    if not isinstance(d, dict) or not isinstance(d.get("messages"), list):
        raise RecordError("mini-swe-agent trajectory has no 'messages' list")
    info = d["info"] if isinstance(d.get("info"), dict) else {}
    exit_status = info.get("exit_status")
    submission = info.get("submission")
    raw = d["messages"]
    exits = [m for m in raw if isinstance(m, dict) and m.get("role") == "exit"]
    kept = [m for m in raw if not (isinstance(m, dict) and m.get("role") == "exit")]
    meta: dict[str, Any] = {"trajectory_format": d.get("trajectory_format"), "mini_version": info.get("mini_version"),
                            "exit_status": exit_status,
                            "model_stats": info.get("model_stats") if isinstance(info.get("model_stats"), dict) else None,
                            "reward_note": "mini-swe-agent trajectories carry no evaluation"}
    stats = meta["model_stats"] or {}
    if isinstance(stats.get("api_calls"), int) and not isinstance(stats["api_calls"], bool):
        meta["harness_model_calls"] = stats["api_calls"]  # checked against the actions (fidelity gap model_calls)
    if isinstance(submission, str) and len(submission) <= SUBMISSION_META_CHARS:
        meta["submission"] = submission
    if exits:
        meta["exit_messages"] = len(exits)
    # v1: a terminating exit (the submit command's output, or a limit hit before the next call)
    # appends the submission, or the exception's text, as a last user message no call ever saw
    last_assistant = max((i for i, m in enumerate(kept) if isinstance(m, dict) and m.get("role") == "assistant"),
                         default=-1)
    if (not exits and exit_status and 0 <= last_assistant < len(kept) - 1 and isinstance(kept[-1], dict)
            and kept[-1].get("role") == "user" and kept[-1].get("content") == (submission or "")):
        kept = kept[:-1]
        meta["exit_messages"] = 1
    msgs = chat_messages(kept, "messages")
    for m, r in zip(msgs, kept):
        resp = r["extra"].get("response") if isinstance(r.get("extra"), dict) else None
        if m.role == "assistant" and isinstance(resp, dict):
            m.call_id = str(resp["id"]) if resp.get("id") else None
            choices = resp.get("choices")
            if isinstance(choices, list) and choices and isinstance(choices[0], dict):
                fr = choices[0].get("finish_reason")
                m.finish_reason = fr if isinstance(fr, str) else None
    link_observations(msgs)  # text actions: each observation answers the action just before it
    cfg = info.get("config") if isinstance(info.get("config"), dict) else {}
    model_cfg = cfg.get("model") if isinstance(cfg.get("model"), dict) else {}
    model = model_cfg.get("model_name") if isinstance(model_cfg.get("model_name"), str) else None
    key = _key(d, origin)
    gaps = {}
    if any(m.tool_calls for m in msgs):
        gaps["tools"] = ("mini-swe-agent sends its tool definitions (the bash tool) with every call; the "
                         ".traj.json file does not log them")
    return Conversation(source=SOURCE, key=key, messages=msgs, origin=origin, prompt_id=key, model=model,
                        status=mini_swe_agent_status(exit_status), metadata=meta, fidelity_gaps=gaps)


def _is_traj(d: dict[str, Any]) -> bool:
    """mini-swe-agent's own ``trajectory_format`` marker, or ``messages`` with ``info.mini_version``."""
    if isinstance(d.get("trajectory_format"), str) and d["trajectory_format"].startswith("mini-swe-agent"):
        return True
    return isinstance(d.get("messages"), list) and isinstance(d.get("info"), dict) and "mini_version" in d["info"]


MINI_SWE_AGENT = InputFormat(
    "mini-swe-agent", "mini-swe-agent .traj.json, text (mini-swe-agent-1) or tool-call (mini-swe-agent-1.1) format",
    SOURCE, records=Records(parse_mini_swe_agent_traj, keys=("trajectory_format", "messages"), signature=_is_traj))

"""Telling input formats apart by shape (a record, a row, an event, a whole document, a Parquet
file's columns), and naming known files that hold no trajectory. Keys only, never file names: pairing V1 eval
``traj_<task>.json`` with ``eval_<task>.json`` is :mod:`~trajstore.ingest.dispatch`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from trajstore.ingest.formats.verl_rollouts import INPUT_KEYS, OUTPUT_KEYS
from trajstore.schema import METADATA_SCHEMA_VERSION_KEY, READABLE_VERSIONS, trajectory_schema

TRAJECTORY_COLUMNS: Final[frozenset[str]] = frozenset.intersection(*(
    frozenset(f.name for f in trajectory_schema(v) if not f.nullable) for v in READABLE_VERSIONS))
"""Columns every readable trajectory schema version requires: a Parquet file holding all of them
is a trajstore trajectory file, whatever its footer says."""


def detect_parquet_schema(columns: Iterable[str], footer: Mapping[bytes, bytes] | None) -> str | None:
    """``trajstore-parquet`` for a Parquet file of trajstore trajectories (its footer carries the
    schema-version stamp, or its columns include :data:`TRAJECTORY_COLUMNS`), else None (its
    rows are detected one by one, as other harnesses' rows). A newer stamp is still ours: the
    reader refuses it as a newer version, never as another harness's rows."""
    if METADATA_SCHEMA_VERSION_KEY in (footer or {}) or TRAJECTORY_COLUMNS <= set(columns):
        return "trajstore-parquet"
    return None


def is_chat(v: Any) -> bool:
    """A non-empty list whose first item looks like an OpenAI chat message."""
    return (isinstance(v, list) and bool(v) and isinstance(v[0], dict) and "role" in v[0]
            and ("content" in v[0] or "tool_calls" in v[0]))


def is_message_list(v: Any) -> bool:
    """A list that reads as ONE conversation rather than an array of records: every item an
    object that is no record of a known format, and some item a chat message (a role and a
    content or tool calls). Its first message may be the broken one (no role), which
    :func:`is_chat` alone misread as an array of records, each refused as not a chat record."""
    return (isinstance(v, list) and bool(v) and all(isinstance(m, dict) and detect_record(m) is None for m in v)
            and any("role" in m and ("content" in m or "tool_calls" in m) for m in v))


def history_kind(history: Any) -> str | None:
    """What a ``history`` list holds, by the shape of its items: ``chat`` (SWE-agent: messages
    with a ``role``), ``v1-events`` (OpenHands V1: events with a ``kind``), ``v0-events``
    (OpenHands V0: events or ``asdict`` dumps with ``action`` / ``observation`` and no role; older
    eval outputs hold ``[action, observation]`` pairs), ``empty``, or None (not a list, or items of
    none of these shapes)."""
    if not isinstance(history, list):
        return None
    items = [x for e in history[:20] for x in (e if isinstance(e, list) else [e]) if isinstance(x, dict)]
    if not history:
        return "empty"
    if any("kind" in e for e in items[:5]):
        return "v1-events"
    if any("role" in e for e in items):
        return "chat"
    if any("action" in e or "observation" in e for e in items):
        return "v0-events"
    return None


SWE_AGENT_KEYS: Final[tuple[str, ...]] = ("trajectory", "info", "environment", "replay_config")
"""Top-level keys of a SWE-agent ``.traj`` besides ``history`` (any of them tells an empty
history apart from an OpenHands record's)."""


def _swe_agent(d: dict[str, Any]) -> bool:
    kind = history_kind(d.get("history"))
    return kind == "chat" or (kind == "empty" and any(k in d for k in SWE_AGENT_KEYS))


def _openhands_history(d: dict[str, Any], want: str) -> bool:
    kind = history_kind(d.get("history"))
    return kind == want or (want == "v0-events" and kind == "empty" and not _swe_agent(d))


def _v0_resolver(d: dict[str, Any]) -> bool:
    return _openhands_history(d, "v0-events") and ("issue" in d or "success" in d) and "instance_id" not in d


def _mini_swe_agent(d: dict[str, Any]) -> bool:
    if isinstance(d.get("trajectory_format"), str) and d["trajectory_format"].startswith("mini-swe-agent"):
        return True
    return isinstance(d.get("messages"), list) and isinstance(d.get("info"), dict) and "mini_version" in d["info"]


def _v1_completion_log(d: dict[str, Any]) -> bool:
    return "messages" in d and isinstance(d.get("response"), dict)  # a chat row may carry a text "response"


def _swe_smith(d: dict[str, Any]) -> bool:
    return "messages" in d and ("traj_id" in d or ("patch" in d and "model" in d)) and not _mini_swe_agent(d)


def _swe_gym(d: dict[str, Any]) -> bool:
    return ("messages" in d and ("resolved" in d or "instance_id" in d) and not _swe_smith(d)
            and not _mini_swe_agent(d) and not _v1_completion_log(d))


def _swe_rebench(d: dict[str, Any]) -> bool:
    t = d.get("trajectory")
    return "trajectory" in d and (is_chat(t) or (isinstance(t, str) and "resolved" in d)) \
        and ("resolved" in d or "tools" in d)


RECORD_SIGNATURES: Final[dict[str, Callable[[dict[str, Any]], bool]]] = {
    "mini-swe-agent": _mini_swe_agent,
    "atif": lambda d: isinstance(d.get("schema_version"), str) and d["schema_version"].startswith("ATIF")
    and "steps" in d,
    "nemo-gym": lambda d: "responses_create_params" in d and "response" in d,
    "swe-agent": _swe_agent,
    "openhands-v1-completions": _v1_completion_log,
    "tau-bench": lambda d: "traj" in d and "reward" in d and ("task_id" in d or "info" in d),
    "verl-rollouts": lambda d: any(k in d for k in INPUT_KEYS) and any(k in d for k in OUTPUT_KEYS)
    and ("score" in d or "step" in d),
    "openhands-v0-resolver": _v0_resolver,
    "openhands-v1-eval": lambda d: _openhands_history(d, "v1-events"),
    "openhands-v0-eval": lambda d: _openhands_history(d, "v0-events") and not _v0_resolver(d),
    "openhands-v0-feedback": lambda d: "feedback" in d and "trajectory" in d,
    "swe-smith": _swe_smith,
    "openhands-swe-gym": _swe_gym,
    "nebius-swe-rebench-openhands": _swe_rebench,
    "nebius-swe-agent": lambda d: isinstance(d.get("trajectory"), list) and ("target" in d or "model_name" in d)
    and not _swe_rebench(d) and "feedback" not in d,
}
"""Per format, the structure one of its records must have: a harness's own marker
(``trajectory_format``, an ``ATIF`` schema version) or the shape of its parts (what a ``history``
list holds, see :func:`history_kind`), never one shared key alone. Formats that share a shape
exclude each other explicitly, so a record matches exactly one (``chat-messages``, the shape
every chat format shares, only when nothing else does; see :func:`formats_of`)."""


def formats_of(d: Any) -> list[str]:
    """Every record format whose structure `d` has (:data:`RECORD_SIGNATURES`, then
    ``chat-messages`` for a ``messages`` chat nothing else claims); one for any record of a
    known harness, [] for none."""
    if not isinstance(d, dict):
        return []
    out = [name for name, sig in RECORD_SIGNATURES.items() if sig(d)]
    if not out and "messages" in d and is_chat(d["messages"]):
        out.append("chat-messages")
    return out


def detect_record(d: Any) -> str | None:
    """Format of one record (a dict that is a whole trajectory / row), or None: the format
    whose structure it has (:func:`formats_of`; should two ever match, the first of
    :data:`RECORD_SIGNATURES`, where harness markers come before shared shapes)."""
    fmts = formats_of(d)
    return fmts[0] if fmts else None


def detect_row(v: Any) -> str | None:
    """Format of one row of a JSONL file or JSON array: :func:`detect_record`, or
    ``chat-messages`` for a row that is itself a list of chat messages."""
    return detect_record(v) or ("chat-messages" if is_chat(v) else None)


EVENT_SIGNATURES: Final[dict[str, Callable[[dict[str, Any]], bool]]] = {
    "openhands-v1-events": lambda d: isinstance(d.get("kind"), str) and ("id" in d or "source" in d),
    "openhands-v0-events": lambda d: ("action" in d or "observation" in d) and not isinstance(d.get("kind"), str),
}
"""Per event format, the structure one of its events has: V1 events carry a ``kind`` class name
(an ``ActionEvent`` also has an ``action`` object), V0 events an ``action`` or ``observation``
name and no ``kind``."""


def event_formats_of(d: Any) -> list[str]:
    """Every event format whose structure `d` has (:data:`EVENT_SIGNATURES`)."""
    return [name for name, sig in EVENT_SIGNATURES.items() if sig(d)] if isinstance(d, dict) else []


def detect_event(d: Any) -> str | None:
    """``openhands-v1-events`` for a V1 event (``kind``), ``openhands-v0-events`` for a V0 event."""
    fmts = event_formats_of(d)
    return fmts[0] if fmts else None


def is_v1_base_state(d: Any) -> bool:
    """An OpenHands V1 conversation's ``base_state.json``: an ``agent`` object and the run's state,
    ``execution_status`` (later SDKs) or ``agent_status`` (SDKs of 2025-09)."""
    return isinstance(d, dict) and isinstance(d.get("agent"), dict) \
        and ("execution_status" in d or "agent_status" in d)


def not_a_trajectory(d: Any) -> str | None:
    """Why a known non-trajectory file holds no trajectory, or None."""
    if isinstance(d, dict):
        if "final_score" in d or "checkpoints" in d:
            return "evaluation score only (its trajectory is the matching traj_<task>.json)"
        if "error" in d and "traceback" in d:
            return f"evaluator crash report, no trajectory and no score: {str(d['error'])[:120]}"
        if "conversation_id" in d and ("llm_model" in d or "title" in d):
            return "conversation metadata only (its events are in the events/ directory next to it)"
        if is_v1_base_state(d):
            return "conversation state (OpenHands V1 base_state.json: read with the events/ directory next to it)"
        if "trial_name" in d and "task_name" in d and isinstance(d.get("agent_info"), dict):
            return "Harbor trial result (result.json: its exception is read with the trial's agent/trajectory.json)"
    return None


def detect_document(d: Any) -> str | None:
    """Format of a whole JSON document (object or array), or None when unknown."""
    fmt = detect_record(d)
    if fmt:
        return fmt
    if isinstance(d, list) and d:
        first = next((x for x in d if isinstance(x, dict)), None)
        if first is None:
            return None
        fmt = detect_record(first)
        if fmt:
            return fmt
        ev = detect_event(first)
        if ev:
            return ev
        if is_message_list(d):
            return "chat-messages"
    return None

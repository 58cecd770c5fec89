"""The input formats ``traj ingest`` reads: their names (``--input-format``), a line of help
each, and the parser of every format whose records (a document, an array item, a JSONL line) are
one trajectory each. Which format a record is in is :mod:`trajstore.ingest.detect`'s part.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Literal

from trajstore.ingest.formats import (
    atif,
    chat_rows,
    mini_swe_agent,
    nemo_gym,
    openhands_v0,
    openhands_v1,
    openhands_v1_completions,
    swe_agent,
    tau_bench,
    verl_rollouts,
)
from trajstore.ingest.records import Origin, Parsed

InputFormat = Literal[
    "openhands-v0-events", "openhands-v0-session", "openhands-v0-eval", "openhands-v0-resolver",
    "openhands-v0-feedback", "openhands-swe-gym", "openhands-v1-events", "openhands-v1-eval",
    "openhands-v1-completions", "chat-messages", "swe-agent", "nebius-swe-agent", "nemo-gym",
    "mini-swe-agent", "swe-smith", "nebius-swe-rebench-openhands", "tau-bench", "atif", "verl-rollouts",
    "trajstore-parquet",
]
FORMATS: Final[tuple[str, ...]] = InputFormat.__args__  # type: ignore[attr-defined]
FORMAT_HELP: Final[dict[str, str]] = {
    "openhands-v0-events": "OpenHands V0 event list: saved trajectory, GUI export, events/ store",
    "openhands-v0-session": "OpenHands V0 sessions/<id>/events/<n>.json",
    "openhands-v0-eval": "OpenHands V0 evaluation output.jsonl",
    "openhands-v0-resolver": "OpenHands V0 resolver output.jsonl",
    "openhands-v0-feedback": "OpenHands 2024 feedback dataset rows",
    "openhands-swe-gym": "SWE-Gym OpenHands-Sampled-Trajectories rows",
    "openhands-v1-events": "OpenHands V1 persisted events",
    "openhands-v1-eval": "OpenHands V1 evaluation output",
    "openhands-v1-completions": "OpenHands V1 log_completions files",
    "chat-messages": "OpenAI chat messages: a JSON list of them, or per JSONL line a list or {\"messages\": [...]}",
    "swe-agent": "SWE-agent .traj files",
    "nebius-swe-agent": "nebius SWE-agent-trajectories rows",
    "nemo-gym": "NeMo Gym rollouts with engine token ids",
    "mini-swe-agent": "mini-swe-agent .traj.json, text (mini-swe-agent-1) or tool-call (mini-swe-agent-1.1) format",
    "swe-smith": "SWE-smith-trajectories rows (messages as a JSON string)",
    "nebius-swe-rebench-openhands": "nebius SWE-rebench-openhands rows (chat under 'trajectory', 'tools')",
    "tau-bench": "tau-bench results files (task results with 'traj', 'reward', 'info')",
    "atif": "ATIF trajectory.json (Harbor / Terminal-Bench), engine token ids kept",
    "verl-rollouts": "verl / SkyRL rollout dumps (input, output, score, step per line)",
    "trajstore-parquet": "trajectory Parquet in trajstore's schema (v1 or v2) written elsewhere: rows checked as "
                         "traj validate checks them, stored as given",
}
"""One line per input format, for ``traj ingest --help``."""


ROW_PARSERS: dict[str, Callable[[Any, Origin], Parsed | list[Parsed]]] = {
    "openhands-v0-eval": openhands_v0.parse_eval_output,
    "openhands-v0-resolver": openhands_v0.parse_resolver_output,
    "openhands-v0-feedback": openhands_v0.parse_feedback_row,
    "openhands-swe-gym": openhands_v0.parse_swe_gym_row,
    "openhands-v1-eval": openhands_v1.parse_eval_output,
    "openhands-v1-completions": openhands_v1_completions.parse_completion_log,
    "swe-agent": swe_agent.parse_traj,
    "nebius-swe-agent": swe_agent.parse_nebius_row,
    "nemo-gym": nemo_gym.parse_rollout,
    "mini-swe-agent": mini_swe_agent.parse_traj,
    "swe-smith": chat_rows.parse_swe_smith_row,
    "nebius-swe-rebench-openhands": chat_rows.parse_swe_rebench_openhands_row,
    "tau-bench": tau_bench.parse_result,
    "atif": atif.parse_trajectory,
    "verl-rollouts": verl_rollouts.parse_row,
    "chat-messages": chat_rows.parse_chat_record,
}
"""Formats whose records (a document, an array item or a JSONL line) are one trajectory each (an
ATIF document: one record per lineage of it)."""


EVENT_FORMATS = ("openhands-v1-events", "openhands-v0-events")
"""Formats whose records are the events of *one* conversation (a JSONL file of them is one trajectory)."""

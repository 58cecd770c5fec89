"""trajstore/ingest/builders/stored_fields.py: the model-call count check, on every real and reported
fixture whose harness counts its own model calls (a model call is one action, whatever order
the log lists its items in)."""

from __future__ import annotations

from collections import defaultdict

from trajstore.ingest import IngestReport, iter_trajectories

HARNESS_COUNT_WRONG = {
    "30692f28b39a4e4eab8257c4b6b50ded": (1, 3),
}
"""Fixtures whose harness count is itself wrong, with (counted, calls in the log), by hand: this
V1 conversation ran a stubbed LLM that recorded one token usage for its three calls (three
ActionEvents with three response ids); the ingest flags it ``model_calls``."""


def test_actions_equal_the_harness_count_of_model_calls(fixtures_dir):
    """Per format, the stored actions of an episode (all its parts) are the harness's own count
    of model calls (NeMo Gym ``turns_used`` / ``osworld_steps``, OpenHands V0 token usages and V1
    agent-LLM usages, SWE-agent and mini-swe-agent ``api_calls``)."""
    rep = IngestReport()
    episodes: dict[tuple, list] = defaultdict(list)
    for t in iter_trajectories([str(fixtures_dir / "trajectories"), str(fixtures_dir / "reported")], report=rep):
        if "harness_model_calls" in t.metadata:
            ing = t.metadata["ingest"]  # copies of one record in two files have the same id
            episodes[(ing["path"], ing["line"], (t.metadata.get("episode") or {}).get("id", t.trajectory_id))].append(t)
    by_format: dict[str, int] = defaultdict(int)
    for parts in episodes.values():
        counted = parts[0].metadata["harness_model_calls"]
        actions = sum(s.kind == "action" for t in parts for s in t.spans)
        path = parts[0].metadata["ingest"]["path"]
        wrong = next((v for k, v in HARNESS_COUNT_WRONG.items() if k in path), None)
        if wrong:
            assert (counted, actions) == wrong
            assert all("model_calls" in t.metadata["fidelity_gaps"] for t in parts)
            continue
        assert actions == counted, path
        assert all("model_calls" not in (t.metadata.get("fidelity_gaps") or {}) for t in parts), path
        by_format[parts[0].metadata["ingest"]["format"]] += 1
    assert set(by_format) >= {"nemo-gym", "openhands/v0-eval", "openhands/v1-events", "swe-agent", "mini-swe-agent"}

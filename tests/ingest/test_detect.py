"""trajstore/ingest/formats/registry.py: each record's format is detected on its own (one folder
holding several formats), by structure, exactly one format per record."""

from __future__ import annotations

import json

import numpy as np

from tests.helpers.ingest import GEN, span_texts
from trajstore.ingest import ingest_paths
from trajstore.ingest.discover import discover
from trajstore.ingest.formats import registry
from trajstore.ingest.read import is_parquet, iter_parquet_rows, load_json_or_jsonl
from trajstore.reader import read_trajectories


# reported: ../shared/fixtures/reported/other-formats
def test_other_formats(reported, tmp_path, tok):
    rep = ingest_paths([str(reported / "other-formats")], str(tmp_path / "s"))
    assert (rep.refused, rep.trajectories_written) == (0, 5)
    assert dict(rep.by_format) == {"atif": 1, "nebius/swe-rebench-openhands": 2, "verl": 2}
    rows = read_trajectories(str(tmp_path / "s")).to_pylist()
    by = {}
    for r in rows:
        by.setdefault(r["source"], []).append(r)
    # ATIF: prompt_token_ids [1, 2, 3, 4], completion_token_ids [5, 6, 7], logprobs [-0.1, -0.2, -0.3]
    (a,) = by["atif"]
    assert (a["token_source"], a["logprob_source"], a["model"], a["prompt_id"]) == ("engine", "engine", "demo", "s1")
    assert a["tokens"] == [1, 2, 3, 4, 5, 6, 7]
    assert [(s["kind"], s["start"], s["end"]) for s in a["spans"]] == [("prompt", 0, 4), ("action", 4, 7)]
    lps = a["action_logprobs"]
    action_lps = lps[4:7] if len(lps) == 7 else lps  # schema v1 (full length) or v2 (action tokens only)
    assert np.allclose(action_lps, [-0.1, -0.2, -0.3])
    assert "no token ids" in json.loads(a["metadata"])["last_observation"]
    # nebius SWE-rebench-openhands: resolved 1 / 0
    neb = sorted(by["nebius/swe-rebench-openhands"], key=lambda r: -r["reward"])
    assert [r["reward"] for r in neb] == [1.0, 0.0] and [r["prompt_id"] for r in neb] == ["org__repo-1"] * 2
    for r in neb:
        assert span_texts(r, tok) == [
            ("prompt", "<|im_start|>system\nYou are an agent.<|im_end|>\n<|im_start|>user\nFix.<|im_end|>\n" + GEN),
            ("action", '<tool_call>\n{"name": "execute_bash", "arguments": {"command":"ls"}}\n</tool_call><|im_end|>'),
            ("observation", "\n<|im_start|>tool\na<|im_end|>\n" + GEN),
            ("action", "done<|im_end|>"),
        ]
        assert r["spans"][2]["cause_id"] == "c1" and r["status"] == "completed"
    # verl: two identical samples of one prompt (GRPO n = 2), both kept, one prompt_id
    v = by["verl"]
    assert len(v) == 2 and len({r["trajectory_id"] for r in v}) == 2 and len({r["prompt_id"] for r in v}) == 1
    for r in v:
        assert r["reward"] == 1.0 and r["token_source"] == "retokenized"
        assert span_texts(r, tok) == [("prompt", "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n"),
                                      ("action", "a<|im_end|>")]
        assert json.loads(r["metadata"])["special_tokens_in_text"] is True


# -- detection decides by structure, exactly one format per record ------------------------
NO_TRAJECTORY = "no trajectory"
EVENT_FORMATS = {f.name for f in registry.REGISTERED if f.events is not None and f.events.signature is not None}


def _names(formats) -> list[str]:
    return [f.name for f in formats]


EXPECTED_FORMATS: list[tuple[str, str]] = [
    # (path prefix under ../shared/fixtures, what every record of it is), most specific first
    ("trajectories/nebius-swe-agent-trajectories/", "nebius-swe-agent"),
    ("trajectories/nemo-gym", "nemo-gym"),
    ("trajectories/openhands-v1-conversations/", "openhands-v1-events"),
    ("trajectories/openhands/sdk_v1_llm_completion_logs_2025-09/llm-logs/", "openhands-v1-completions"),
    ("trajectories/openhands/sdk_v1_llm_completion_logs_2025-09/nonfncall-llm-logs/", "openhands-v1-completions"),
    ("trajectories/openhands/sdk_v1_llm_completion_logs_2025-09/", "chat-messages"),  # *-llm-message.json
    ("trajectories/openhands/sdk_v1_persisted_events_trimmed/", "openhands-v1-events"),
    ("trajectories/openhands/swe-gym_openhands_sampled_trajectories_hf_rows/", "openhands-swe-gym"),
    ("trajectories/openhands/v0_eval_output_multi_swe_bench_v0.35/", "openhands-v0-eval"),
    ("trajectories/openhands/v0_feedback_dataset_2024_hf_rows/", "openhands-v0-feedback"),
    ("trajectories/openhands/v0_resolver_output_2024-11/", "openhands-v0-resolver"),
    ("trajectories/openhands/v0_saved_trajectory/", "openhands-v0-events"),
    ("trajectories/openhands/v0_session_event_store_2025-07/sessions/63b4315947a049e2b7a51249b3d4fcc3/metadata.json",
     NO_TRAJECTORY),
    ("trajectories/openhands/v0_session_event_store_2025-07/", "openhands-v0-events"),
    ("trajectories/openhands/v1_sdk_eval_openagentsafety_gpt4o/eval_", NO_TRAJECTORY),
    ("trajectories/openhands/v1_sdk_eval_openagentsafety_gpt4o/traj_", "openhands-v1-events"),
    ("trajectories/openhands/v1_sdk_eval_openagentsafety_gpt4o/output.jsonl", "openhands-v1-eval"),
    ("trajectories/swe-agent/", "swe-agent"),
    ("reported/atif-", "atif"),
    ("reported/hf-parquet-rows/", "openhands-swe-gym"),
    ("reported/mini-swe-agent-v2/", "mini-swe-agent"),
    ("reported/nemo-gym-", "nemo-gym"),
    ("reported/one-bad-record/tool-call-function-is-a-string.json", "chat-messages"),
    ("reported/one-bad-record/", "nemo-gym"),  # its empty first line is no record (below)
    ("reported/openhands-v1-", "openhands-v1-events"),
    ("reported/other-formats/atif-trajectory.json", "atif"),
    ("reported/other-formats/swe-rebench-openhands-rows.jsonl", "nebius-swe-rebench-openhands"),
    ("reported/other-formats/verl-rollout-step1.jsonl", "verl-rollouts"),
    ("reported/swe-agent-", "swe-agent"),
    ("reported/swe-smith-hf-row/", "swe-smith"),
    ("reported/tau-bench-results/", "tau-bench"),
    ("reported/v1-", "openhands-v1-events"),
]
"""What each fixture file holds, written by hand from SOURCES.md and the reported cases' READMEs
(``base_state.json`` files are conversation state: no trajectory, wherever they are)."""


def _expected_format(rel: str) -> str:
    if rel.endswith("/base_state.json"):
        return NO_TRAJECTORY
    return next(fmt for prefix, fmt in EXPECTED_FORMATS if rel.startswith(prefix))


def _records(path: str):
    """(where, value, is_whole_document) for every record of one fixture file: Parquet rows, JSONL
    lines, the items of a JSON array of records, else the whole document (an object, an event
    list, a bare list of chat messages)."""
    if is_parquet(path):
        return [(f"row {n}", v, False) for n, v in iter_parquet_rows(path)]
    loaded = load_json_or_jsonl(path)
    if loaded.lines is not None:
        return [(f"line {n}", v, False) for n, v in loaded.lines]
    doc = loaded.whole
    if isinstance(doc, list) and registry.one_record_list(doc, "auto") is None \
            and any(registry.formats_of(v) for v in doc):
        return [(f"item {n}", v, False) for n, v in enumerate(doc)]
    return [("document", doc, True)]


def test_every_fixture_record_is_exactly_one_format(fixtures_dir):
    """Every record of every real and reported fixture matches the structure of exactly one
    format, the one it is (events: exactly one event format; a bare message list: only as a
    whole document; conversation state and score files: none, and named as no trajectory)."""
    units, _ = discover([str(fixtures_dir / "trajectories"), str(fixtures_dir / "reported")])
    seen: set[str] = set()
    wrong = []
    for u in units:
        rel = str(u.path)[len(str(fixtures_dir)) + 1:]
        want = _expected_format(rel)
        seen.add(want)
        if u.is_event_dir:
            got = {tuple(_names(registry.event_formats_of(json.loads(open(f).read())))) for f in u.files}
            if got != {(want,)}:
                wrong.append((rel, want, got))
            continue
        for where, v, whole in _records(u.path):
            if want == NO_TRAJECTORY:
                ok = registry.formats_of(v) == [] and registry.not_a_trajectory(v, u.path) is not None
            elif want in EVENT_FORMATS:
                items = v if isinstance(v, list) and whole else [v]
                ok = all(_names(registry.event_formats_of(e)) == [want] for e in items) and registry.formats_of(v) == []
            elif whole and isinstance(v, list):  # one conversation given as a bare list of messages
                doc_format = registry.detect_document(v)
                ok = want == "chat-messages" and doc_format is not None and doc_format.name == want \
                    and all(registry.formats_of(m) == [] for m in v)
            elif v == {} and rel.endswith("first-line-empty-object.jsonl"):
                ok = registry.formats_of(v) == [] and registry.event_formats_of(v) == []
            else:
                ok = _names(registry.formats_of(v)) == [want]
            if not ok:
                wrong.append((rel, where, want, _names(registry.formats_of(v))))
    assert wrong == []
    assert len(seen) >= 17  # every format with a real or reported file was looked at


# reported: a SWE-agent .traj that holds only `history` was read as OpenHands V0
def test_swe_agent_traj_with_only_a_history_is_swe_agent(reported, tmp_path, tok):
    doc = json.loads((reported / "swe-agent-demonstration-replayed" / "networking_1.traj").read_text())
    only_history = {"history": doc["history"]}
    assert _names(registry.formats_of(only_history)) == ["swe-agent"]
    assert _names(registry.formats_of({"history": [], "info": {"exit_status": "submitted"}})) == ["swe-agent"]
    assert _names(registry.formats_of({"history": [], "instance_id": "x"})) == ["openhands-v0-eval"]
    (tmp_path / "only-history.traj").write_text(json.dumps(only_history))
    rep = ingest_paths([str(tmp_path / "only-history.traj")], str(tmp_path / "s"))
    assert rep.problems == [] and dict(rep.by_format) == {"swe-agent": 1}
    (row,) = read_trajectories(str(tmp_path / "s")).to_pylist()
    assert row["source"] == "swe-agent" and row["num_actions"] == 4  # the 4 assistant turns


def _every_signature(d) -> list[str]:
    """The record formats `d` matches when every format's signature is asked, whatever its keys."""
    if not isinstance(d, dict):
        return []
    found = [f for f in registry.REGISTERED if f.records is not None and f.records.keys and registry._matches(f, d)]
    main = [f.name for f in found if not f.records.fallback]
    return main or [f.name for f in found]


def test_a_formats_keys_only_spare_asking_signatures_that_would_say_no(fixtures_dir):
    """Detection asks a format's signature only of objects holding one of its keys: on every
    record (and every event, and every item of a list) of every real and reported fixture, that
    finds what asking every signature finds."""
    units, _ = discover([str(fixtures_dir / "trajectories"), str(fixtures_dir / "reported")])
    checked = 0
    for u in units:
        values = [json.loads(open(f).read()) for f in u.files] if u.is_event_dir else \
            [v for _, doc, _ in _records(u.path) for v in ([doc] + (doc if isinstance(doc, list) else []))]
        for v in values:
            assert _names(registry.formats_of(v)) == _every_signature(v), u.path
            checked += 1
    assert checked > 200

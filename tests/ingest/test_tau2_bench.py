"""trajstore/ingest/formats/tau2_bench.py: real tau2-bench results (tests/fixtures/ingest/tau2_bench)
stored span by span as the agent saw them: the orchestrator's greeting as context, the user
simulator's own tool calls left out, finish reasons, status and reward from the file; the
directory form; detection."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from tests.helpers.faithful import FIXTURES, action, assert_faithful, load, observation
from tests.helpers.ingest import GEN, stored
from trajstore.cli.main import app
from trajstore.ingest import ingest_paths
from trajstore.ingest.formats import registry

DIR = FIXTURES / "tau2_bench"
AIRLINE = DIR / "gpt-4.1_airline_default_gpt-4.1_1trials.trimmed.json"
TELECOM = DIR / "telecom_llm_agent_gpt-4o_user_simulator_gpt-4o.trimmed.json"


def _finish(m: dict) -> str | None:
    raw = m.get("raw_data") or {}
    return (raw.get("choices") or [raw])[0].get("finish_reason")


def _turns(sim: dict) -> tuple[list, str]:
    """The spans the agent's side of `sim` must become (from its first model call) and the tail
    of the first call's prompt, from the log: the greeting is context; the user simulator's own
    tool calls and their results are not the agent's."""
    msgs = [m for m in sim["messages"] if not (m["role"] == "user" and m.get("tool_calls"))
            and not (m["role"] == "tool" and m.get("requestor") == "user")]
    assert msgs[0]["role"] == "assistant" and msgs[0]["raw_data"] is None  # the scripted greeting
    first = next(i for i, m in enumerate(msgs) if m["role"] == "assistant" and m["raw_data"])
    tail = f"<|im_start|>assistant\n{msgs[0]['content']}<|im_end|>\n" + "".join(
        f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in msgs[1:first]) + GEN
    turns = []
    for m in msgs[first:]:
        if m["role"] == "assistant":
            calls = [(c["name"], json.dumps(c["arguments"])) for c in m.get("tool_calls") or []]
            turns.append(action(m["content"] or "", calls, finish_reason=_finish(m)))
        else:
            turns.append(observation(m["role"], m["content"]))
    return turns, tail


def test_tau2_results_ingest_with_exit_0(tmp_path):
    res = CliRunner().invoke(app, ["ingest", str(tmp_path / "s"), str(DIR)])
    assert res.exit_code == 0, res.output
    assert len(stored(tmp_path / "s")) == 5


def test_every_simulation_is_stored_span_by_span_as_the_agent_saw_it(tmp_path, tok):
    rep = ingest_paths([str(AIRLINE), str(TELECOM)], tmp_path / "s")
    assert rep.problems == [] and rep.by_format == {"tau2-bench": 5}
    rows = {json.loads(r["metadata"])["simulation_id"]: r for r in stored(tmp_path / "s")}
    for path in (AIRLINE, TELECOM):
        doc = load(path)
        policy = doc["info"]["environment_info"]["policy"]
        for sim in doc["simulations"]:
            row = rows[sim["id"]]
            turns, tail = _turns(sim)
            assert_faithful(row, tok, turns, tail)
            prompt = tok.decode(row["tokens"][:row["spans"][0]["end"]])
            assert prompt.startswith("<|im_start|>system\n<instructions>\n") and f"<policy>\n{policy}\n</policy>" in prompt
            assert row["reward"] == sim["reward_info"]["reward"] and row["status"] == "completed"
            assert row["model"] == doc["info"]["agent_info"]["llm"] and row["source"] == "tau2-bench"
            domain = doc["info"]["environment_info"]["domain_name"]
            assert row["prompt_id"] == f"{domain}/task-{sim['task_id']}"
            meta = json.loads(row["metadata"])
            assert meta["termination_reason"] == "user_stop" and meta["task"]["id"] == sim["task_id"]
            assert "system_prompt" in meta["fidelity_gaps"]  # rebuilt from tau2's template, said so


def test_the_user_simulators_own_tool_calls_are_not_the_agents_context(tmp_path, tok):
    ingest_paths([str(TELECOM)], tmp_path / "s")
    sim = load(TELECOM)["simulations"][0]
    own = [m for m in sim["messages"] if (m["role"] == "user" and m.get("tool_calls"))
           or (m["role"] == "tool" and m.get("requestor") == "user")]
    assert own
    row = next(r for r in stored(tmp_path / "s") if json.loads(r["metadata"])["simulation_id"] == sim["id"])
    text = tok.decode(row["tokens"])
    for m in own:
        for c in m.get("tool_calls") or []:
            assert f'"name": "{c["name"]}"' not in text
    assert json.loads(row["metadata"])["user_tool_messages"] == len(own)


def test_termination_sets_the_status_and_an_infrastructure_error_is_no_score(tmp_path):
    doc = load(AIRLINE)
    doc["simulations"] = doc["simulations"][:3]
    for sim, term in zip(doc["simulations"], ("max_steps", "agent_error", "infrastructure_error")):
        sim["termination_reason"] = term
    p = tmp_path / "results.json"
    p.write_text(json.dumps(doc))
    ingest_paths([str(p)], tmp_path / "s")
    got = {json.loads(r["metadata"])["termination_reason"]: r for r in stored(tmp_path / "s")}
    assert got["max_steps"]["status"] == "truncated" and got["agent_error"]["status"] == "failed"
    infra = got["infrastructure_error"]
    assert infra["status"] == "aborted" and infra["reward"] is None
    assert "not a score" in json.loads(infra["metadata"])["reward_error"]


def test_a_full_duplex_simulation_is_refused_by_name_and_the_others_kept(tmp_path):
    doc = load(AIRLINE)
    doc["simulations"][1]["messages"] = None
    doc["simulations"][1]["ticks"] = [{"tick_id": 0, "timestamp": "t"}]
    p = tmp_path / "results.json"
    p.write_text(json.dumps(doc))
    rep = ingest_paths([str(p)], tmp_path / "s")
    (prob,) = rep.problems
    assert prob.kind == "unsupported" and prob.origin.line == 2 and "full-duplex" in prob.reason
    assert rep.trajectories_written == 2


def test_the_directory_form_stores_the_same_trajectories(tmp_path):
    doc = load(AIRLINE)
    run = tmp_path / "run"
    (run / "simulations").mkdir(parents=True)
    for sim in doc["simulations"]:
        (run / "simulations" / f"{sim['id']}.json").write_text(json.dumps(sim, indent=2))
    index = [{"id": s["id"], "task_id": s["task_id"], "trial": s["trial"]} for s in doc["simulations"]]
    (run / "results.json").write_text(json.dumps({**doc, "simulations": [], "simulation_index": index}))
    rep = ingest_paths([str(run)], tmp_path / "dir")
    assert [p.kind for p in rep.problems] == ["no_trajectory"] and rep.refused == 0  # results.json: named
    whole = ingest_paths([str(AIRLINE)], tmp_path / "whole")
    assert sorted(rep.written_ids) == sorted(whole.written_ids)


def test_detection(tmp_path):
    doc = load(AIRLINE)
    assert registry.detect_document(doc).name == "tau2-bench"
    assert registry.detect_record(doc["simulations"][0]).name == "tau2-bench"
    meta = {**doc, "simulations": [], "simulation_index": []}
    assert "directory form" in registry.not_a_trajectory(meta, "results.json")
    # tau-bench (v1) results are not tau2's, and a tau2 simulation is no plain chat record
    assert registry.detect_record({"task_id": 1, "reward": 1.0, "info": {}, "traj": []}).name == "tau-bench"
    assert registry.detect_record({"messages": [{"role": "user", "content": "x"}]}).name == "chat-messages"


def test_fixture_provenance_is_recorded():
    sources = (DIR / "SOURCES.md").read_text()
    for f in DIR.glob("*.json"):
        assert f.name in sources
    assert Path(AIRLINE).is_file() and Path(TELECOM).is_file()

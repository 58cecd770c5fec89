"""ingest_paths end to end: malformed input, --strict, idempotent re-ingest, S3 (moto),
observation capping and hostile text; the CLI in-process and as a subprocess."""

from __future__ import annotations

import json

import pytest

from trajstore.ingest import TRUNCATION_MARKER, IngestError, ingest_paths
from trajstore.reader import read_trajectories


def _lines(fix, rel):
    return (fix / rel).read_text().splitlines()


@pytest.fixture()
def mixed(tmp_path, fix):
    """A JSONL with a good row, a non-JSON line, a row without history, and a good row."""
    rows = _lines(fix, "openhands/v0_resolver_output_2024-11/output.jsonl")
    p = tmp_path / "logs" / "output.jsonl"
    p.parent.mkdir()
    p.write_text("\n".join([rows[0], "<PLACEHOLDER ROW>", json.dumps({"issue": {}, "success": True,
                                                                       "history": "oops"}), rows[1]]) + "\n")
    return p


def test_malformed_lines_are_reported_and_the_rest_ingested(tmp_path, mixed):
    rep = ingest_paths([str(mixed)], str(tmp_path / "store"))
    assert rep.trajectories_written == 2
    where = sorted((p.origin.line, p.kind) for p in rep.problems)
    assert where == [(2, "malformed"), (3, "malformed")]
    assert all(p.origin.path == str(mixed) for p in rep.problems)
    assert "not valid JSON" in rep.problems[0].reason and "history" in rep.problems[1].reason


def test_strict_writes_nothing(tmp_path, mixed):
    with pytest.raises(IngestError) as e:
        ingest_paths([str(mixed)], str(tmp_path / "store"), strict=True)
    assert f"{mixed}:2" in str(e.value)
    assert read_trajectories(str(tmp_path / "store")).num_rows == 0


def test_reingest_is_idempotent(tmp_path, fix):
    src = [str(fix / "swe-agent"), str(fix / "openhands/v0_saved_trajectory")]
    first = ingest_paths(src, str(tmp_path / "s"))
    again = ingest_paths(src, str(tmp_path / "s"))
    # 4 saved trajectories + SWE-agent 0.x (1) + 1.x (6: its last_n_observations history processor
    # gives calls 7..11 contexts of their own, see test_fidelity.py) = 11
    assert first.trajectories_written == 11 and again.trajectories_written == 0
    assert again.skipped["already_in_store"] == 11
    ids = read_trajectories(str(tmp_path / "s"), columns=["trajectory_id"], dedupe=False)
    assert ids.num_rows == 11


def test_duplicate_files_in_one_run(tmp_path, fix):
    a = tmp_path / "a.traj"
    a.write_bytes((fix / "swe-agent/v0.x_gpt4_pydicom__pydicom-1458.traj").read_bytes())
    b = tmp_path / "copy" / "a.traj"
    b.parent.mkdir()
    b.write_bytes(a.read_bytes())
    rep = ingest_paths([str(tmp_path)], str(tmp_path / "store"))
    assert rep.trajectories_written == 1 and rep.skipped["duplicate_in_input"] == 1


def test_ingest_into_s3(s3_store_uri, fix):
    uri, opts = s3_store_uri
    rep = ingest_paths([str(fix / "nemo-gym")], uri, storage_options=opts)
    assert rep.trajectories_written == 10
    t = read_trajectories(uri, storage_options=opts, columns=["token_source", "reward"])
    assert t.num_rows == 10
    again = ingest_paths([str(fix / "nemo-gym")], uri, storage_options=opts)
    assert again.trajectories_written == 0 and again.skipped["already_in_store"] == 10


def test_huge_observation_capped_and_hostile_text(tmp_path, tok):
    huge = "<div>" + "x" * 50_000 + "</div>"
    events = [
        {"id": 0, "source": "user", "action": "message", "args": {"content": "browse"}},
        {"id": 1, "source": "agent", "action": "browse", "args": {"url": "http://x", "thought": "look"}},
        {"id": 2, "source": "agent", "observation": "browse", "cause": 1, "content": huge},
        {"id": 3, "source": "agent", "action": "warp_drive", "args": {"speed": 9}},
        {"id": 4, "source": "agent", "observation": "run", "cause": 3, "content": "\x1b[31mred\x1b[0m\r\nline"},
    ]
    raw = json.dumps(events).encode().replace(b"line", b"l\xffine")  # invalid UTF-8 inside a string
    p = tmp_path / "t.json"
    p.write_bytes(raw)
    rep = ingest_paths([str(p)], str(tmp_path / "s"), max_observation_chars=1000)
    assert rep.trajectories_written == 1 and rep.truncated_observations == 1 and rep.degraded_events == 1
    t = read_trajectories(str(tmp_path / "s")).to_pylist()[0]
    obs = [s for s in t["spans"] if s["kind"] == "observation"]
    assert obs[0]["truncated"] is True and obs[0]["cause_id"] == "1" and obs[1]["cause_id"] == "3"
    text = tok.decode(t["tokens"][obs[0]["start"]:obs[0]["end"]])
    assert TRUNCATION_MARKER.format(dropped=len(huge) - 1000, total=len(huge)).strip() in text
    assert len(text) < 1200
    meta = json.loads(t["metadata"])
    assert meta["truncated_observations"] == [{"message": 2, "original_chars": len(huge)}]
    assert meta["unknown_event_kinds"] == ["warp_drive"]
    assert "\ufffd" in tok.decode(t["tokens"])


def test_unknown_shape_and_missing_path(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"hello": 1}')
    q = tmp_path / "bad.json"
    q.write_text('{"history": [1, 2')
    rep = ingest_paths([str(p), str(q), str(tmp_path / "nope")], str(tmp_path / "s"))
    by = {pr.origin.path: pr for pr in rep.problems}
    assert by[str(p)].kind == "unsupported" and "hello" in by[str(p)].reason
    assert by[str(q)].kind == "malformed" and "line 1" in by[str(q)].reason
    assert by[str(tmp_path / "nope")].reason == "no such file or directory"


def test_json_nested_too_deeply_is_a_problem_not_a_crash(tmp_path):
    # json.loads raised RecursionError, which escaped every handler as a traceback.
    deep = "[" * 100_000 + "]" * 100_000
    p = tmp_path / "deep.json"
    p.write_text(deep)
    q = tmp_path / "deep.jsonl"
    q.write_text('{"hello": 1}\n' + deep + "\n")
    rep = ingest_paths([str(p), str(q)], str(tmp_path / "s"))
    reasons = {(pr.origin.path, pr.origin.line): pr.reason for pr in rep.problems}
    assert "nested too deeply" in reasons[(str(p), None)]
    assert "nested too deeply" in reasons[(str(q), 2)]
    assert rep.trajectories_written == 0


def test_a_too_deep_first_jsonl_line_costs_only_itself(tmp_path):
    # With the deep line first, parsing the file as one document hit the recursion limit before
    # any JSON error, and the whole file was refused: the good chat on line 2 was never stored.
    deep = "[" * 100_000 + "]" * 100_000
    q = tmp_path / "deep-first.jsonl"
    q.write_text(deep + "\n" + json.dumps([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}])
                 + "\n")
    rep = ingest_paths([str(q)], str(tmp_path / "s"))
    reasons = {(pr.origin.path, pr.origin.line): pr.reason for pr in rep.problems}
    assert list(reasons) == [(str(q), 1)] and "nested too deeply" in reasons[(str(q), 1)]
    assert rep.trajectories_written == 1


# -- one bad record costs only itself (issue 12, item 6) -----------------------------------------

def _nemo_row(q: str, gen: list[int]) -> dict:
    return {"responses_create_params": {"input": [{"role": "user", "content": q}]},
            "response": {"output": [{"id": "o1", "type": "message", "generation_token_ids": gen,
                                     "generation_log_probs": [-0.5] * len(gen), "prompt_token_ids": [1, 2]}]},
            "reward": 1.0}


def test_jsonl_format_is_detected_per_line(tmp_path):
    # The first line is of no known shape and the third of another format: neither decides the
    # file. Line 1 is parsed as the file's format (nemo-gym, from line 2), so its reason names
    # what it lacks; line 3 (a SWE-Gym chat row) is read as what it is.
    swe_gym = {"instance_id": "x-1", "resolved": True,
               "messages": [{"role": "user", "content": "fix"}, {"role": "assistant", "content": "done"}]}
    p = tmp_path / "mixed.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in [{"note": "header"}, _nemo_row("a", [5, 6]), swe_gym,
                                                    _nemo_row("b", [7])]) + "\n")
    rep = ingest_paths([str(p)], str(tmp_path / "s"))
    assert rep.trajectories_written == 3
    assert dict(rep.by_format) == {"nemo-gym": 2, "openhands/swe-gym": 1}
    assert [(pr.origin.line, pr.kind) for pr in rep.problems] == [(1, "malformed")]
    assert "no 'response' object" in rep.problems[0].reason


def test_a_parser_crash_is_a_problem_of_that_record_only(tmp_path, monkeypatch):
    # Any exception (not only the parsers' RecordError) stays with its record.
    from trajstore.ingest import registry

    real = registry.ROW_PARSERS["nemo-gym"]

    def flaky(row, origin):
        if row["reward"] == 0.5:
            raise KeyError("surprise")
        return real(row, origin)

    monkeypatch.setitem(registry.ROW_PARSERS, "nemo-gym", flaky)
    rows = [_nemo_row("a", [5]), {**_nemo_row("b", [6]), "reward": 0.5}, _nemo_row("c", [7])]
    p = tmp_path / "r.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows))
    rep = ingest_paths([str(p)], str(tmp_path / "s"))
    assert rep.trajectories_written == 2
    assert [(pr.origin.line, pr.reason) for pr in rep.problems] == [(2, "KeyError: 'surprise'")]


def test_out_of_order_events_are_read_in_id_order(tmp_path, fix):
    # basic.json holds V0 events with ids 0, 3, 4, 5; the same events shuffled give the same
    # conversation, hence the same trajectory id (already in the store), with the count noted.
    events = json.loads((fix / "openhands/v0_saved_trajectory/basic.json").read_text())
    shuffled = [events[2], events[0], events[3], events[1]]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "t.json").write_text(json.dumps(events))
    (tmp_path / "b" / "t.json").write_text(json.dumps(shuffled))
    store = str(tmp_path / "s")
    first = ingest_paths([str(tmp_path / "a")], store)
    again = ingest_paths([str(tmp_path / "b")], store)
    assert first.trajectories_written == 1 and again.trajectories_written == 0
    assert again.skipped == {"already_in_store": 1}
    # two different events with one id: the order is unknowable, the trajectory is refused
    clash = [events[0], {**events[1], "id": 0}]
    (tmp_path / "c.json").write_text(json.dumps(clash))
    rep = ingest_paths([str(tmp_path / "c.json")], store)
    assert rep.trajectories_written == 0
    assert "share id 0 with different content" in rep.problems[0].reason


def test_a_cap_that_truncates_nothing_keeps_the_ids(tmp_path, fix):
    src = [str(fix / "swe-agent")]
    store = str(tmp_path / "s")
    first = ingest_paths(src, store)
    # 7 = the 0.x run (one context) + the 1.x run, whose history processor gives 6 contexts
    assert first.trajectories_written == 7 and first.truncated_observations == 0
    again = ingest_paths(src, store, max_observation_chars=None)  # no cap: nothing changes
    assert again.trajectories_written == 0 and again.skipped == {"already_in_store": 7}
    cut = ingest_paths(src, store, max_observation_chars=50)  # this cap cuts observations: new content
    assert cut.truncated_observations > 0 and cut.trajectories_written > 0


def test_a_directory_is_never_skipped_silently(tmp_path):
    d = tmp_path / "dataset"
    d.mkdir()
    (d / "README.md").write_text("# a dataset card")
    (d / "data.arrow").write_bytes(b"\x00")
    rep = ingest_paths([str(d)], str(tmp_path / "s"))
    assert rep.files_seen == 0 and rep.ignored_files == {".md": 1, ".arrow": 1}
    assert [(pr.origin.path, pr.kind) for pr in rep.problems] == [(str(d), "unsupported")]
    assert "(1 .md, 1 .arrow)" in rep.problems[0].reason or "(1 .arrow, 1 .md)" in rep.problems[0].reason


@pytest.mark.slow
def test_every_real_fixture_is_stored_or_turned_away_with_a_reason(tmp_path, fix):
    """The whole ``../shared/fixtures/trajectories`` tree (~12 CPU-seconds, hence slow): every
    log file ends up in a stored trajectory (its own or its events/ folder's), or is turned
    away with a reason, or is a completion log superseded by a later one of the same run."""
    from pathlib import Path

    st = str(tmp_path / "s")
    rep = ingest_paths([str(fix)], st)
    assert rep.refused == 0 and rep.ignored_files == {".md": 1}  # SOURCES.md
    # base_state.json x3, the V0 session's metadata.json, eval_*.json x4 (scores of traj_*.json or a crash)
    assert [p.kind for p in rep.problems] == ["no_trajectory"] * 8 and all(len(p.reason) > 20 for p in rep.problems)
    # V1 completion logs: each log repeats the run's earlier requests, so only the last of each
    # folder is a trajectory: llm-logs 6 - 1 = 5, nonfncall-llm-logs 4 - 1 = 3
    assert rep.skipped == {"superseded_completion_log": 8}
    logs = fix / "openhands/sdk_v1_llm_completion_logs_2025-09"
    superseded = {p for d in ("llm-logs", "nonfncall-llm-logs") for p in sorted((logs / d).glob("*.json"))[:-1]}
    origins = {Path(json.loads(m)["ingest"]["path"]).resolve()
               for m in read_trajectories(st, columns=["metadata"]).column("metadata").to_pylist()}
    away = {Path(p.origin.path).resolve() for p in rep.problems}
    files = [p for p in fix.rglob("*") if p.is_file() and p.suffix in (".json", ".jsonl", ".traj", ".parquet")]
    unaccounted = [p for p in files if p not in superseded and p.resolve() not in away
                   and not ({p.resolve(), *p.resolve().parents} & origins)]
    assert unaccounted == []

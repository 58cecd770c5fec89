"""trajstore/ingest/formats/verl_rollouts.py: verl / SkyRL rollout dumps (input, output, score, step)."""

from __future__ import annotations

import json

from tests.helpers.ingest import by_line, only_row, span_texts, stored, write_jsonl
from trajstore.ingest import ingest_paths


# fidelity of a format added beyond the reported cases
def test_skyrl_field_names_and_empty_output(tmp_path, tok):
    rows = [{"input_prompt": "Q: 1+1?\nA:", "output_response": " 2", "score": 0.5, "global_step": 3},
            {"input_prompt": "Q: 2+2?\nA:", "output_response": "", "score": 0.0, "global_step": 3}]
    p = tmp_path / "3.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows))
    rep = ingest_paths([str(p)], tmp_path / "s")
    assert [(pr.origin.line, pr.kind) for pr in rep.problems] == [(2, "malformed")]
    assert "output is empty" in rep.problems[0].reason
    row = only_row(tmp_path / "s")
    assert span_texts(row, tok) == [("prompt", "Q: 1+1?\nA:"), ("action", " 2")]
    meta = json.loads(row["metadata"])
    assert row["reward"] == 0.5 and meta["special_tokens_in_text"] is False
    assert list(meta["fidelity_gaps"]) == ["special_tokens"]


# hostile tester: a fault found in `traj ingest` (failed before its fix)
def test_verl_score_strings(tmp_path):
    f = write_jsonl(tmp_path / "dump.jsonl", [{"input": "2+2?", "output": "4", "score": "1.0", "step": 1},
                                              {"input": "2+3?", "output": "6", "score": "NaN", "step": 1}])
    rep = ingest_paths([str(f)], str(tmp_path / "s"))
    assert [r["reward"] for r in stored(tmp_path / "s")] == [1.0]
    assert by_line(rep)[("dump.jsonl", 2)].reason == "score is 'NaN': expected a finite number"

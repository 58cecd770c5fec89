"""trajstore/ingest/detect.py: each record's format is detected on its own (one folder holding
several formats)."""

from __future__ import annotations

import json

import numpy as np

from tests.helpers.ingest import GEN, span_texts
from trajstore.ingest import ingest_paths
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

"""trajstore/ingest/builder.py: an unpaired UTF-16 surrogate is replaced and flagged, not a
UnicodeEncodeError."""

from __future__ import annotations

import json

from tests.helpers.ingest import CHAT, smith_row, stored
from trajstore.ingest import ingest_paths


# hostile tester: a fault found in `traj ingest` (failed before its fix)
def test_an_unpaired_surrogate_is_replaced_and_flagged_not_a_unicode_traceback(tmp_path):
    chat = [dict(m) for m in CHAT]
    chat[3]["content"] = "src tests \ud83d"  # the high half of an emoji, its low half cut off
    f = tmp_path / "rows.jsonl"
    f.write_text(json.dumps(smith_row(1, messages=json.dumps(chat))) + "\n"  # ASCII escapes, as harnesses write
                 + json.dumps({"input": "2+2? \udcff", "output": "4", "score": 1, "step": 0}) + "\n")
    rep = ingest_paths([str(f)], str(tmp_path / "s"))
    assert rep.problems == []
    rows = stored(tmp_path / "s")
    assert len(rows) == 2
    for r in rows:
        gaps = json.loads(r["metadata"])["fidelity_gaps"]
        assert gaps["unpaired_surrogates"].startswith("1 unpaired UTF-16 surrogate(s)")
    assert rep.fidelity_gaps["unpaired_surrogates"] == 2

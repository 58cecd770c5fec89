"""trajstore/ingest/summary.py: each kind of line of the ingest summary has a one-line meaning,
and the docs page it points to explains every one under the anchor it names."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from trajstore.ingest.summary import SKIP_MEANINGS, SUMMARY_DOCS, IngestReport, summary_notes

ROOT = Path(__file__).resolve().parents[2]


def test_every_skip_reason_and_fidelity_gap_is_explained():
    """Walkthrough: the summary listed `skipped: superseded_completion_log` and `not faithful: tools`
    with no word on what they mean; stderr explained only the no_trajectory skips."""
    r = IngestReport(skipped=Counter(superseded_completion_log=8, already_in_store=0),
                     fidelity_gaps=Counter(tools=19, system_prompt=15))
    notes = summary_notes(r)
    assert notes[0].startswith("note: skipped: superseded_completion_log: an OpenHands V1 completion log")
    assert "nothing is lost" in notes[0] and not any("already_in_store" in n for n in notes)  # only what it shows
    assert notes[1].startswith("note: not faithful: ") and "fidelity_gaps" in notes[1] and "train" in notes[1]
    assert notes[-1].endswith(SUMMARY_DOCS)
    assert summary_notes(IngestReport()) == []


def test_the_docs_anchor_exists_and_lists_every_reason():
    page, anchor = SUMMARY_DOCS.split("#")
    text = (ROOT / page).read_text()
    headings = {re.sub(r"[^a-z0-9 -]", "", h.lower()).strip().replace(" ", "-")
                for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}
    assert anchor in headings
    section = text.split("## The ingest summary", 1)[1].split("\n## ", 1)[0]
    assert all(f"`skipped: {reason}`" in section for reason in SKIP_MEANINGS)
    assert "`not faithful: FLAG`" in section

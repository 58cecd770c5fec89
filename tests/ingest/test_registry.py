"""trajstore/ingest/formats/registry.py: every input format is declared once, by its own module,
and the rest of the ingest asks the registry: names and sources are unique, each format reads
something, the formats a signature excludes exist, and a format named for input it does not read
is refused by name."""

from __future__ import annotations

import json

import pytest

from tests.helpers.ingest import nemo_row
from trajstore.ingest import FORMATS, IngestReport, iter_trajectories
from trajstore.ingest.formats import registry


def test_every_format_is_registered_once_and_reads_something():
    names = [f.name for f in registry.REGISTERED]
    assert len(set(names)) == len(names) and tuple(names) == FORMATS
    sources = [f.source for f in registry.REGISTERED]
    assert len(set(sources)) == len(sources)  # a stored source names one format
    for f in registry.REGISTERED:
        assert f.help and (f.records or f.events or f.parquet), f.name
        if f.records is not None:
            assert all(x in registry.BY_NAME and x != f.name for x in f.records.excludes), f.name
    assert sum(1 for f in registry.REGISTERED if f.events and f.events.reads_any_folder) == 1


def test_an_unknown_format_name_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match="unknown input format 'nope'; choose auto or one of openhands-v0-events"):
        list(iter_trajectories(["."], input_format="nope"))


# hostile tester: a fault found in `traj ingest` (failed before its fix)
def test_a_folder_only_format_named_for_rows_is_refused_by_name_not_as_a_python_error(tmp_path):
    # --input-format openhands-v0-session reads event folders only; on a JSONL file each row used
    # to be refused as "malformed: KeyError: 'openhands-v0-session'"
    p = tmp_path / "rows.jsonl"
    p.write_text("\n".join(json.dumps(nemo_row(k, [5])) for k in "ab") + "\n")
    report = IngestReport()
    assert list(iter_trajectories([str(p)], input_format="openhands-v0-session", report=report)) == []
    assert [(pr.origin.line, pr.kind) for pr in report.problems] == [(1, "unsupported"), (2, "unsupported")]
    assert report.problems[0].reason.startswith("--input-format openhands-v0-session does not read records")

"""trajstore/ingest/discover.py: walking the input paths: special files in a folder are skipped,
never opened."""

from __future__ import annotations

import os

import pytest

from tests.helpers.ingest import by_line, run_with_deadline, smith_row, write_jsonl
from trajstore.ingest import ingest_paths


# hostile tester: a fault found in `traj ingest` (failed before its fix)
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")
def test_a_named_pipe_in_a_folder_is_skipped_never_opened(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    write_jsonl(d / "a.jsonl", [smith_row(1)])
    os.mkfifo(d / "b.jsonl")  # no writer: opening it for reading would block forever
    rep = run_with_deadline(lambda: ingest_paths([str(d)], str(tmp_path / "s")))
    assert rep.trajectories_written == 1  # a.jsonl's one row
    p = by_line(rep)[("b.jsonl", None)]
    assert (p.kind, p.reason) == ("no_trajectory", "a named pipe (FIFO), not a regular file: skipped, never opened")
    assert rep.refused == 0  # deliberately skipped: exit status 0

"""trajstore/ingest/read.py: reading input files: special files never opened, binary files and
broken Parquet named in one line, Parquet rows read row by row, where a JSON document breaks off."""

from __future__ import annotations

import gzip
import json
import os
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers.ingest import GEN, run_with_deadline, span_texts
from trajstore.ingest import ingest_paths
from trajstore.ingest.read import NotARegularFile, read_text
from trajstore.reader import read_trajectories


# fidelity of a format added beyond the reported cases
def test_parquet_directory_of_dataset_shards(tmp_path, tok):
    # Two shards in a dataset layout (data/train-0000x-of-00002.parquet): SWE-smith rows with
    # the chat as a JSON string, and a file that only claims to be Parquet.
    chat = [{"role": "user", "content": "fix"}, {"role": "assistant", "content": "ok"}]
    d = tmp_path / "ds" / "data"
    d.mkdir(parents=True)
    for i in range(2):
        tbl = pa.table({"traj_id": [f"t{i}"], "instance_id": ["inst"], "model": ["m"], "resolved": [bool(i)],
                        "patch": [""], "messages": [json.dumps(chat)]})
        pq.write_table(tbl, d / f"train-0000{i}-of-00002.parquet")
    (d / "broken.parquet").write_bytes(b"not parquet at all")
    rep = ingest_paths([str(tmp_path / "ds")], tmp_path / "s")
    assert rep.trajectories_written == 2 and dict(rep.by_format) == {"swe-smith": 2}
    (bad,) = rep.problems
    assert bad.origin.path.endswith("broken.parquet") and bad.kind == "malformed"
    rows = sorted(read_trajectories(str(tmp_path / "s")).to_pylist(), key=lambda r: r["reward"])
    assert [r["reward"] for r in rows] == [0.0, 1.0]
    assert span_texts(rows[0], tok) == [("prompt", "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
                                                   "trained by Hugging Face<|im_end|>\n<|im_start|>user\nfix<|im_end|>\n"
                                                   + GEN),
                                        ("action", "ok<|im_end|>")]


# reported: ../shared/fixtures/reported/hf-parquet-rows
def test_hf_parquet_rows(reported, tmp_path, tok):
    # hf-parquet-rows/train-00000-of-00001.parquet: one SWE-Gym row (resolved = true) with
    # system "sys", user "Fix it.", assistant "Done.".
    rep = ingest_paths([str(reported / "hf-parquet-rows")], str(tmp_path / "s"))
    assert (rep.files_seen, rep.trajectories_written, rep.refused) == (1, 1, 0)
    assert rep.ignored_files == {"(no suffix)": 1}  # the folder's README: counted, not read
    (row,) = read_trajectories(str(tmp_path / "s")).to_pylist()
    assert row["source"] == "openhands/swe-gym" and row["reward"] == 1.0 and row["prompt_id"] == "demo__lib-1"
    assert json.loads(row["metadata"])["ingest"]["line"] == 1  # Parquet row 1
    assert span_texts(row, tok) == [
        ("prompt", "<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\nFix it.<|im_end|>\n" + GEN),
        ("action", "Done.<|im_end|>"),
    ]


# hostile tester: a fault found in `traj ingest` (failed before its fix)
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")
def test_a_named_pipe_named_on_the_command_line_is_refused_and_read_text_never_blocks(tmp_path):
    fifo = tmp_path / "p.json"
    os.mkfifo(fifo)
    rep = run_with_deadline(lambda: ingest_paths([str(fifo)], str(tmp_path / "s")))
    (p,) = rep.problems
    assert (p.kind, p.reason) == ("unsupported", "a named pipe (FIFO), not a regular file: not read "
                                                 "(traj ingest reads files and directories)")
    assert rep.refused == 1
    # a file that became a pipe after the walk (or an eval_/metadata file next to a log) is refused, not waited on
    with pytest.raises(NotARegularFile, match=r"^a named pipe \(FIFO\), not a regular file: not read$"):
        run_with_deadline(lambda: read_text(str(fifo)), 10)


# hostile tester: a fault found in `traj ingest` (failed before its fix)
def test_random_bytes_named_parquet_is_not_valid_parquet_and_nothing_binary_is_echoed(tmp_path):
    f = tmp_path / "train-00000-of-00001.parquet"
    f.write_bytes(b"\x00\x01" + random.Random(0).randbytes(4094))
    (p,) = ingest_paths([str(f)], str(tmp_path / "s")).problems
    assert p.reason == "not valid Parquet (the file does not start with the Parquet magic bytes PAR1): binary data"


# hostile tester: a fault found in `traj ingest` (failed before its fix)
@pytest.mark.parametrize("name, data, what", [
    ("x.jsonl.gz", gzip.compress(b'{"a": 1}\n'), "gzip-compressed data (decompress it first)"),
    ("x.json", b"PK\x03\x04rest-of-a-zip", "a zip archive (extract it first)"),
    ("x.jsonl", bytes(range(256)) * 8, "binary data"),
    ("x.json", "\ufeff[1]".encode("utf-16"), "UTF-16 text (save it as UTF-8)"),
])
def test_binary_files_are_not_a_recognised_format(tmp_path, name, data, what):
    f = tmp_path / name
    f.write_bytes(data)
    (p,) = ingest_paths([str(f)], str(tmp_path / "s")).problems
    assert (p.kind, p.reason) == ("malformed", f"not a recognised format: {what}; traj ingest reads JSON, JSONL "
                                               "and Parquet")


# hostile tester: a fault found in `traj ingest` (failed before its fix)
def test_a_broken_parquet_file_is_one_line(tmp_path):
    f = tmp_path / "x.parquet"
    f.write_bytes(b"PAR1" + b"\x00" * 64)  # magic, then nothing Parquet can read
    (p,) = ingest_paths([str(f)], str(tmp_path / "s")).problems
    assert p.reason.startswith("not valid Parquet: ") and "\n" not in p.reason


# hostile tester: a fault found in `traj ingest` (failed before its fix)
def test_a_truncated_single_document_file_says_where_the_document_breaks_off(tmp_path, fix):
    # A .traj cut after 3000 bytes was refused as "no line is valid JSON ... at column 2: '{'": it was
    # read as JSON Lines, whose first line is a lone brace. It is one document: the whole-document
    # parser's position (checked with json.loads by hand: line 14 column 19) and "truncated".
    head = (fix / "swe-agent/v0.x_gpt4_pydicom__pydicom-1458.traj").read_bytes()[:3000]
    for name in ("cut.traj", "cut.json"):
        (tmp_path / "in").mkdir(exist_ok=True)
        (tmp_path / "in" / name).write_bytes(head)
    rep = ingest_paths([str(tmp_path / "in")], str(tmp_path / "s"))
    assert rep.trajectories_written == 0
    assert sorted((Path(p.origin.path).name, p.kind, p.reason) for p in rep.problems) == [
        (n, "malformed", "not valid JSON: Unterminated string starting at line 14 column 19 "
                         "(the document ends early: the file looks truncated)") for n in ("cut.json", "cut.traj")]


# hostile tester: a fault found in `traj ingest` (failed before its fix)
def test_a_jsonl_line_error_reads_without_a_doubled_word(tmp_path):
    f = tmp_path / "rows.jsonl"
    f.write_text('{"a": 1}\n{"b": "xx\n')  # json says "Unterminated string starting at"; we add "at column"
    rep = ingest_paths([str(f)], str(tmp_path / "s"))
    reasons = {p.origin.line: p.reason for p in rep.problems}
    assert reasons[2] == "not valid JSON (Unterminated string starting at column 7): '{\"b\": \"xx'"

"""trajstore/ingest/huge_ints.py: an integer too long for Python's int conversion costs only its
record and names the field."""

from __future__ import annotations

import json

from tests.helpers.ingest import CHAT, by_line, smith_row, write_jsonl
from trajstore.ingest import ingest_paths

HUGE = "9" * 5000  # 5000 digits > Python's default limit of 4300


# hostile tester: a fault found in `traj ingest` (failed before its fix)
def test_a_huge_integer_costs_only_its_line_and_names_the_field(tmp_path):
    rows = [json.dumps(smith_row(1)), json.dumps(smith_row(2))[:-1] + f', "extra": {{"n": [1, {HUGE}]}}}}',
            json.dumps(smith_row(3))]
    f = write_jsonl(tmp_path / "rows.jsonl", rows)
    rep = ingest_paths([str(f)], str(tmp_path / "s"))
    assert rep.trajectories_written == 2  # lines 1 and 3
    assert by_line(rep)[("rows.jsonl", 2)].reason == ("field extra.n[1] is an integer of 5000 digits: too large for "
                                                      "any field (numbers are read up to 4300 digits)")


# hostile tester: a fault found in `traj ingest` (failed before its fix)
def test_a_huge_integer_in_a_json_array_costs_only_its_row(tmp_path):
    f = tmp_path / "rows.json"
    f.write_text("[" + json.dumps(smith_row(1)) + ", " + json.dumps(smith_row(2))[:-1] + f', "resolved": -{HUGE}}}]')
    rep = ingest_paths([str(f)], str(tmp_path / "s"))
    assert rep.trajectories_written == 1
    assert by_line(rep)[("rows.json", 2)].reason == ("field resolved is an integer of 5000 digits: too large for "
                                                     "any field (numbers are read up to 4300 digits)")


# hostile tester: a fault found in `traj ingest` (failed before its fix)
def test_a_huge_integer_in_a_single_document(tmp_path):
    f = tmp_path / "one.json"
    f.write_text(json.dumps(smith_row(1))[:-1] + f', "reward": {HUGE}}}')
    (p,) = ingest_paths([str(f)], str(tmp_path / "s")).problems
    assert str(p) == (f"{f}: malformed: field reward is an integer of 5000 digits: too large for any field "
                      "(numbers are read up to 4300 digits)")


# hostile tester: a fault found in `traj ingest` (failed before its fix)
def test_a_huge_integer_inside_a_json_encoded_string_field(tmp_path):
    # SWE-smith keeps the chat as a JSON string: the number is only met when that string is decoded
    chat = json.dumps(CHAT)[:-1] + f', {{"role": "user", "content": "x", "n": {HUGE}}}]'
    f = write_jsonl(tmp_path / "rows.jsonl", [smith_row(1, messages=chat), smith_row(2)])
    rep = ingest_paths([str(f)], str(tmp_path / "s"))
    assert rep.trajectories_written == 1
    assert by_line(rep)[("rows.jsonl", 1)].reason == ("field messages[5].n is an integer of 5000 digits: too large "
                                                      "for any field (numbers are read up to 4300 digits)")

"""trajstore/store/compaction_records.py: compaction output names (their place in arrival order) and the
listing rule every reader applies to compaction records, case by case (expected sets by hand)."""

from __future__ import annotations

import itertools
import re
import time
import warnings

import pytest

from trajstore.store.compaction_records import (
    CompactionRecord,
    CompactionSource,
    LineageWarning,
    compacted_name,
    is_compaction_output,
    resolve,
)

A = "01000000000000000001-h-1-aaaaaaaaaaaa.parquet"
B = "01000000000000000002-h-1-bbbbbbbbbbbb.parquet"
C = "01000000000000000003-h-1-cccccccccccc.parquet"
D = "01000000000000000004-h-1-dddddddddddd.parquet"


def _rec(out: str, *sources: tuple[str, int, tuple[int, ...]]) -> CompactionRecord:
    return CompactionRecord(out, sum(r - len(d) for _, r, d in sources), tuple(sources))


def test_output_name_takes_the_first_source_place_and_a_later_compaction_sorts_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the clock the names count down from, 1 ms later at each reading: "later" without sleeping,
    # and never the wall clock stepping back between the two names
    ticks = itertools.count(time.time_ns(), 1_000_000)
    monkeypatch.setattr(time, "time_ns", lambda: next(ticks))
    m1 = compacted_name(A)
    m2 = compacted_name(m1)  # a compaction of a compaction output
    # arrival order by name: everything before A, then the outputs (newest first), then A, B
    assert sorted([B, A, m1, m2, "00999999999999999999-h-1-zzzzzzzzzzzz.parquet"]) == [
        "00999999999999999999-h-1-zzzzzzzzzzzz.parquet", m2, m1, A, B]
    # the mark is replaced, not stacked: the name parsed, not its "-c" substrings counted (the
    # random hex after the countdown starts with "c" one time in 16)
    one_mark = re.escape(A.removesuffix(".parquet")) + r"-c\d{19}-[0-9a-f]{8}\.parquet"
    assert re.fullmatch(one_mark, m1) and re.fullmatch(one_mark, m2), (m1, m2)
    hex_c = A.removesuffix(".parquet") + "-c8203359298375576571-c512aba1.parquet"  # such a name, seen in CI
    assert is_compaction_output(hex_c) and re.fullmatch(one_mark, compacted_name(hex_c))
    assert is_compaction_output(m1) and is_compaction_output(m2)
    assert not is_compaction_output(A) and not is_compaction_output("my-c-file.parquet")


def test_committed_output_hides_its_sources() -> None:
    m = compacted_name(A)
    r = resolve([m, A, B, C], {m: _rec(m, (A, 1, ()), (B, 2, (1,)))})
    assert r.visible == [m, C]
    assert r.replaced == [A, B] and r.replaced_by == {A: m, B: m}
    assert r.parts(m) == (CompactionSource(A, 1, ()), CompactionSource(B, 2, (1,)))
    assert r.orphans == [] and r.pending == []


def test_record_without_its_output_changes_nothing() -> None:
    m = compacted_name(A)  # killed between writing the record and the output
    r = resolve([A, B, C], {m: _rec(m, (A, 1, ()), (B, 1, ()))})
    assert r.visible == [A, B, C]
    assert r.orphans == [m] and r.replaced == []


def test_output_without_a_record_is_hidden() -> None:
    m = compacted_name(A)
    r = resolve([m, A, B], {})
    assert r.visible == [A, B] and r.pending == [m]


def test_sources_deleted_after_the_commit() -> None:
    m = compacted_name(A)
    r = resolve([m, C], {m: _rec(m, (A, 1, ()), (B, 1, ()))})
    assert r.visible == [m, C] and r.replaced == []


def test_a_compaction_of_an_output_hides_the_older_output_and_its_leftover_sources() -> None:
    m1 = compacted_name(A)
    m2 = compacted_name(m1)
    recs = {m1: _rec(m1, (A, 1, ()), (B, 1, ())), m2: _rec(m2, (m1, 2, ()), (C, 1, ()))}
    # m1's sources not deleted yet, m1 itself not deleted yet
    r = resolve([m2, m1, A, B, C, D], recs)
    assert r.visible == [m2, D]
    assert sorted(r.replaced) == sorted([m1, A, B, C])
    assert r.parts(m2) == (CompactionSource(m1, 2, (), (CompactionSource(A, 1), CompactionSource(B, 1))), CompactionSource(C, 1))
    # m1 deleted: its record still says where A and B went
    r = resolve([m2, A, D], recs)
    assert r.visible == [m2, D] and r.replaced == [A]


def test_two_records_claiming_one_shard_keep_the_first_output() -> None:
    m1 = compacted_name(A)
    m2 = compacted_name(A)
    first, second = sorted([m1, m2])
    recs = {first: _rec(first, (A, 1, ()), (B, 1, ())), second: _rec(second, (B, 1, ()), (C, 1, ()))}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = resolve([first, second, A, B, C], recs)
    assert any(issubclass(w.category, LineageWarning) for w in caught)
    assert r.visible == [first, C] and r.pending == [second]


def test_record_json_round_trip_and_refusals() -> None:
    m = compacted_name(A)
    rec = _rec(m, (A, 3, (0, 2)), (B, 1, ()))
    assert CompactionRecord.from_json(rec.to_json()) == rec
    with pytest.raises(ValueError):
        CompactionRecord.from_json(b'{"format": 99}')
    bad = rec.to_json().replace(b'"rows":2', b'"rows":5')
    with pytest.raises(ValueError, match="add up"):
        CompactionRecord.from_json(bad)

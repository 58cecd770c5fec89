"""A store scanned and redacted (trajstore/redact/store.py): only the shards holding secrets are
rewritten, atomically and under their own names; rows keep their order; the rewritten store
validates and scans clean; a training run's records stay as they were and the audits read the
redacted store right."""

from __future__ import annotations

import hashlib
import os
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import trajstore as ts
from tests.helpers.secrets import SECRETS, clean_trajectory, secret_trajectory
from tests.helpers.training import run_files_digest
from trajstore import audit
from trajstore.errors import StoreError
from trajstore.reader import read_trajectories
from trajstore.redact import find_secrets, redact_store, store_has_findings
from trajstore.schema import CONSUMED_SCHEMA, STEP_SCHEMA
from trajstore.store import Store, open_store, scalar_cache
from trajstore.store.layout import scalar_cache_dir
from trajstore.validation import validate_files

T0 = datetime(2026, 7, 1, tzinfo=timezone.utc)
SPAN_FINDINGS_PER_SECRET_TRAJECTORY = 14  # test_trajectory.test_scan_finds_every_secret_where_it_is


@pytest.fixture(scope="module")
def tok(smol_tokenizer):
    return smol_tokenizer


def _consumed(tid: str, n: int, vmin: int, vmax: int) -> dict:
    return dict(run_id="r1", step=0, trainer_version=5, trajectory_id=tid, rank=0, min_policy_version=vmin,
                max_policy_version=vmax, staleness_min=5 - vmax, staleness_max=5 - vmin, num_action_tokens=n,
                masked_below=0.0, masked_above=0.0, ratio_mean=1.0, consumed_at=T0)


@pytest.fixture
def store(tmp_path: Path, tok) -> Store:
    """shard 1: c1, c2 (clean); shard 2: s1 (secrets), c3, s2 (secrets); shard 3: a second copy of
    s1 (hidden from readers); runs/r1 trained on s1 and c1 at trainer version 5."""
    s = open_store(str(tmp_path / "store"))
    ts.write_trajectories(s, [clean_trajectory(tok, "c1"), clean_trajectory(tok, "c2")])
    s1 = secret_trajectory(tok, "s1")
    ts.write_trajectories(s, [s1, clean_trajectory(tok, "c3"), secret_trajectory(tok, "s2")])
    ts.write_trajectories(s, [secret_trajectory(tok, "s1")])
    c1_actions = sum(x.end - x.start for x in clean_trajectory(tok, "c1").spans if x.kind == "action")
    s1_actions = sum(x.end - x.start for x in s1.spans if x.kind == "action")
    s.write_table(pa.Table.from_pylist([_consumed("s1", s1_actions, 2, 2), _consumed("c1", c1_actions, 1, 1)],
                                       schema=CONSUMED_SCHEMA), subdir="runs/r1/consumed")
    s.write_table(pa.Table.from_pylist([dict(run_id="r1", step=0, trainer_version=5, wall_time=T0,
                                             metric="policy/loss", value=0.5)], schema=STEP_SCHEMA),
                  subdir="runs/r1/steps")
    return s


def _sha(path: str) -> str:
    return hashlib.sha1(Path(path).read_bytes()).hexdigest()


def test_find_secrets_reports_every_copy_with_its_shard_and_row(store):
    shards = [sh.path for sh in store.list_shards()]
    report = find_secrets(store)
    assert (report.shards, report.trajectories, report.unscanned) == (3, 6, [])
    by_row = {}
    for f in report.findings:
        by_row.setdefault((f.shard, f.row, f.trajectory_id), 0)
        by_row[(f.shard, f.row, f.trajectory_id)] += 1
    n = SPAN_FINDINGS_PER_SECRET_TRAJECTORY
    assert by_row == {(shards[1], 0, "s1"): n, (shards[1], 2, "s2"): n, (shards[2], 0, "s1"): n}
    assert store_has_findings(store)
    assert not store_has_findings(store, trajectory_ids=["c1", "c3"])
    assert find_secrets(store, trajectory_ids=["s2"]).trajectories == 1


def test_redact_rewrites_only_the_shards_involved_keeping_names_and_row_order(store):
    before = {sh.path: (_sha(sh.path), os.stat(sh.path).st_mtime_ns) for sh in store.list_shards()}
    ids_before = read_trajectories(store, columns=["trajectory_id"], dedupe=False).column("trajectory_id").to_pylist()
    runs_before = run_files_digest(Path(store.root))
    result = redact_store(store)
    paths = list(before)
    assert result.shards_rewritten == paths[1:]
    assert (result.trajectories, result.trajectories_redacted, result.made_not_trainable) == (6, 3, 3)
    assert len(result.changes) == 3 * SPAN_FINDINGS_PER_SECRET_TRAJECTORY
    after = {sh.path: (_sha(sh.path), os.stat(sh.path).st_mtime_ns) for sh in store.list_shards()}
    assert list(after) == paths and after[paths[0]] == before[paths[0]]  # the clean shard is not touched
    assert all(after[p][0] != before[p][0] for p in paths[1:])
    assert read_trajectories(store, columns=["trajectory_id"], dedupe=False).column("trajectory_id").to_pylist() \
        == ids_before
    assert not os.path.isdir(store.path("_tmp")) or not os.listdir(store.path("_tmp"))  # no temp file left
    report = validate_files([store.root])  # the second copy of s1 is the store's one known problem
    assert [(p.rule, p.trajectory_id) for p in report.problems] == [("duplicate", "s1")], report.problems
    assert find_secrets(store).clean
    table = read_trajectories(store, dedupe=False)
    text = str(table.column("metadata").to_pylist()) + str(table.column("reward_raw").to_pylist())
    assert not any(v in text for v in SECRETS.values())
    trainable = dict(zip(table.column("trajectory_id").to_pylist(), table.column("trainable").to_pylist()))
    assert trainable == {"c1": True, "c2": True, "s1": False, "c3": True, "s2": False}
    assert run_files_digest(Path(store.root)) == runs_before
    assert redact_store(store).shards_rewritten == []  # nothing left to do


def test_redact_leaves_no_copy_of_a_secret_in_the_scalar_cache(store):
    def text(table: pa.Table) -> str:
        return str(table.column("metadata").to_pylist()) + str(table.column("reward_raw").to_pylist())
    before = read_trajectories(store, columns=["metadata", "reward_raw"], dedupe=False)  # fills the cache
    assert any(v in text(before) for v in SECRETS.values())
    cache = Path(store.path(scalar_cache_dir()))
    assert os.listdir(cache)
    redact_store(store)
    assert os.listdir(cache) == []
    after = read_trajectories(store, columns=["metadata", "reward_raw"], dedupe=False)  # refills it
    assert after.num_rows == before.num_rows and not any(v in text(after) for v in SECRETS.values())
    for f in os.listdir(cache):
        cached = scalar_cache.read_file(store, str(cache / f), ["metadata", "reward_raw"])
        assert not any(v in text(cached) for v in SECRETS.values())


def test_a_run_s_records_stay_readable_and_the_audits_read_the_redacted_store(store, tok):
    redact_store(store)
    conn = audit.connect(store)
    consumed = conn.execute("SELECT trajectory_id, num_action_tokens FROM consumed ORDER BY trajectory_id").fetchall()
    c1_actions = sum(x.end - x.start for x in clean_trajectory(tok, "c1").spans if x.kind == "action")
    s1 = secret_trajectory(tok, "s1")
    s1_actions = sum(x.end - x.start for x in s1.spans if x.kind == "action")
    assert consumed == [("c1", c1_actions), ("s1", s1_actions)]  # what was trained, as it was
    assert conn.execute("SELECT metric, value FROM steps").fetchall() == [("policy/loss", 0.5)]
    by_run = audit.staleness_report(conn).by_run
    (first,) = by_run.fetchall()
    row = dict(zip(by_run.columns, first))
    # after the rewrite s1's action tokens are its old ones less the GitHub token's, plus the marker's
    table = read_trajectories(store, columns=["num_action_tokens"])
    now = dict(zip(table.column("trajectory_id").to_pylist(), table.column("num_action_tokens").to_pylist()))
    assert now["s1"] != s1_actions and now["c1"] == c1_actions
    assert row["consumed"] == 2 and row["versioned_action_tokens"] == now["s1"] + now["c1"]
    assert row["token_max"] == 5 - 1 and row["traj_max"] == 5 - 1  # c1 at v1, s1 at v2, trainer v5
    spans = conn.execute("SELECT count(*) FROM spans WHERE trajectory_id = 's1'").fetchone()[0]
    assert spans == len(s1.spans)


def test_an_interrupted_redaction_leaves_every_shard_whole_and_a_rerun_finishes(store, monkeypatch):
    paths = [sh.path for sh in store.list_shards()]
    third = _sha(paths[2])
    real = Store.rewrite_shard
    calls = []

    def failing(self, path, table, **kw):
        calls.append(path)
        if len(calls) == 2:
            raise StoreError(f"could not rewrite shard {path}: No space left on device")
        return real(self, path, table, **kw)

    monkeypatch.setattr(Store, "rewrite_shard", failing)
    with pytest.raises(StoreError, match="No space left"):
        redact_store(store)
    monkeypatch.setattr(Store, "rewrite_shard", real)
    assert _sha(paths[2]) == third  # untouched
    assert [p.rule for p in validate_files([store.root]).problems] == ["duplicate"]
    report = find_secrets(store)
    assert {f.shard for f in report.findings} == {paths[2]}
    assert redact_store(store).shards_rewritten == [paths[2]]
    assert find_secrets(store).clean


def test_rows_without_a_tokenizer_are_listed_as_unscanned(tmp_path, tok):
    t = secret_trajectory(tok, "x1").model_copy(update={"tokenizer": None, "not_trainable_reason": "unnamed tokenizer"})
    uri = str(tmp_path / "s")
    ts.write_trajectories(uri, [t])
    report = find_secrets(uri)
    assert [(u.trajectory_id, u.row) for u in report.unscanned] == [("x1", 0)]
    assert not report.clean and store_has_findings(uri)
    result = redact_store(uri)
    assert [u.trajectory_id for u in result.unscanned] == ["x1"]
    (row,) = read_trajectories(uri).to_pylist()
    assert SECRETS["email"] not in row["metadata"] and np.array_equal(row["tokens"], np.asarray(t.tokens))


@pytest.mark.s3
def test_redact_on_s3(s3_store_uri, tok):
    # one PUT per rewritten shard under the same key; the clean shard is not written
    uri, opts = s3_store_uri
    s = open_store(uri, storage_options=opts)
    ts.write_trajectories(s, [clean_trajectory(tok, "c1")])
    ts.write_trajectories(s, [secret_trajectory(tok, "s1")])
    keys = [sh.path for sh in s.list_shards()]
    etag = s.fs.info(keys[0])["ETag"]
    assert not find_secrets(s).clean
    result = redact_store(s)
    assert result.shards_rewritten == [s.url_of(keys[1])]
    s.fs.invalidate_cache()
    assert [sh.path for sh in s.list_shards()] == keys and s.fs.info(keys[0])["ETag"] == etag
    assert find_secrets(open_store(uri, storage_options=opts)).clean


def _small_secret_store(tmp_path: Path, tok) -> Store:
    """Three one-row shards, each with a secret: small enough for ``traj compact`` to merge."""
    s = open_store(str(tmp_path / "small"))
    for i in range(3):
        ts.write_trajectories(s, [secret_trajectory(tok, f"s{i}")])
    return s


def test_redact_holds_the_maintenance_lock_so_a_compaction_cannot_run_under_it(tmp_path: Path, tok,
                                                                                monkeypatch) -> None:
    """A compaction started while redact runs (here: when redact reads its first shard) waits for
    it (wait_s=0: is refused) instead of copying shards that redact then rewrites in place."""
    import trajstore.redact.store as rs
    from trajstore.maintenance.compact import compact_store

    s = _small_secret_store(tmp_path, tok)
    refused = []
    real_read = rs._read

    def read_then_compact(store, shard, unscanned):
        if not refused:
            try:
                compact_store(store, min_age_s=0, keep_replaced_s=600, wait_s=0)
                refused.append(False)
            except StoreError as e:
                refused.append(str(e))
        return real_read(store, shard, unscanned)

    monkeypatch.setattr(rs, "_read", read_then_compact)
    r = redact_store(s)
    monkeypatch.undo()
    assert r.trajectories_redacted == 3
    assert find_secrets(s).clean  # nothing merged behind redact's back
    assert refused and refused[0] and "maintenance" in refused[0]
    compact_store(s, min_age_s=0, keep_replaced_s=0)  # the compaction, after: the merged shard is clean
    assert len(s.list_shards()) == 1 and find_secrets(s).clean


def test_redact_lists_the_shards_once_it_holds_the_lock(tmp_path: Path, tok, monkeypatch) -> None:
    """A compaction that held the lock while redact waited for it merged the shards: redact then
    redacts the merged shard (the one readers see), not the sources it would have listed before."""
    import trajstore.redact.store as rs
    from trajstore.maintenance.compact import compact_store

    s = _small_secret_store(tmp_path, tok)
    real_lock = rs.maintenance_lock

    def compact_first(store, **kw):
        compact_store(store, min_age_s=0, keep_replaced_s=600)  # ran just before redact got the lock
        return real_lock(store, **kw)

    monkeypatch.setattr(rs, "maintenance_lock", compact_first)
    r = redact_store(s)
    monkeypatch.undo()
    assert r.trajectories_redacted >= 3
    (merged,) = s.list_shards()  # the one readers see
    assert s.url_of(merged.path) in r.shards_rewritten
    assert find_secrets(s).clean

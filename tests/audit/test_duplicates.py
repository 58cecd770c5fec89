"""trajstore/audit/duplicates.py (and overview.py's totals) against values computed by hand from the
known store (tests/helpers/stores.py)."""

from __future__ import annotations

from tests.helpers.relations import rows
from trajstore import audit


def test_duplicates_and_overview(conn, known_store):
    rep = audit.duplicate_report(conn)
    # 6 trajectories in shard 1 + B again in shard 2.
    assert rows(rep.summary) == [{"rows": 7, "trajectories": 6, "duplicate_rows": 1, "duplicated_ids": 1}]
    (b,) = rows(rep.ids)
    shards = [s.path for s in known_store.list_shards()]
    assert (b["trajectory_id"], b["copies"], b["kept_shard"], b["shards"]) == ("B", 2, shards[0], shards)
    # The predicate applies to every stored copy. sdk: A, B, E, F in shard 1 + B in shard 2 = 5 rows,
    # 4 ids, B twice. truncated: only shard 1's B (shard 2's copy is completed) = 1 row, no repeat.
    sdk = audit.duplicate_report(conn, where="source = 'sdk'")
    assert rows(sdk.summary) == [{"rows": 5, "trajectories": 4, "duplicate_rows": 1, "duplicated_ids": 1}]
    assert [r["trajectory_id"] for r in rows(sdk.ids)] == ["B"]
    trunc = audit.duplicate_report(conn, where="status = 'truncated'")
    assert rows(trunc.summary) == [{"rows": 1, "trajectories": 1, "duplicate_rows": 0, "duplicated_ids": 0}]
    assert rows(trunc.ids) == []
    (tot,) = rows(audit.overview_report(conn).totals)
    # tokens A 8 + B 3 + C 10 + D 5 + E 5 + F 6 = 37; action 4 + 2 + 6 + 3 + 0 + 5 = 20; each
    # trajectory its own episode
    assert tot == {"shards": 2, "trajectories": 6, "episodes": 6, "tokens": 37, "action_tokens": 20, "sources": 2, "runs": 2,
                   "steps": 2, "consumed": 4}

"""trajstore/audit/predicate.py: --where restricts every report; plain predicates only."""

from __future__ import annotations

import pytest

from tests.helpers.relations import pick, rows
from trajstore import audit


def test_where_filter_restricts_every_report(conn):
    rep = audit.staleness_report(conn, where="source = 'sdk'", run="r1")
    (only,) = rows(rep.by_run)
    # Same as the r1 / sdk row above: A and B only.
    assert pick(only, "consumed", "versioned_action_tokens", "token_p50", "token_p90") == (2, 6, 2, 3)
    assert [r["source"] for r in rows(audit.status_report(conn, where="reward < 0").by_source)] == ["openhands"]
    with pytest.raises(audit.AuditError, match="no_such_column"):
        audit.reward_report(conn, where="no_such_column > 1")
    with pytest.raises(audit.AuditError, match="one boolean expression"):
        audit.reward_report(conn, where="TRUE); COPY (SELECT 1) TO 'x.csv'; SELECT (1")


@pytest.mark.parametrize("where, plain", [
    ("source = 'sdk' AND reward IS NOT NULL", True),
    ("reward IS NOT NULL -- trailing comment", True),
    ("no_such_column > 1", True),  # parses; binding is the caller's check
    ("TRUE); COPY (SELECT 1) TO 'x.csv'; SELECT (1", False),
    ("1=1) UNION SELECT 1 FROM (SELECT 1", False),
    ("1=1) GROUP BY source HAVING (1=1", False),
    ("1=1) ORDER BY 1 LIMIT (1", False),
])
def test_is_plain_predicate(where, plain):
    import duckdb

    assert audit.is_plain_predicate(duckdb.connect(), where) is plain

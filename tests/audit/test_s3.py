"""The audit layer on an S3 store served by moto (DuckDB reads through the registered s3fs)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from trajstore import audit
from trajstore.cli.main import app

pytestmark = pytest.mark.s3


def test_reports_on_s3_match_hand_computed_values(s3_store_uri, build_store):
    uri, opts = s3_store_uri
    build_store(uri, opts)
    conn = audit.connect(uri, storage_options=opts)
    assert conn.execute("SELECT count(*) FROM trajectories").fetchall()[0][0] == 6
    by_run = {r[0]: r for r in audit.staleness_report(conn).by_run.fetchall()}
    # As in test_staleness.py: r1 consumed 3, 12 action tokens, token p50 3, p90 5.
    assert by_run["r1"][1:5] == (3, 12, 3, 5)
    assert audit.duplicate_report(conn).summary.fetchall() == [(7, 6, 1, 1)]
    with pytest.raises(audit.AuditError, match="read-only"):
        audit.sql(conn, f"COPY (SELECT 1) TO '{uri}/trajectories/x.parquet'")

    opt_args = [a for k, v in opts.items() for a in ("--storage-option", f"{k}={v}")]
    res = CliRunner().invoke(app, ["sql", uri, "SELECT count(*) AS n FROM consumed", "--format", "json", *opt_args])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == {"result": [{"n": 4}]}

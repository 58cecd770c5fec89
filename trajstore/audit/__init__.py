"""Audits of a store with DuckDB: views over trajectories, spans and training records, and
reports on staleness, DIS clip rates, coverage, rewards, lengths, statuses and duplicates.

    conn = trajstore.audit.connect("s3://bucket/store", storage_options={...})
    trajstore.audit.staleness_report(conn, where="source = 'sdk'").by_run.df()
    trajstore.audit.sql(conn, "SELECT kind, sum(num_tokens) FROM spans GROUP BY kind")
"""

from trajstore.audit.reports import (
    PERCENTILES,
    ClipReport,
    CoverageReport,
    DuplicateReport,
    LengthReport,
    OverviewReport,
    Report,
    RewardReport,
    StalenessReport,
    StatusReport,
    clip_report,
    coverage_report,
    duplicate_report,
    is_plain_predicate,
    predicate_error,
    length_report,
    overview_report,
    reward_report,
    staleness_report,
    status_report,
)
from trajstore.audit.views import VIEW_NAMES, AuditError, connect, sql

__all__ = [
    "PERCENTILES", "VIEW_NAMES", "AuditError", "ClipReport", "CoverageReport", "DuplicateReport", "LengthReport",
    "OverviewReport", "Report", "RewardReport", "StalenessReport", "StatusReport", "clip_report", "connect",
    "coverage_report", "duplicate_report", "is_plain_predicate", "predicate_error", "length_report", "overview_report",
    "reward_report", "sql", "staleness_report", "status_report",
]

"""Audits of a store with DuckDB: views over trajectories, spans and training records, and
reports on staleness, DIS clip rates, coverage, rewards, lengths, statuses, duplicates
and lineages (one module per report family; the ``--where`` predicate checks in predicate.py).

    conn = trajstore.audit.connect("s3://bucket/store", storage_options={...})
    trajstore.audit.staleness_report(conn, where="source = 'sdk'").by_run.df()
    trajstore.audit.sql(conn, "SELECT kind, sum(num_tokens) FROM spans GROUP BY kind")
"""

from trajstore.audit.clip import ClipReport, clip_report
from trajstore.audit.coverage import CoverageReport, coverage_report
from trajstore.audit.distributions import (
    LengthReport,
    RewardReport,
    StatusReport,
    length_report,
    reward_report,
    status_report,
)
from trajstore.audit.duplicates import DuplicateReport, duplicate_report
from trajstore.audit.lineage import LineageReport, lineage_report
from trajstore.audit.overview import BriefReport, OverviewReport, brief_report, overview_report
from trajstore.audit.percentiles import PERCENTILES
from trajstore.audit.predicate import is_plain_predicate, predicate_error
from trajstore.audit.report import Report
from trajstore.audit.staleness import StalenessReport, staleness_report
from trajstore.audit.views import VIEW_NAMES, AuditError, connect, sql

__all__ = [
    "PERCENTILES", "VIEW_NAMES", "AuditError", "BriefReport", "ClipReport", "CoverageReport", "DuplicateReport", "LengthReport",
    "LineageReport",
    "OverviewReport", "Report", "RewardReport", "StalenessReport", "StatusReport", "brief_report", "clip_report", "connect",
    "coverage_report", "duplicate_report", "is_plain_predicate", "predicate_error", "length_report", "overview_report",
    "lineage_report", "reward_report", "sql", "staleness_report", "status_report",
]

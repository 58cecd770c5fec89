"""Scrubbing secrets and personal data from stored trajectories without breaking the token /
log-prob alignment (``traj redact``, ``traj proxy --redact``).

    report = trajstore.redact.find_secrets("store/")           # traj redact store/ --dry-run
    result = trajstore.redact.redact_store("store/")           # traj redact store/

Modules: ``rules`` (detectors, allow-list, the config), ``tokentext`` (token ids as bytes for a
tokenizer), ``values`` (strings in metadata / raw rewards), ``trajectory`` (one trajectory scanned
and rewritten), ``store`` (the store scanned and its shards rewritten), ``report`` (results).
"""

from trajstore.redact.report import Finding, RedactionResult, ScanReport, Unscanned
from trajstore.redact.rules import BUILTIN_KINDS, MARKER_FORMAT, RedactConfig, Rules
from trajstore.redact.store import find_secrets, redact_store, store_has_findings
from trajstore.redact.trajectory import REDACTION_KEY, Redacted, Redactor, TrajectoryScan

__all__ = [
    "BUILTIN_KINDS", "MARKER_FORMAT", "REDACTION_KEY", "Finding", "RedactConfig", "Redacted", "RedactionResult",
    "Redactor", "Rules", "ScanReport", "TrajectoryScan", "Unscanned", "find_secrets", "redact_store",
    "store_has_findings",
]

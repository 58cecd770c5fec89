"""``traj validate``: check Parquet files of trajectories against the schema and its
invariants, streaming one row group at a time (memory bounded by the largest row group, plus
8 bytes per row for the duplicate-id check)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow.parquet as pq

from trajstore.errors import one_line
from trajstore.store.encoding import VERIFY_PAGE_CHECKSUMS
from trajstore.validation.columns import column_problems, declared_version
from trajstore.validation.duplicates import DuplicateIds
from trajstore.validation.lineage import LineageCheck
from trajstore.validation.problems import FileProblem, FileSummary, ValidationReport
from trajstore.validation.rows import row_violations
from trajstore.validation.sources import InputFile, list_inputs

DEFAULT_MAX_LISTED = 1000
"""Problems kept in a report by default (all are counted)."""


def _open(f: InputFile) -> pq.ParquetFile:
    """`f` as a Parquet file: a local file opened by Arrow itself (memory-mapped, as the store's
    readers open shards), a remote one through its fsspec file object. Reading a Python file object
    from Arrow's C++ threads aborted the process at exit now and then ("terminate called without an
    active exception", seen under load), so such files are read with ``use_threads=False``
    (:func:`_read`)."""
    if _is_local(f):
        return pq.ParquetFile(f.path, memory_map=True, page_checksum_verification=VERIFY_PAGE_CHECKSUMS)
    return pq.ParquetFile(f.fs.open(f.path, "rb"), page_checksum_verification=VERIFY_PAGE_CHECKSUMS)


def _is_local(f: InputFile) -> bool:
    protocol = f.fs.protocol
    return "file" in (protocol if isinstance(protocol, (tuple, list)) else (protocol,))


def _read(f: InputFile, pf: pq.ParquetFile, row_group: int, columns: list[str] | None = None):  # noqa: ANN202
    """Row group `row_group` of `pf` (Arrow's threads only for a file Arrow opened itself)."""
    return pf.read_row_group(row_group, columns=columns, use_threads=_is_local(f))


def _check_file(index: int, f: InputFile, report: ValidationReport, dups: DuplicateIds,
                lineage: LineageCheck) -> None:
    summary = FileSummary(f.url)
    report.files.append(summary)

    def problem(field: str, message: str, rule: Any, row_group: int | None = None, row: int | None = None,
                trajectory_id: str | None = None) -> None:
        report.add(FileProblem(f.url, row_group, row, trajectory_id, field, message, rule), summary)

    try:
        pf = _open(f)
    except Exception as e:  # noqa: BLE001 - any reason a file is not readable Parquet is its problem
        problem("<file>", f"not readable Parquet: {one_line(str(e)) or type(e).__name__}", "read")
        return
    with pf:
        summary.row_groups = pf.num_row_groups
        summary.rows = pf.metadata.num_rows
        version, why = declared_version(pf.metadata.metadata)
        summary.schema_version = version
        if why:
            problem("<footer>", why + "; rows not checked", "version")
            return
        bad_columns = column_problems(pf.schema_arrow, version)
        for name, message in bad_columns:
            problem(name, message, "column")
        if bad_columns:
            return
        first_row = 0
        for rg in range(pf.num_row_groups):
            try:
                table = _read(f, pf, rg)
            except Exception as e:  # noqa: BLE001
                problem("<file>", f"row group not readable: {one_line(str(e))}", "read", row_group=rg)
                first_row += pf.metadata.row_group(rg).num_rows
                continue
            for i, tid, violations in row_violations(table, version):
                summary.rows_with_problems += 1
                for v in violations:
                    problem(v.field, v.message, "derived" if _is_derived(v.field) else "row", rg, first_row + i, tid)
            dups.add(index, rg, first_row, table.column("trajectory_id").to_pylist())
            lineage.add(index, rg, first_row, table)
            summary.rows_checked += table.num_rows
            first_row += table.num_rows


_DERIVED = frozenset({"trainable", "not_trainable_reason", "min_policy_version", "max_policy_version", "num_tokens",
                      "num_prompt_tokens", "num_action_tokens", "num_observation_tokens", "num_actions",
                      "num_observations", "num_missing_logprobs"})


def _is_derived(field: str) -> bool:
    return field in _DERIVED or field.endswith((".logprob_start", ".num_missing_logprobs"))


def validate_files(paths: Sequence[str], *, storage_options: Mapping[str, Any] | None = None,
                   max_listed: int = DEFAULT_MAX_LISTED,
                   on_file: Callable[[int, int, FileSummary], None] | None = None) -> ValidationReport:
    """Check every row of the given Parquet files, folders or stores against the trajectory
    schema of each file's declared version and its invariants.

    Per file: the schema version in its footer (missing, not an integer, newer than this package
    reads), then its column names and types (:func:`~trajstore.validation.columns.column_problems`;
    rows are not checked when they do not fit). Per row, one row group at a time: the SDK's rules
    (:func:`trajstore.validate.find_violations`: ids, statuses and sources, spans ordered and
    covering the tokens, log-prob values, sampling parameters), the stored log-prob layout (v2:
    one per action token), the derived columns (counts, min/max policy version, ``trainable``,
    missing log-prob counts) and nulls in required columns. Across all files: ids stored more
    than once (each repeat names the first copy), and each child's parent among the rows read
    with its fork point within the parent (:mod:`~trajstore.validation.lineage`).

    Args:
        paths: Parquet files, folders of them, or stores; local paths or fsspec URLs.
        storage_options: fsspec options for remote paths.
        max_listed: problems kept in :attr:`ValidationReport.problems` (all are counted).
        on_file: called after each file with (index, number of files, its summary).

    Returns:
        The report; ``report.ok`` is True when no rule is broken.

    Raises:
        NoSuchInputError: a path names no file or folder. A file that is not readable Parquet is
            a problem in the report, not an error.
    """
    files = list_inputs(paths, storage_options=storage_options)
    report = ValidationReport(max_listed=max_listed)
    dups = DuplicateIds()
    lineage = LineageCheck()
    for i, f in enumerate(files):
        _check_file(i, f, report, dups, lineage)
        if on_file is not None:
            on_file(i, len(files), report.files[-1])

    def read_ids(file_index: int, row_group: int) -> list[str | None]:
        with _open(files[file_index]) as pf:
            return _read(files[file_index], pf, row_group, ["trajectory_id"]).column(0).to_pylist()

    for d in dups.duplicates(read_ids):
        ff, frg, frow = d.first
        summary = report.files[d.file_index]
        report.add(FileProblem(files[d.file_index].url, d.row_group, d.row, d.trajectory_id, "trajectory_id",
                               f"duplicate id: also at {files[ff].url} row group {frg} row {frow} (readers keep the "
                               "first copy; other engines count every copy)", "duplicate"), summary)
    def read_tokens(file_index: int, row_group: int) -> list:
        with _open(files[file_index]) as pf:
            return _read(files[file_index], pf, row_group, ["tokens"]).column(0).to_pylist()

    for c, v in lineage.problems(read_tokens):
        report.add(FileProblem(files[c.file_index].url, c.row_group, c.row, c.trajectory_id, v.field, v.message,
                               "lineage"), report.files[c.file_index])
    return report

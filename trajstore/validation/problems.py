"""What ``traj validate`` finds: one :class:`FileProblem` per broken rule (file, row group, row,
field), a summary per file, and the report of a whole run (:class:`ValidationReport`)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

Rule = Literal["read", "version", "column", "row", "derived", "duplicate", "lineage"]
"""Which kind of rule a problem breaks: the file cannot be read; its schema version is missing or
not readable; a column's name or type; a row rule of the SDK (:func:`trajstore.validate.find_violations`);
a stored column the writer derives (counts, min/max policy version, log-prob layout); an id
stored more than once; a child whose parent is not among the rows read or whose fork point is past
the parent's end."""


@dataclass(frozen=True)
class FileProblem:
    """One broken rule, located.

    Attributes:
        file: the file's URL or path, as given or listed.
        row_group: the Parquet row group (0-based); None for a problem of the whole file.
        row: the row in the file (0-based, counted across row groups); None for a problem of the
            whole file or column.
        trajectory_id: the row's id when it has one.
        field: the column or span field (``spans[2].start``), or ``<file>`` / ``<footer>``.
        message: what is wrong, in words.
        rule: the kind of rule (:data:`Rule`).
    """

    file: str
    row_group: int | None
    row: int | None
    trajectory_id: str | None
    field: str
    message: str
    rule: Rule


@dataclass
class FileSummary:
    """One checked file.

    Attributes:
        file: its URL or path.
        schema_version: the version stamped in its footer (None when missing or unreadable).
        row_groups: Parquet row groups in it.
        rows: rows in it.
        rows_checked: rows whose values were checked (0 when its columns do not fit the schema).
        rows_with_problems: rows with at least one problem.
        problems: problems found in it (all rules, duplicates included).
    """

    file: str
    schema_version: int | None = None
    row_groups: int = 0
    rows: int = 0
    rows_checked: int = 0
    rows_with_problems: int = 0
    problems: int = 0


@dataclass
class ValidationReport:
    """Everything ``traj validate`` found.

    Attributes:
        files: one summary per file, in the order checked.
        problems: the first `max_listed` problems, in the order found (duplicates last).
        num_problems: all problems found (may exceed ``len(problems)``).
        by_field: problems per (rule, field), all of them counted; span fields are counted
            without their index (``spans[].start``).
        max_listed: how many problems are kept in :attr:`problems`.
    """

    files: list[FileSummary] = field(default_factory=list)
    problems: list[FileProblem] = field(default_factory=list)
    num_problems: int = 0
    by_field: Counter[tuple[str, str]] = field(default_factory=Counter)
    max_listed: int = 1000

    @property
    def ok(self) -> bool:
        """True when no rule is broken."""
        return self.num_problems == 0

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)

    @property
    def rows_with_problems(self) -> int:
        return sum(f.rows_with_problems for f in self.files)

    @property
    def rows_checked(self) -> int:
        """Rows whose values were checked (the rest: in row groups that could not be read, or in
        files whose columns do not fit the schema)."""
        return sum(f.rows_checked for f in self.files)

    def add(self, problem: FileProblem, summary: FileSummary) -> None:
        """Count `problem` (in `summary` too) and keep it when fewer than `max_listed` are kept."""
        self.num_problems += 1
        summary.problems += 1
        self.by_field[(problem.rule, _generic(problem.field))] += 1
        if len(self.problems) < self.max_listed:
            self.problems.append(problem)


def _generic(name: str) -> str:
    """``spans[3].start`` -> ``spans[].start`` (so per-field counts add up across spans)."""
    return re.sub(r"\[\d+\]", "[]", name)

"""Trajectory Parquet files written elsewhere (schema v1 or v2, e.g. with plain pyarrow from
``schemas/trajectory.v2.arrow``): recognised by their footer stamp or column names, checked one
row group at a time with ``traj validate``'s rules (:mod:`trajstore.validation`), and the rows
that pass handed on as they are; each row that fails is refused on its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Final

import pyarrow as pa
import pyarrow.parquet as pq

from trajstore.convert import table_to_trajectories, upgrade_table
from trajstore.errors import NewerSchemaError, one_line
from trajstore.ingest.formats.spec import InputFormat, ParquetFiles
from trajstore.ingest.reasons import problem_reason
from trajstore.ingest.records import Origin, Parsed, Problem, StoredRow
from trajstore.models import Trajectory
from trajstore.schema import METADATA_SCHEMA_VERSION_KEY, READABLE_VERSIONS, SCHEMA_VERSION, trajectory_schema
from trajstore.validation.columns import column_problems, declared_version
from trajstore.validation.rows import row_violations

SOURCE: Final[str] = "trajstore-parquet"
"""The input format's name (``--input-format``), also its rows' source in the summary's per-format counts."""
TRAJECTORY_COLUMNS: Final[frozenset[str]] = frozenset.intersection(*(
    frozenset(f.name for f in trajectory_schema(v) if not f.nullable) for v in READABLE_VERSIONS))
"""Columns every readable trajectory schema version requires: a Parquet file holding all of them
is a trajstore trajectory file, whatever its footer says."""


def is_trajectory_schema(columns: Iterable[str], footer: Mapping[bytes, bytes] | None) -> bool:
    """True for a Parquet file of trajstore trajectories: its footer carries the schema-version
    stamp, or its columns include :data:`TRAJECTORY_COLUMNS` (else its rows are detected one by
    one, as other harnesses' rows). A newer stamp is still ours: the reader refuses it as a newer
    version, never as another harness's rows."""
    return METADATA_SCHEMA_VERSION_KEY in (footer or {}) or TRAJECTORY_COLUMNS <= set(columns)


def is_trajstore_parquet(path: str) -> bool:
    """True when the Parquet file at `path` holds trajstore trajectories by its footer: the
    schema-version stamp, or the columns every readable schema version requires
    (:func:`is_trajectory_schema`). False when its footer cannot be read (the generic Parquet
    reader then reports why)."""
    try:
        md = pq.read_metadata(path)
        names = md.schema.to_arrow_schema().names
    except Exception:  # noqa: BLE001 - not readable: not ours to report here
        return False
    return is_trajectory_schema(names, md.metadata)


def _file_version(pf: pq.ParquetFile, path: str) -> tuple[int | None, Problem | None]:
    """The schema version to read `pf` as, or the problem that refuses the whole file.

    The footer's stamp decides (:func:`~trajstore.validation.columns.declared_version`); a
    version newer than this package reads is refused with :class:`~trajstore.errors.NewerSchemaError`'s
    words (both versions, upgrade). A file with no stamp (a writer that dropped the schema's
    metadata) is read as the one readable version whose columns it fits, and refused when it fits none.
    """
    footer = pf.metadata.metadata or {}
    version, why = declared_version(footer)
    if version is not None and version > SCHEMA_VERSION:
        return None, Problem(Origin(path), "unsupported", str(NewerSchemaError(path, version, SCHEMA_VERSION)))
    if why is None:
        return version, None
    if METADATA_SCHEMA_VERSION_KEY in footer:  # stamped, but not a version this package knows
        return None, Problem(Origin(path), "unsupported", why)
    fits = [v for v in READABLE_VERSIONS if not column_problems(pf.schema_arrow, v)]
    if len(fits) == 1:
        return fits[0], None
    newest = "; ".join(f"{name}: {msg}" for name, msg in column_problems(pf.schema_arrow, SCHEMA_VERSION))
    return None, Problem(Origin(path), "invalid", f"{why}; its columns fit no readable schema version either "
                                                  f"(v{SCHEMA_VERSION}: {newest or 'they fit several'})")


def _trajectories(table: pa.Table) -> list[Trajectory | Exception]:
    """The SDK trajectories of `table` (schema v3), one per row; a row that cannot be built is its exception."""
    try:
        return list(table_to_trajectories(table))
    except Exception:  # noqa: BLE001 - find the row(s) that fail; the others are still stored
        out: list[Trajectory | Exception] = []
        for j in range(table.num_rows):
            try:
                out.append(table_to_trajectories(table.slice(j, 1))[0])
            except Exception as e:  # noqa: BLE001
                out.append(e)
        return out


def parse_trajstore_parquet(path: str) -> Iterator[Parsed]:
    """The rows of a trajectory Parquet file written elsewhere, checked as ``traj validate``
    checks them, in row order.

    Per file: the schema version (:func:`_file_version`) and the column names and types of that
    version (:func:`~trajstore.validation.columns.column_problems`); a file that does not fit is
    refused whole, in one line. Per row group: every row is checked with
    :func:`~trajstore.validation.rows.row_violations` (the SDK's row rules, the derived columns,
    the log-prob layout); a row that breaks any is refused on its own (``invalid``, its line =
    row + 1 in the file, the reason naming the row group, the row's id and each broken field).
    The others are converted to the current schema as ``traj migrate`` does
    (:func:`~trajstore.convert.upgrade_table`; v2 rows pass unchanged) and yielded as
    :class:`StoredRow`. Ids repeated across rows are left to the ingest's usual rule
    (the first copy is stored, later ones counted as duplicates).

    Never raises for bad input: an unreadable file or row group is a :class:`Problem`.
    """
    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # noqa: BLE001
        yield Problem(Origin(path), "malformed", f"not valid Parquet: {problem_reason(e)}")
        return
    with pf:
        version, refused = _file_version(pf, path)
        if refused is not None:
            yield refused
            return
        assert version is not None
        bad_columns = column_problems(pf.schema_arrow, version)
        if bad_columns:
            yield Problem(Origin(path), "invalid", f"columns do not fit the trajectory schema v{version}, no row read: "
                          + "; ".join(f"{name} {msg}" for name, msg in bad_columns))
            return
        first_row = 0
        for rg in range(pf.num_row_groups):
            try:
                table = pf.read_row_group(rg)
            except Exception as e:  # noqa: BLE001 - this row group is lost, the others are read
                n = pf.metadata.row_group(rg).num_rows
                yield Problem(Origin(path), "malformed", f"row group {rg} (rows {first_row + 1}-{first_row + n}) "
                                                         f"not readable: {one_line(str(e))}")
                first_row += n
                continue
            yield from _row_group(path, rg, first_row, table, version)
            first_row += table.num_rows


def _row_group(path: str, rg: int, first_row: int, table: pa.Table, version: int) -> Iterator[Parsed]:
    """One row group's rows in order: a :class:`Problem` per row that breaks a rule, a
    :class:`StoredRow` per other row."""
    bad = {i: (tid, v) for i, tid, v in row_violations(table, version)}
    good = [i for i in range(table.num_rows) if i not in bad]
    built = dict(zip(good, _trajectories(upgrade_table(table.take(good), version)), strict=True)) if good else {}
    for i in range(table.num_rows):
        origin = Origin(path, first_row + i + 1)
        if i in bad:
            tid, violations = bad[i]
            yield Problem(origin, "invalid", f"row group {rg}, trajectory {tid!r}: "
                          + "; ".join(f"field {v.field} {one_line(v.message)}" for v in violations))
        elif isinstance(built[i], Exception):
            yield Problem(origin, "invalid", f"row group {rg}: {problem_reason(built[i])}")
        else:
            yield StoredRow(built[i], origin, SOURCE)


TRAJSTORE_PARQUET = InputFormat(
    SOURCE, "trajectory Parquet in trajstore's schema (v1 or v2) written elsewhere: rows checked as traj validate "
            "checks them, stored as given", SOURCE,
    parquet=ParquetFiles(is_trajstore_parquet, parse_trajstore_parquet))

"""Which trajectories an export takes: ``--where`` (a predicate over the ``trajectories`` view,
checked as ``traj stats`` checks it), ``--run`` (only those that training run consumed) and
``--limit`` (the first N in arrival order), resolved to trajectory ids on an audit connection."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from trajstore.audit.predicate import run_filter, where_sql
from trajstore.audit.views import AuditError, run_ids
from trajstore.errors import one_line
from trajstore.store import Store
from trajstore.store.layout import RUNS_DIR


@dataclass(frozen=True)
class Selection:
    """The trajectories an export reads.

    Attributes:
        ids: their ids, in arrival order (shard, then row), duplicates resolved as every reader does.
        where: the ``--where`` predicate as given (None = every trajectory).
        run: the ``--run`` as given.
        limit: the ``--limit`` as given.
    """

    ids: list[str]
    where: str | None
    run: str | None
    limit: int | None


def select_trajectories(conn: duckdb.DuckDBPyConnection, store: Store, *, where: str | None = None,
                        run: str | None = None, limit: int | None = None) -> Selection:
    """The ids of the trajectories `where` selects (and `run` consumed), the first `limit` of them.

    Args:
        conn: an audit connection on `store` (:func:`trajstore.audit.connect`).
        where: SQL predicate over the ``trajectories`` view's columns (``traj stats --where``).
        run: keep only trajectories this training run consumed (``runs/<run>/consumed``).
        limit: at most this many (>= 1), the first in arrival order.

    Raises:
        AuditError: the predicate is invalid, the run does not exist, or `limit` < 1.
    """
    if limit is not None and limit < 1:
        raise AuditError(f"invalid --limit {limit}: must be >= 1")
    if run is not None and run not in run_ids(store):
        raise AuditError(f"run {run!r} not found under {store.url(RUNS_DIR)} "
                         f"(runs: {', '.join(run_ids(store)) or 'none'})")
    pred = where_sql(conn, where)
    consumed = ("TRUE" if run is None else
                f"trajectory_id IN (SELECT trajectory_id FROM consumed WHERE {run_filter(run)})")
    query = (f"SELECT trajectory_id FROM _trajectories_full WHERE trajectory_id IN "
             f"(SELECT trajectory_id FROM trajectories WHERE {pred}) AND {consumed} ORDER BY shard, shard_row"
             + ("" if limit is None else f" LIMIT {int(limit)}"))
    try:
        ids = [r[0] for r in conn.execute(query).fetchall()]
    except duckdb.Error as e:  # a value of the wrong type in a row only fails while rows are read
        raise AuditError(f"selecting trajectories failed with --where {where!r}: {one_line(str(e))}") from e
    return Selection(ids=ids, where=where, run=run, limit=limit)

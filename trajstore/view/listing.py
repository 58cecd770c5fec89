"""The list page of ``traj view``: the filters and sort a user picks (:class:`ListQuery`, from the
URL's query string) and one page of trajectories or episodes (:func:`list_page`), read from the
in-memory index (:mod:`trajstore.view.index`) with bound parameters, never by pasting values into SQL."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

import duckdb

from trajstore.audit.predicate import is_plain_predicate, predicate_error
from trajstore.errors import one_line
from trajstore.view.index import EPISODE_AGGREGATES, INDEX_TABLE, SINGLE_EPISODE_COLUMNS, StoreIndex

FLAGS: dict[str, tuple[str, str]] = {
    "retokenized": ("token_source = 'retokenized'", "token ids re-tokenized from text (not the engine's)"),
    "no_logprobs": ("logprob_source = 'none'", "no engine log-prob at all"),
    "missing_logprobs": ("num_missing_logprobs > 0", "some action tokens without an engine log-prob"),
    "not_trainable": ("NOT trainable", "stored as not trainable (see the reason)"),
    "unversioned": ("num_actions > 0 AND min_policy_version IS NULL", "actions without a policy version"),
    "multi_version": ("min_policy_version < max_policy_version", "actions of several policy versions"),
    "no_reward": ("reward IS NULL", "no reward"),
}
"""Named flags of the list filter: (SQL over the index, what it means). ``gap:<name>`` flags
select an ingest fidelity flag (metadata ``fidelity_gaps``); ``forked`` (a parent trajectory)
exists when the store has lineage columns."""

SORTS: dict[str, str] = {
    "created_at": "created at", "reward": "reward", "num_tokens": "tokens", "num_action_tokens": "action tokens",
    "num_actions": "actions", "min_policy_version": "oldest policy version", "max_policy_version":
    "newest policy version", "staleness": "staleness (run)", "source": "source", "status": "status",
    "trajectory_id": "id",
}
"""Sortable columns of the trajectory list, with their labels."""

EPISODE_SORTS: dict[str, str] = {"created_at": "latest created at", "reward": "largest reward",
                                 "num_tokens": "tokens", "trajectories": "trajectories"}
"""Sorts of the episode list (others fall back to created_at)."""

LIST_COLUMNS: tuple[str, ...] = (
    "trajectory_id", "source", "status", "reward", "num_tokens", "num_action_tokens", "num_actions",
    "min_policy_version", "max_policy_version", "created_at", "token_source", "logprob_source", "trainable",
    "num_missing_logprobs", "gaps", "episode")
"""Index columns a trajectory row of the list shows (plus ``staleness`` with a run)."""


class ListQueryError(ValueError):
    """A filter value the list cannot use (shown on the page, naming the field)."""


@dataclass(frozen=True)
class ListQuery:
    """The list's filters, sort and page (every field optional; the URL's query string).

    Attributes:
        source, status: exact match. reward_min / reward_max: inclusive bounds on ``reward``.
        tokens_min / tokens_max: bounds on ``num_tokens``. version_min / version_max: every action's
            policy version within the bounds (``min_policy_version >= version_min``, ``max_policy_version
            <= version_max``). run: staleness against this training run (``staleness`` = the trainer
            version the run trained the trajectory at, or its newest version when it has not, minus the
            trajectory's oldest policy version), bounded by staleness_min / staleness_max.
        flag: a key of :data:`FLAGS`, ``gap:<fidelity flag>`` or ``forked``.
        where: a SQL predicate over the ``trajectories`` view, as ``traj stats --where``.
        sort: a key of :data:`SORTS`; order: asc | desc. page: 1-based. mode: trajectories | episodes.
    """

    source: str | None = None
    status: str | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    tokens_min: int | None = None
    tokens_max: int | None = None
    version_min: int | None = None
    version_max: int | None = None
    run: str | None = None
    staleness_min: int | None = None
    staleness_max: int | None = None
    flag: str | None = None
    where: str | None = None
    sort: str = "created_at"
    order: Literal["asc", "desc"] = "desc"
    page: int = 1
    mode: Literal["trajectories", "episodes"] = "trajectories"

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> ListQuery:
        """Parse the query string (empty values = not set).

        Raises:
            ListQueryError: a number that does not parse, an unknown sort, order or mode.
        """
        kw: dict[str, Any] = {}
        for f in fields(cls):
            raw = params.get(f.name)
            if raw is None or not str(raw).strip():
                continue
            raw = str(raw).strip()
            kind = str(f.type)
            try:
                if "float" in kind:
                    v: Any = float(raw)
                    if not math.isfinite(v):
                        raise ValueError
                elif "int" in kind:
                    v = int(raw)
                else:
                    v = raw
            except ValueError:
                raise ListQueryError(f"{f.name}: {raw!r} is not a {'number' if 'float' in kind else 'whole number'}") \
                    from None
            kw[f.name] = v
        q = cls(**kw)
        if q.sort not in SORTS and q.sort not in EPISODE_SORTS:
            raise ListQueryError(f"sort: {q.sort!r} is not one of {', '.join(SORTS)}")
        if q.order not in ("asc", "desc"):
            raise ListQueryError(f"order: {q.order!r} is not asc or desc")
        if q.mode not in ("trajectories", "episodes"):
            raise ListQueryError(f"mode: {q.mode!r} is not trajectories or episodes")
        if q.page < 1:
            raise ListQueryError(f"page: {q.page} is not 1 or more")
        return q

    def params(self, **changes: Any) -> dict[str, str]:
        """The query string of this query with `changes` (default values left out)."""
        q = replace(self, **changes)
        default = ListQuery()
        return {f.name: str(getattr(q, f.name)) for f in fields(q)
                if getattr(q, f.name) is not None and getattr(q, f.name) != getattr(default, f.name)}


@dataclass
class ListPage:
    """One page of the list.

    Attributes:
        columns, rows: the page's rows (raw values). total: rows matching the filters.
        page, pages: this page and the number of pages. elapsed_s: seconds the queries took.
        error: why the filters could not be applied (then no rows).
    """

    columns: list[str]
    rows: list[tuple[Any, ...]]
    total: int
    page: int
    pages: int
    elapsed_s: float
    error: str | None = None


RANGE_FILTERS: tuple[tuple[str, str], ...] = (
    ("source", "source = ?"), ("status", "status = ?"),
    ("reward_min", "reward >= ?"), ("reward_max", "reward <= ?"),
    ("tokens_min", "num_tokens >= ?"), ("tokens_max", "num_tokens <= ?"),
    ("version_min", "min_policy_version >= ?"), ("version_max", "max_policy_version <= ?"),
    ("staleness_min", "staleness >= ?"), ("staleness_max", "staleness <= ?"),
)
"""The list's value filters: (:class:`ListQuery` field, its condition on the index, the value bound to ``?``)."""


def _conditions(index: StoreIndex, q: ListQuery) -> tuple[list[str], list[Any]]:
    """The conditions of `q`'s filters on the index and their bound values.

    Raises:
        ListQueryError: an unknown flag, or a ``where`` that is not a predicate over the columns.
    """
    conds: list[str] = []
    params: list[Any] = []
    for name, sql in RANGE_FILTERS:
        value = getattr(q, name)
        if value is not None:
            conds.append(sql)
            params.append(value)
    if q.flag is not None:
        if q.flag in FLAGS:
            conds.append(FLAGS[q.flag][0])
        elif q.flag.startswith("gap:"):
            conds.append("list_contains(gaps, ?)")
            params.append(q.flag.removeprefix("gap:"))
        elif q.flag == "forked" and index.snapshot.has_lineage:
            conds.append("parent_trajectory_id IS NOT NULL")
        else:
            raise ListQueryError(f"flag: {q.flag!r} is not one of {', '.join(FLAGS)}, gap:<name>")
    if q.where is not None:
        conds.append(_user_where(index, q.where))
    return conds, params


def _user_where(index: StoreIndex, where: str) -> str:
    """A user predicate as a condition on the index: applied to the index's own columns when it
    names only those, else through the trajectories view (every scalar column, read from the shards)."""
    with index.lock:
        conn = index.conn
        try:
            plain = is_plain_predicate(conn, where)
        except duckdb.Error as e:
            raise ListQueryError(f"where: {predicate_error(where, e)}") from None
        if not plain:
            raise ListQueryError("where: must be one boolean expression over the trajectories' columns")
        try:
            conn.execute(f"SELECT count(*) FROM {INDEX_TABLE} WHERE ({where}\n) LIMIT 0").fetchall()
            return f"({where}\n)"
        except duckdb.Error:
            pass
        try:
            conn.execute(f"SELECT count(*) FROM trajectories WHERE ({where}\n) LIMIT 0").fetchall()
        except duckdb.Error as e:
            raise ListQueryError(f"where: {predicate_error(where, e)}") from None
    return f"trajectory_id IN (SELECT trajectory_id FROM trajectories WHERE ({where}\n))"


def _page_of(q: ListQuery, total: int, size: int) -> tuple[int, int]:
    pages = max(1, -(-total // size))
    return min(q.page, pages), pages


def list_page(index: StoreIndex, q: ListQuery) -> ListPage:
    """One page of the list for `q` (:attr:`ViewConfig.page_size` rows).

    Trajectory rows have :data:`LIST_COLUMNS` (and ``staleness``, ``trained_step`` with a run);
    episode rows have ``episode``, ``trajectories``, ``first_trajectory_id``, ``source``, ``status``,
    ``reward`` (the largest), ``num_tokens`` (summed), ``created_at`` (the latest). A bad filter
    gives a page with :attr:`ListPage.error` set and no rows.
    """
    t0 = time.perf_counter()
    size = index.cfg.page_size
    try:
        if q.run is not None and q.run not in index.snapshot.runs:
            raise ListQueryError(f"run: {q.run!r} is not a run of this store")
        if q.run is None and (q.sort == "staleness" or q.staleness_min is not None or q.staleness_max is not None):
            raise ListQueryError("staleness: choose a run to measure it against")
        conds, params = _conditions(index, q)
        src = index.run_table(q.run) if q.run is not None else INDEX_TABLE
        where = " AND ".join(conds) or "TRUE"
        if q.mode == "episodes":
            sort = q.sort if q.sort in EPISODE_SORTS else "created_at"
            order = f"{sort} {q.order.upper()} NULLS LAST, ek"
            if (conds or q.run is not None) and index.snapshot.episodes == index.snapshot.trajectories:
                # every trajectory is alone in its episode: the selected rows are the episodes
                with_ep = f"WITH ep AS (SELECT ek, {SINGLE_EPISODE_COLUMNS} FROM {src} WHERE {where}) "
                ep = "ep"
            elif conds or q.run is not None:  # the episodes of the selected trajectories
                with_ep = f"WITH ep AS (SELECT ek, {EPISODE_AGGREGATES} FROM {src} WHERE {where} GROUP BY ek) "
                ep = "ep"
            else:  # every trajectory: the episodes table, built once per snapshot
                with_ep, ep = "", index.episode_table()
            _, ((total,),) = index.query(f"{with_ep}SELECT count(*) FROM {ep}", params)
            page, pages = _page_of(q, total, size)
            # the page's episode keys first (a sort of two columns), then only those rows
            cols, rows = index.query(
                f"{with_ep}SELECT * EXCLUDE (ek) FROM {ep} WHERE ek IN (SELECT ek FROM {ep} ORDER BY {order} "
                f"LIMIT {size} OFFSET {(page - 1) * size}) ORDER BY {order}", params)
        else:
            key = q.sort if q.sort in SORTS else "created_at"
            order = f"{key} {q.order.upper()} NULLS LAST, rid"
            _, ((total,),) = index.query(f"SELECT count(*) FROM {src} WHERE {where}", params)
            page, pages = _page_of(q, total, size)
            # the page's row numbers first (a sort of two columns), then only those rows
            keys = f"SELECT rid FROM {src} WHERE {where} ORDER BY {order} LIMIT {size} OFFSET {(page - 1) * size}"
            extra = ", staleness, trained_step" if q.run is not None else ""
            cols, rows = index.query(f"SELECT {', '.join(LIST_COLUMNS)}{extra} FROM {src} WHERE rid IN ({keys}) "
                                     f"ORDER BY {order}", params)
        return ListPage(cols, rows, total, page, pages, time.perf_counter() - t0)
    except ListQueryError as e:
        return ListPage([], [], 0, 1, 1, time.perf_counter() - t0, error=str(e))
    except duckdb.Error as e:  # a value of the wrong type in a user predicate fails while rows are read
        return ListPage([], [], 0, 1, 1, time.perf_counter() - t0, error=f"query failed: {one_line(str(e))}")

"""Audit reports over an audit connection (:func:`trajstore.audit.connect`): staleness, DIS
clip rates, data coverage, rewards, lengths, statuses, duplicates. Each report is a typed
record of lazy DuckDB relations; rendering lives in the CLI and :mod:`trajstore.audit.plots`.

Percentiles (``p50``/``p90``/``p99``) use the nearest-rank rule everywhere: the p-th percentile
of N observations (tokens or trajectories, each counted with its weight) is the smallest value v
such that at least ceil(p * N / 100) observations are <= v. For unweighted data this is DuckDB's
``quantile_disc``; integer arithmetic keeps it exact.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import ClassVar

import duckdb

from trajstore.audit.views import AuditError, sql_literal

PERCENTILES: tuple[int, ...] = (50, 90, 99)
"""Percentiles every distribution summary reports (nearest rank, see the module docstring)."""

_NOT_CONSUMED = "no training run consumed the selected trajectories"
NO_ENGINE_LOGPROBS = "no engine logprobs: trains only with --behaviour-logprobs initial-policy"
"""The coverage reason of a trainable row without rollout log-probs (text-only logs)."""
STALENESS_HISTOGRAM_NOTE = ("action_tokens: each token at its own staleness; trajectories: each once, at the "
                            "staleness of its oldest token")
"""Why ``staleness.histogram`` and ``clip.by_staleness`` give one staleness different token counts."""
CLIP_BY_STALENESS_NOTE = ("a trajectory's bucket is the staleness of its oldest token, and all its action tokens "
                          "count there; staleness.histogram counts each token at its own staleness")

_NO_STALENESS = ("the consumed trajectories' action tokens carry no policy version (text-only logs): their "
                 "staleness is undefined (by_run: unversioned_action_tokens)")
_NO_CLIP_STALENESS = ("the consumed trajectories carry no policy version (text-only logs): their staleness is "
                      "undefined (by_step has them)")

EXACT_STALENESS_BUCKETS: int = 4
"""Staleness 0..3 versions get a bucket each; from 4 on, buckets double: [4, 7], [8, 15], ..."""


@dataclass(frozen=True)
class Report:
    """Base of every report: named DuckDB relations (lazy; each fetch re-runs its query).

    Class attributes (for display): ``KEYS`` maps a table to the columns that identify its rows
    (kept in every part when a wide table is cut to fit a terminal); ``EMPTY`` says why a table
    can have no rows; ``WRAP`` names a table's prose columns, wrapped at spaces on a narrow
    terminal instead of cut (cut reasons could all read the same); ``NOTES`` says what a
    table's columns count where their names cannot (printed under the table).
    """

    KEYS: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    EMPTY: ClassVar[Mapping[str, str]] = {}
    WRAP: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    NOTES: ClassVar[Mapping[str, str]] = {}

    def tables(self) -> dict[str, duckdb.DuckDBPyRelation]:
        """The report's relations by field name, in declaration order."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def empty_note(self, table: str) -> str | None:
        """Why ``table`` has no rows (``EMPTY``; a report may tell cases apart by its other tables)."""
        return self.EMPTY.get(table)


def _consumed_but_unversioned(rep: Report, table: str, consumed: str, note: str) -> str | None:
    """The note for a staleness table without rows: ``note`` (staleness undefined) when the
    ``consumed`` table of the same report has rows, else the report's own ``EMPTY`` note."""
    return note if getattr(rep, consumed).limit(1).fetchall() else rep.EMPTY.get(table)


@dataclass(frozen=True)
class StalenessReport(Report):
    """Policy lag of trained and waiting data. Staleness is in policy versions.

    Attributes:
        by_run: one row per run over consumed trajectories: ``consumed`` (consumption records),
            ``versioned_action_tokens`` (action tokens with a policy version), per-token staleness (trainer_version - the action span's
            policy_version) ``token_p50/p90/p99/max/mean``, and per-trajectory staleness (trainer
            version - the oldest action span's version, i.e. the worst token)
            ``traj_p50/p90/p99/max``, and ``mixed_version_actions``: consumed action spans whose
            tokens came from several versions without a known boundary (span field
            ``policy_version_max`` set); their tokens count at their oldest version, so the
            staleness shown is an upper bound for them; ``unversioned_action_tokens``: consumed
            action tokens without a policy version (text-only logs trained with
            ``--behaviour-logprobs initial-policy``, engine rollouts whose logs had none), whose
            staleness is undefined, so they are in no other column (the staleness columns count
            versioned tokens only; a bare ``action_tokens 0`` beside them read as "nothing
            consumed").
        by_source: the same per (run_id, source).
        histogram: per (run_id, staleness): ``action_tokens`` and ``trajectories`` at that value.
        unconsumed: per source, trajectories with versioned actions not consumed (by the selected
            run, or by any run): ``newest_version`` (largest policy version of any action span in
            the store), version ``spread_*`` inside a trajectory (max - min version),
            ``lag_*`` per trajectory (newest - its oldest version) and ``token_lag_*`` per token
            (newest - its span's version).
    """

    by_run: duckdb.DuckDBPyRelation
    by_source: duckdb.DuckDBPyRelation
    histogram: duckdb.DuckDBPyRelation
    unconsumed: duckdb.DuckDBPyRelation

    KEYS = {"by_run": ("run_id",), "by_source": ("run_id", "source"), "histogram": ("run_id", "staleness"),
            "unconsumed": ("source",)}
    EMPTY = {"by_run": _NOT_CONSUMED, "by_source": _NOT_CONSUMED, "histogram": _NOT_CONSUMED,
             "unconsumed": "no unconsumed trajectory has policy versions"}
    NOTES = {"histogram": f"{STALENESS_HISTOGRAM_NOTE}, the bucket clip.by_staleness uses"}

    def empty_note(self, table: str) -> str | None:
        if table == "histogram":
            return _consumed_but_unversioned(self, table, "by_run", _NO_STALENESS)
        return super().empty_note(table)


@dataclass(frozen=True)
class ClipReport(Report):
    """DIS masking (SAO.md, mechanism 1) from the ``consumed`` records. Fractions are of action
    tokens, averaged over trajectories weighted by their action tokens.

    Attributes:
        by_step: per (run_id, step): ``trainer_version``, ``trajectories``, ``action_tokens``,
            ``masked_below`` (ratio <= 1 - eps_low), ``masked_above`` (ratio >= 1 + eps_high),
            ``masked`` (their sum), ``ratio_mean``.
        by_staleness: per (run_id, staleness bucket ``[staleness_lo, staleness_hi]``) with the
            trajectory's staleness = ``consumed.staleness_max`` (trainer version - oldest span):
            the same fractions. Trajectories without a policy version (undefined staleness) are
            in ``by_step`` only.
    """

    by_step: duckdb.DuckDBPyRelation
    by_staleness: duckdb.DuckDBPyRelation

    KEYS = {"by_step": ("run_id", "step"), "by_staleness": ("run_id", "staleness_lo", "staleness_hi")}
    EMPTY = {"by_step": _NOT_CONSUMED, "by_staleness": _NOT_CONSUMED}
    NOTES = {"by_staleness": CLIP_BY_STALENESS_NOTE}

    def empty_note(self, table: str) -> str | None:
        if table == "by_staleness":
            return _consumed_but_unversioned(self, table, "by_step", _NO_CLIP_STALENESS)
        return super().empty_note(table)


@dataclass(frozen=True)
class CoverageReport(Report):
    """Whether the logs carry what SAO needs (SAO.md, "Data the method depends on").

    Attributes:
        tokens: per (source, token_source): ``trajectories``, ``action_tokens`` and the shares
            (0..1) of action tokens with a rollout log-prob (``share_with_logprob``), with a policy
            version (``share_with_policy_version``) and with both (``share_with_both``). Reads only
            ``spans`` (their ``num_missing_logprobs``), never ``tokens`` or ``logprobs``.
        not_trainable: per (source, reason): trajectories ``traj train`` does not train as they
            are, with an example id. Reasons: the stored ``not_trainable_reason`` (e.g. "no action
            tokens"), :data:`NO_ENGINE_LOGPROBS` (DIS needs behaviour log-probs: only with
            ``--behaviour-logprobs initial-policy``), "no reward". A trajectory appears once per
            reason. Actions without a policy version are no reason (they train; their staleness
            is undefined): ``tokens.share_with_policy_version`` counts them.
        fidelity: per (source, flag): ingested trajectories that do not reproduce exactly what the
            model was sent or generated (metadata ``fidelity_gaps``, set by ``traj ingest``: e.g.
            ``tool_parameters``, ``observations``, ``system_prompt``), with an example id.
    """

    tokens: duckdb.DuckDBPyRelation
    not_trainable: duckdb.DuckDBPyRelation
    fidelity: duckdb.DuckDBPyRelation

    KEYS = {"tokens": ("source", "token_source"), "not_trainable": ("source", "reason"), "fidelity": ("source", "flag")}
    EMPTY = {"tokens": "no trajectories selected", "not_trainable": "every selected trajectory is trainable",
             "fidelity": "no selected trajectory has a recorded fidelity gap"}
    WRAP = {"not_trainable": ("reason",)}


@dataclass(frozen=True)
class RewardReport(Report):
    """Rewards of the selected trajectories.

    Attributes:
        by_source: ``trajectories``, ``with_reward``, ``null_reward``, ``mean``, ``std``
            (sample), ``min``, ``p50``, ``max`` and ``share_positive`` (share of rewards > 0).
        histogram: per (source, bin): ``bin_lo``, ``bin_hi``, ``trajectories``; REWARD_BINS
            equal-width bins between the smallest and largest reward (all sources), the last
            bin closed; one bin when every reward is equal.
    """

    by_source: duckdb.DuckDBPyRelation
    histogram: duckdb.DuckDBPyRelation

    KEYS = {"by_source": ("source",), "histogram": ("source", "bin")}
    EMPTY = {"by_source": "no trajectories selected", "histogram": "no selected trajectory has a reward"}


@dataclass(frozen=True)
class LengthReport(Report):
    """Lengths of the selected trajectories.

    Attributes:
        by_source: ``trajectories``, then for turns (action spans), action tokens, observation
            tokens and all tokens: ``*_mean``, ``*_p50``, ``*_p90``, ``*_max``.
        histogram: per (source, bin) of action tokens per trajectory, power-of-two bins
            ``[action_tokens_lo, action_tokens_hi]`` (0, 1, 2-3, 4-7, ...): ``trajectories``.
    """

    by_source: duckdb.DuckDBPyRelation
    histogram: duckdb.DuckDBPyRelation

    KEYS = {"by_source": ("source",), "histogram": ("source", "action_tokens_lo", "action_tokens_hi")}
    EMPTY = {"by_source": "no trajectories selected", "histogram": "no trajectories selected"}


@dataclass(frozen=True)
class StatusReport(Report):
    """Per (source, status): ``trajectories`` and ``share`` (0..1) of the source's trajectories."""

    by_source: duckdb.DuckDBPyRelation

    KEYS = {"by_source": ("source", "status")}
    EMPTY = {"by_source": "no trajectories selected"}


@dataclass(frozen=True)
class DuplicateReport(Report):
    """Duplicate ``trajectory_id`` s (readers keep the first copy in arrival order).

    Attributes:
        summary: ``rows`` stored, ``trajectories`` (distinct ids), ``duplicate_rows`` (dropped
            copies), ``duplicated_ids`` (ids stored more than once).
        ids: per duplicated id: ``copies``, ``kept_shard`` (file of the copy readers keep) and
            ``shards`` (distinct files holding it), most copies first.
    """

    summary: duckdb.DuckDBPyRelation
    ids: duckdb.DuckDBPyRelation

    KEYS = {"summary": (), "ids": ("trajectory_id",)}
    EMPTY = {"ids": "no trajectory id is stored twice"}


@dataclass(frozen=True)
class OverviewReport(Report):
    """One row of store totals: ``shards`` (files holding any matching row), ``trajectories``, ``tokens``, ``action_tokens``,
    ``sources``, ``runs``, ``steps`` (distinct run/step pairs), ``consumed`` records."""

    totals: duckdb.DuckDBPyRelation

    KEYS = {"totals": ()}


# -- helpers -------------------------------------------------------------------------------

def _predicate_probe(where: str) -> str:
    # The newline ends a trailing "--" comment, which would otherwise swallow the closing
    # parenthesis (and, in a report, the rest of its query).
    return f"SELECT count(*) FROM trajectories WHERE ({where}\n)"


def predicate_error(where: str, error: duckdb.Error) -> str:
    """DuckDB's reason for refusing the user predicate `where`, in terms of the text the user
    typed: `error` came from the parenthesised probe (``WHERE (<where>\n)``), so a syntax error
    there can name a ``)`` the user never wrote (``reward >`` -> 'syntax error at or near ")"').
    The predicate is parsed again unwrapped and that reason is returned when it fails too; the
    ``LINE 1: ...`` echo of our query is dropped either way."""
    from trajstore.errors import one_line

    try:
        duckdb.extract_statements(f"SELECT count(*) FROM trajectories WHERE {where}")
    except duckdb.Error as unwrapped:
        return one_line(str(unwrapped))
    return one_line(str(error))


def is_plain_predicate(conn: duckdb.DuckDBPyConnection, where: str) -> bool:
    """True when `where` is one boolean expression over a ``trajectories`` relation, i.e. when
    ``SELECT count(*) FROM trajectories WHERE (<where>)`` parses as exactly one plain
    SELECT. A predicate that closes the parenthesis early and appends UNION, GROUP BY, HAVING,
    ORDER BY, LIMIT, a second statement, ... changes the query's shape and gives False.

    Only parses (with DuckDB's ``json_serialize_sql`` on `conn`); whether the columns exist is
    for the caller to check by running the predicate.

    Raises:
        duckdb.Error: `where` does not even split into statements (e.g. an unterminated quote).
    """
    probe = _predicate_probe(where)
    statements = duckdb.extract_statements(probe)
    if len(statements) != 1 or statements[0].type.name != "SELECT":
        return False
    try:
        doc = json.loads(conn.execute("SELECT json_serialize_sql(?)", [probe]).fetchall()[0][0])
        node = doc["statements"][0]["node"]
    except (duckdb.Error, KeyError, IndexError, TypeError, ValueError):
        return False
    return (not doc.get("error") and node.get("type") == "SELECT_NODE"
            and (node.get("from_table") or {}).get("type") == "BASE_TABLE"
            and not node.get("group_expressions") and node.get("having") is None
            and not node.get("modifiers") and not (node.get("cte_map") or {}).get("map")
            and not node.get("group_sets") and node.get("qualify") is None and node.get("sample") is None
            and node.get("aggregate_handling", "STANDARD_HANDLING") == "STANDARD_HANDLING")


def _where(conn: duckdb.DuckDBPyConnection, where: str | None) -> str:
    """Check a user predicate over ``trajectories`` columns; return it parenthesised."""
    if where is None or not where.strip():
        return "TRUE"
    try:
        plain = is_plain_predicate(conn, where)
    except duckdb.Error as e:
        raise AuditError(f"invalid --where predicate {where!r}: {predicate_error(where, e)}") from e
    if not plain:
        raise AuditError(f"invalid --where predicate {where!r}: must be one boolean expression")
    try:
        conn.sql(_predicate_probe(where) + " LIMIT 0").fetchall()
    except duckdb.Error as e:
        raise AuditError(f"invalid --where predicate {where!r} (columns of the trajectories view): "
                         f"{predicate_error(where, e)}") from e
    # Evaluated once on a row of NULLs with the view's column types: a literal of the wrong type
    # (``reward = 'x'``) fails when it is cast, which LIMIT 0 never does.
    try:
        conn.sql("WITH _t AS (SELECT * FROM trajectories LIMIT 0) SELECT count(*) FROM (SELECT _t.* FROM "
                 f"(SELECT 1) AS _one LEFT JOIN _t ON true) AS trajectories WHERE ({where}\n)").fetchall()
    except duckdb.Error as e:
        raise AuditError(f"invalid --where predicate {where!r} (types of the trajectories view's columns, e.g. "
                         f"reward DOUBLE, status VARCHAR): {e}") from e
    return f"({where}\n)"


def _run_filter(run: str | None, column: str = "run_id") -> str:
    return "TRUE" if run is None else f"{column} = {sql_literal(run)}"


def _selected(conn: duckdb.DuckDBPyConnection, where: str | None) -> str:
    return f"sel AS (SELECT * FROM trajectories WHERE {_where(conn, where)})"


def weighted_percentiles_sql(hist: str, groups: tuple[str, ...], value: str, weight: str, prefix: str) -> str:
    """SELECT computing nearest-rank percentiles of `value` weighted by `weight` from the
    relation `hist` (one row per group and value), per `groups`.

    Output columns: the groups, ``{prefix}p50/p90/p99`` (see :data:`PERCENTILES`),
    ``{prefix}max`` and ``{prefix}mean`` (weighted). ``cum * 100 >= p * total`` is, for integer
    cumulative weights, exactly ``cum >= ceil(p * total / 100)``.
    """
    g = ", ".join(groups)
    part = f"PARTITION BY {g}" if groups else ""
    pcts = "".join(f", min(v) FILTER (WHERE cum * 100 >= {p} * total) AS {prefix}p{p}" for p in PERCENTILES)
    return (f"SELECT {g + ', ' if g else ''}{pcts[2:]}, max(v) AS {prefix}max, "
            f"sum(v * w) / sum(w) AS {prefix}mean FROM (SELECT {g + ', ' if g else ''}{value} AS v, {weight} AS w, "
            f"sum({weight}) OVER ({part} ORDER BY {value} ROWS UNBOUNDED PRECEDING) AS cum, "
            f"sum({weight}) OVER ({part}) AS total FROM {hist}) {'GROUP BY ' + g if g else ''}")


def _summary_columns(prefix: str, *extra: str) -> str:
    """Output columns of :func:`weighted_percentiles_sql`: ``{prefix}p50, {prefix}p90, {prefix}p99``
    then ``{prefix}<extra>`` for each extra statistic (``max``, ``mean``)."""
    return ", ".join([f"{prefix}p{p}" for p in PERCENTILES] + [f"{prefix}{e}" for e in extra])


# -- reports -------------------------------------------------------------------------------

def staleness_report(conn: duckdb.DuckDBPyConnection, *, where: str | None = None,
                     run: str | None = None) -> StalenessReport:
    """Staleness of consumed data (per token and per trajectory) and lag of unconsumed data.

    Reads only scalar trajectory columns, the ``spans`` column and ``consumed`` (never tokens
    or log-probs). Action spans without a policy version are left out.

    Args:
        where: SQL predicate over ``trajectories`` columns restricting the trajectories.
        run: only this run's consumption records (and "unconsumed" = not consumed by it).

    Raises:
        AuditError: the predicate is invalid.
    """
    # Scan spans, trajectories and consumed records once each, into small temporary tables
    # (per trajectory and policy version: the action tokens), which the four result tables
    # share; re-deriving them per table read the spans column four times.
    tag = uuid.uuid4().hex[:12]
    vh, sel_t, c_t = f"_staleness_versions_{tag}", f"_staleness_sel_{tag}", f"_staleness_consumed_{tag}"
    conn.execute(f"CREATE TEMP TABLE {vh} AS SELECT trajectory_id, policy_version, sum(num_tokens) AS n, "
                 f"count(policy_version_max) AS mixed FROM spans "
                 f"WHERE kind = 'action' AND policy_version IS NOT NULL GROUP BY trajectory_id, policy_version")
    conn.execute(f"CREATE TEMP TABLE {sel_t} AS WITH {_selected(conn, where)} SELECT trajectory_id, source, "
                 f"min_policy_version, max_policy_version FROM sel")
    conn.execute(f"CREATE TEMP TABLE {c_t} AS SELECT c.run_id, c.step, c.trainer_version, c.trajectory_id, "
                 f"s.source FROM consumed c JOIN {sel_t} s USING (trajectory_id) WHERE {_run_filter(run, 'c.run_id')}")
    uv_t = f"_staleness_unversioned_{tag}"
    conn.execute(f"CREATE TEMP TABLE {uv_t} AS SELECT trajectory_id, sum(num_tokens) AS n FROM spans "
                 f"WHERE kind = 'action' AND policy_version IS NULL GROUP BY trajectory_id")
    tok_t, tr_t = f"_staleness_tok_{tag}", f"_staleness_tr_{tag}"
    conn.execute(f"CREATE TEMP TABLE {tok_t} AS SELECT c.run_id, c.step, c.trajectory_id, c.source, "
                 f"c.trainer_version - v.policy_version AS staleness, v.n AS n, v.mixed AS mixed "
                 f"FROM {c_t} c JOIN {vh} v "
                 f"USING (trajectory_id)")
    conn.execute(f"CREATE TEMP TABLE {tr_t} AS SELECT run_id, step, trajectory_id, any_value(source) AS source, "
                 f"max(staleness) AS staleness FROM {tok_t} GROUP BY run_id, step, trajectory_id")
    base = f"WITH c AS (SELECT * FROM {c_t}), tok AS (SELECT * FROM {tok_t}), tr AS (SELECT * FROM {tr_t})"

    def summary(groups: tuple[str, ...]) -> duckdb.DuckDBPyRelation:
        g = ", ".join(groups)
        return conn.sql(
            f"{base}, th AS (SELECT {g}, staleness, sum(n) AS n FROM tok GROUP BY {g}, staleness), "
            f"trh AS (SELECT {g}, staleness, count(*) AS n FROM tr GROUP BY {g}, staleness), "
            f"tp AS ({weighted_percentiles_sql('th', groups, 'staleness', 'n', 'token_')}), "
            f"rp AS ({weighted_percentiles_sql('trh', groups, 'staleness', 'n', 'traj_')}), "
            f"cnt AS (SELECT {g}, count(*) AS consumed, coalesce(sum(u.n), 0) AS unversioned_action_tokens "
            f"FROM c LEFT JOIN {uv_t} u USING (trajectory_id) GROUP BY {g}), "
            f"ntok AS (SELECT {g}, sum(n) AS action_tokens, sum(mixed) AS mixed_version_actions FROM tok "
            f"GROUP BY {g}) "
            f"SELECT {g}, consumed, coalesce(action_tokens, 0) AS versioned_action_tokens, "
            f"{_summary_columns('token_', 'max', 'mean')}, {_summary_columns('traj_', 'max')}, "
            f"coalesce(mixed_version_actions, 0) AS mixed_version_actions, unversioned_action_tokens "
            f"FROM cnt LEFT JOIN ntok USING ({g}) LEFT JOIN tp USING ({g}) LEFT JOIN rp USING ({g}) ORDER BY {g}")

    histogram = conn.sql(
        f"{base}, th AS (SELECT run_id, staleness, sum(n) AS action_tokens FROM tok GROUP BY ALL), "
        f"trh AS (SELECT run_id, staleness, count(*) AS trajectories FROM tr GROUP BY ALL) "
        f"SELECT run_id, staleness, coalesce(action_tokens, 0) AS action_tokens, "
        f"coalesce(trajectories, 0) AS trajectories FROM th FULL JOIN trh USING (run_id, staleness) "
        f"ORDER BY run_id, staleness")

    consumed_ids = f"SELECT trajectory_id FROM consumed WHERE {_run_filter(run)}"
    newest = f"(SELECT max(policy_version) FROM {vh})"
    unconsumed = conn.sql(
        f"WITH u AS (SELECT trajectory_id, source, min_policy_version, max_policy_version FROM {sel_t} "
        f"WHERE min_policy_version IS NOT NULL AND trajectory_id NOT IN ({consumed_ids})), "
        f"nw AS (SELECT {newest} AS newest), "
        f"ut AS (SELECT u.source, nw.newest - v.policy_version AS lag, sum(v.n) AS n FROM u "
        f"JOIN {vh} v USING (trajectory_id), nw GROUP BY ALL), "
        f"us AS (SELECT source, max_policy_version - min_policy_version AS spread, count(*) AS n FROM u GROUP BY ALL), "
        f"ul AS (SELECT u.source, nw.newest - min_policy_version AS lag, count(*) AS n FROM u, nw GROUP BY ALL), "
        f"cnt AS (SELECT source, count(*) AS trajectories FROM u GROUP BY source), "
        f"ntok AS (SELECT source, sum(n) AS action_tokens FROM ut GROUP BY source), "
        f"sp AS ({weighted_percentiles_sql('us', ('source',), 'spread', 'n', 'spread_')}), "
        f"lg AS ({weighted_percentiles_sql('ul', ('source',), 'lag', 'n', 'lag_')}), "
        f"tl AS ({weighted_percentiles_sql('ut', ('source',), 'lag', 'n', 'token_lag_')}) "
        f"SELECT source, trajectories, action_tokens, (SELECT newest FROM nw) AS newest_version, "
        f"{_summary_columns('spread_', 'max')}, {_summary_columns('lag_', 'max')}, "
        f"{_summary_columns('token_lag_', 'max')} "
        f"FROM cnt LEFT JOIN ntok USING (source) LEFT JOIN sp USING (source) LEFT JOIN lg USING (source) "
        f"LEFT JOIN tl USING (source) ORDER BY source")
    return StalenessReport(by_run=summary(("run_id",)), by_source=summary(("run_id", "source")),
                           histogram=histogram, unconsumed=unconsumed)


def _bucket_sql(x: str) -> tuple[str, str]:
    lo = (f"CASE WHEN {x} < {EXACT_STALENESS_BUCKETS} THEN {x} "
          f"ELSE CAST(pow(2, floor(log2({x}))) AS BIGINT) END")
    hi = f"CASE WHEN {x} < {EXACT_STALENESS_BUCKETS} THEN {x} ELSE 2 * ({lo}) - 1 END"
    return lo, hi


def _masked_cols() -> str:
    def wmean(col: str) -> str:
        return (f"sum(({col}) * num_action_tokens) / nullif(sum(num_action_tokens) FILTER "
                f"(WHERE {col} IS NOT NULL), 0)")
    return (f"{wmean('masked_below')} AS masked_below, {wmean('masked_above')} AS masked_above, "
            f"{wmean('masked_below + masked_above')} AS masked, {wmean('ratio_mean')} AS ratio_mean")


def clip_report(conn: duckdb.DuckDBPyConnection, *, where: str | None = None,
                run: str | None = None) -> ClipReport:
    """DIS masked fractions per step and per staleness bucket, from ``consumed`` joined with the
    selected trajectories (staleness buckets: :data:`EXACT_STALENESS_BUCKETS`).

    Raises:
        AuditError: the predicate is invalid.
    """
    base = (f"WITH {_selected(conn, where)}, c AS (SELECT c.*, "
            # a record without a policy version (null; -1 in records written before this was fixed)
            # has no staleness: never trainer_version + 1
            f"CASE WHEN c.min_policy_version IS NULL OR c.min_policy_version < 0 THEN NULL "
            f"ELSE coalesce(c.staleness_max, c.trainer_version - c.min_policy_version) END AS staleness "
            f"FROM consumed c "
            f"JOIN sel USING (trajectory_id) WHERE {_run_filter(run, 'c.run_id')})")
    by_step = conn.sql(
        f"{base} SELECT run_id, step, max(trainer_version) AS trainer_version, count(*) AS trajectories, "
        f"sum(num_action_tokens) AS action_tokens, {_masked_cols()} FROM c GROUP BY run_id, step "
        f"ORDER BY run_id, step")
    lo, hi = _bucket_sql("staleness")
    by_staleness = conn.sql(
        f"{base} SELECT run_id, {lo} AS staleness_lo, {hi} AS staleness_hi, count(*) AS trajectories, "
        f"sum(num_action_tokens) AS action_tokens, {_masked_cols()} FROM c WHERE staleness IS NOT NULL "
        f"GROUP BY ALL ORDER BY run_id, staleness_lo")
    return ClipReport(by_step=by_step, by_staleness=by_staleness)


def coverage_report(conn: duckdb.DuckDBPyConnection, *, where: str | None = None) -> CoverageReport:
    """Share of action tokens with rollout log-probs and policy versions; untrainable data and why.

    Raises:
        AuditError: the predicate is invalid.
    """
    sel = _selected(conn, where)
    act = "list_filter(spans, lambda s: s.kind = 'action')"
    ver = "list_filter(spans, lambda s: s.kind = 'action' AND s.policy_version IS NOT NULL)"

    def lp_count(spans: str) -> str:
        # schema v2: each action span counts its tokens without an engine log-prob
        return (f"coalesce(list_sum(list_transform({spans}, lambda s: "
                f"s.\"end\" - s.start - s.num_missing_logprobs)), 0)")

    def tok_count(spans: str) -> str:
        return f"coalesce(list_sum(list_transform({spans}, lambda s: s.\"end\" - s.start)), 0)"

    tokens = conn.sql(
        f"WITH {sel}, t AS (SELECT f.source, f.token_source, {tok_count(act)} AS a, {lp_count(act)} AS l, "
        f"{tok_count(ver)} AS v, {lp_count(ver)} AS b FROM _trajectories_full f "
        f"WHERE f.trajectory_id IN (SELECT trajectory_id FROM sel)) "
        f"SELECT source, token_source, count(*) AS trajectories, sum(a) AS action_tokens, "
        f"sum(l) / nullif(sum(a), 0) AS share_with_logprob, sum(v) / nullif(sum(a), 0) AS share_with_policy_version, "
        f"sum(b) / nullif(sum(a), 0) AS share_with_both FROM t GROUP BY ALL ORDER BY source, token_source")
    not_trainable = conn.sql(
        f"WITH {sel}, r AS ("
        f"SELECT source, coalesce(not_trainable_reason, 'not trainable') AS reason, trajectory_id FROM sel "
        f"WHERE NOT trainable UNION ALL "
        f"SELECT source, '{NO_ENGINE_LOGPROBS}', trajectory_id FROM sel WHERE trainable "
        f"AND logprob_source <> 'engine' UNION ALL "
        f"SELECT source, 'no reward', trajectory_id FROM sel WHERE trainable AND reward IS NULL) "
        f"SELECT source, reason, count(*) AS trajectories, min(trajectory_id) AS example_id FROM r "
        f"GROUP BY ALL ORDER BY source, reason")
    fidelity = conn.sql(
        f"WITH {sel}, g AS (SELECT source, trajectory_id, "
        f"json_keys(json_extract(metadata, '$.fidelity_gaps')) AS flags FROM sel "
        f"WHERE json_extract(metadata, '$.fidelity_gaps') IS NOT NULL), f AS ("
        f"SELECT source, unnest(flags) AS flag, trajectory_id FROM g) "
        f"SELECT source, flag, count(*) AS trajectories, min(trajectory_id) AS example_id FROM f "
        f"GROUP BY ALL ORDER BY source, flag")
    return CoverageReport(tokens=tokens, not_trainable=not_trainable, fidelity=fidelity)


REWARD_BINS: int = 20
"""Equal-width bins of the reward histogram."""


def reward_report(conn: duckdb.DuckDBPyConnection, *, where: str | None = None) -> RewardReport:
    """Reward distribution per source (nearest-rank median) and histogram.

    Raises:
        AuditError: the predicate is invalid.
    """
    sel = _selected(conn, where)
    nb = REWARD_BINS
    histogram = conn.sql(
        f"WITH {sel}, r AS (SELECT source, reward FROM sel WHERE reward IS NOT NULL), "
        f"b AS (SELECT min(reward) AS lo, max(reward) AS hi FROM r), "
        f"x AS (SELECT source, b.lo, b.hi, CASE WHEN b.hi = b.lo THEN 0 "
        f"ELSE least(CAST(floor((reward - b.lo) / (b.hi - b.lo) * {nb}) AS BIGINT), {nb - 1}) END AS bin FROM r, b) "
        f"SELECT source, bin, CASE WHEN hi = lo THEN lo ELSE lo + bin * (hi - lo) / {nb} END AS bin_lo, "
        f"CASE WHEN hi = lo THEN hi ELSE lo + (bin + 1) * (hi - lo) / {nb} END AS bin_hi, "
        f"count(*) AS trajectories FROM x GROUP BY ALL ORDER BY source, bin")
    return RewardReport(histogram=histogram, by_source=conn.sql(
        f"WITH {sel} SELECT source, count(*) AS trajectories, count(reward) AS with_reward, "
        f"count(*) - count(reward) AS null_reward, avg(reward) AS mean, stddev_samp(reward) AS std, "
        f"min(reward) AS min, quantile_disc(reward, 0.5) AS p50, max(reward) AS max, "
        f"avg(CASE WHEN reward > 0 THEN 1.0 ELSE 0.0 END) FILTER (WHERE reward IS NOT NULL) AS share_positive "
        f"FROM sel GROUP BY source ORDER BY source"))


LENGTH_COLUMNS: dict[str, str] = {
    "turns": "num_actions", "action_tokens": "num_action_tokens",
    "observation_tokens": "num_observation_tokens", "tokens": "num_tokens",
}
"""Length report name -> ``trajectories`` column."""


def length_report(conn: duckdb.DuckDBPyConnection, *, where: str | None = None) -> LengthReport:
    """Lengths (turns, action / observation / all tokens) per source. Raises AuditError on a bad predicate."""
    cols = ", ".join(
        f"avg({c}) AS {n}_mean, quantile_disc({c}, 0.5) AS {n}_p50, quantile_disc({c}, 0.9) AS {n}_p90, "
        f"max({c}) AS {n}_max" for n, c in LENGTH_COLUMNS.items())
    sel = _selected(conn, where)
    lo = "CASE WHEN num_action_tokens = 0 THEN 0 ELSE CAST(pow(2, floor(log2(num_action_tokens))) AS BIGINT) END"
    histogram = conn.sql(
        f"WITH {sel} SELECT source, {lo} AS action_tokens_lo, greatest(2 * ({lo}) - 1, 0) AS action_tokens_hi, "
        f"count(*) AS trajectories FROM sel GROUP BY ALL ORDER BY source, action_tokens_lo")
    return LengthReport(histogram=histogram, by_source=conn.sql(
        f"WITH {sel} SELECT source, count(*) AS trajectories, {cols} FROM sel "
        f"GROUP BY source ORDER BY source"))


def status_report(conn: duckdb.DuckDBPyConnection, *, where: str | None = None) -> StatusReport:
    """Trajectories per (source, status). Raises AuditError on a bad predicate."""
    return StatusReport(by_source=conn.sql(
        f"WITH {_selected(conn, where)} SELECT source, status, count(*) AS trajectories, "
        f"count(*) / sum(count(*)) OVER (PARTITION BY source) AS share FROM sel GROUP BY source, status "
        f"ORDER BY source, status"))


def duplicate_report(conn: duckdb.DuckDBPyConnection, *, where: str | None = None) -> DuplicateReport:
    """Stored copies of each ``trajectory_id`` (the predicate applies to every stored copy).

    Raises:
        AuditError: the predicate is invalid.
    """
    w = _where(conn, where)
    # Only ids stored more than once anywhere (``_duplicated_ids``, found when the connection was
    # made, empty when the shards' id indexes prove every id distinct) can repeat among the
    # selected rows: grouping just those avoids a hash table over every stored id (7.7x a bare
    # scan at 1M trajectories, bench/RESULTS.md).
    ((repeated,),) = conn.sql("SELECT count(*) FROM _duplicated_ids").fetchall()
    in_dup = "trajectory_id IN (SELECT trajectory_id FROM _duplicated_ids)" if repeated else "false"
    rows = (f"r AS (SELECT trajectory_id, shard, shard_row FROM _trajectory_rows WHERE {w}), "
            f"d AS (SELECT * FROM r WHERE {in_dup})")
    summary = conn.sql(
        f"WITH {rows}, g AS (SELECT trajectory_id, count(*) AS copies FROM d GROUP BY trajectory_id), "
        f"n AS (SELECT count(*) AS rows FROM r), "
        f"x AS (SELECT coalesce(sum(copies - 1), 0) AS extra, count(*) FILTER (WHERE copies > 1) AS ids FROM g) "
        f"SELECT n.rows AS rows, n.rows - x.extra AS trajectories, x.extra AS duplicate_rows, "
        f"x.ids AS duplicated_ids FROM n, x")
    ids = conn.sql(
        f"WITH {rows} SELECT trajectory_id, count(*) AS copies, arg_min(shard, (shard, shard_row)) AS kept_shard, "
        f"list(DISTINCT shard ORDER BY shard) AS shards FROM d GROUP BY trajectory_id HAVING count(*) > 1 "
        f"ORDER BY copies DESC, trajectory_id")
    return DuplicateReport(summary=summary, ids=ids)


def overview_report(conn: duckdb.DuckDBPyConnection, *, where: str | None = None,
                    run: str | None = None) -> OverviewReport:
    """Store totals over the selected trajectories (and run). Raises AuditError on a bad predicate."""
    rf = _run_filter(run)
    return OverviewReport(totals=conn.sql(
        f"WITH {_selected(conn, where)} SELECT (SELECT count(DISTINCT shard) FROM _trajectory_rows "
        f"WHERE {_where(conn, where)}) AS shards, "
        f"(SELECT count(*) FROM sel) AS trajectories, (SELECT coalesce(sum(num_tokens), 0) FROM sel) AS tokens, "
        f"(SELECT coalesce(sum(num_action_tokens), 0) FROM sel) AS action_tokens, "
        f"(SELECT count(DISTINCT source) FROM sel) AS sources, "
        f"(SELECT count(DISTINCT run_id) FROM (SELECT run_id FROM steps WHERE {rf} UNION "
        f"SELECT run_id FROM consumed WHERE {rf})) AS runs, "
        f"(SELECT count(*) FROM (SELECT DISTINCT run_id, step FROM steps WHERE {rf})) AS steps, "
        f"(SELECT count(*) FROM consumed WHERE {rf} AND trajectory_id IN (SELECT trajectory_id FROM sel)) "
        f"AS consumed"))

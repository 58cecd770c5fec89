"""The coverage audit: whether the logs carry what SAO needs (rollout log-probs, policy versions),
which trajectories ``traj train`` would not train and why, and ingest fidelity gaps."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from trajstore.audit.predicate import selected_cte
from trajstore.audit.report import Report
from trajstore.audit.sampling_sql import ARGUMENTS, FUNCTION

NO_ENGINE_LOGPROBS = "no engine logprobs: trains only with --behaviour-logprobs initial-policy"
"""The coverage reason of a trainable row without rollout log-probs (text-only logs)."""

UNREPRODUCIBLE = "unreproducible logprobs: "
"""Prefix of the coverage reasons of engine rows whose log-probs the trainer cannot reproduce,
followed by the reason of the first such span (a key of :data:`trajstore.sampling.REFUSALS`):
``traj train`` refuses them, or skips them with ``--unreproducible skip``."""


@dataclass(frozen=True)
class CoverageReport(Report):
    """Whether the logs carry what SAO needs (docs/sao.md, "Data the method depends on").

    Attributes:
        tokens: per (source, token_source): ``trajectories``, ``action_tokens`` and the shares
            (0..1) of action tokens with a rollout log-prob (``share_with_logprob``), with a policy
            version (``share_with_policy_version``) and with both (``share_with_both``); of the
            action tokens with a log-prob, the share whose span does not record what its log-probs
            are (``share_logprob_mode_unrecorded``: ``logprob_mode`` null, trained as processed,
            docs/sampling.md). Reads only
            ``spans`` (their ``num_missing_logprobs``), never ``tokens`` or ``logprobs``.
        not_trainable: per (source, reason): trajectories ``traj train`` does not train as they
            are, with an example id. Reasons: the stored ``not_trainable_reason`` (e.g. "no action
            tokens"), :data:`NO_ENGINE_LOGPROBS` (DIS needs behaviour log-probs: only with
            ``--behaviour-logprobs initial-policy``), "no reward", :data:`UNREPRODUCIBLE` + the
            reason of its first action span whose log-probs the trainer cannot reproduce (the
            rule of :mod:`trajstore.sampling`, e.g. ``raw_logprobs``, ``penalty``; refused by
            ``traj train``). A trajectory appears once per reason. Actions without a policy version are no reason (they train; their staleness
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


def coverage_report(conn: duckdb.DuckDBPyConnection, *, where: str | None = None) -> CoverageReport:
    """Share of action tokens with rollout log-probs and policy versions; untrainable data and why.

    Raises:
        AuditError: the predicate is invalid.
    """
    sel = selected_cte(conn, where)
    act = "list_filter(spans, lambda s: s.kind = 'action')"
    ver = "list_filter(spans, lambda s: s.kind = 'action' AND s.policy_version IS NOT NULL)"
    unrecorded = "list_filter(spans, lambda s: s.kind = 'action' AND s.logprob_mode IS NULL)"

    def lp_count(spans: str) -> str:
        # schema v2: each action span counts its tokens without an engine log-prob
        return (f"coalesce(list_sum(list_transform({spans}, lambda s: "
                f"s.\"end\" - s.start - s.num_missing_logprobs)), 0)")

    def tok_count(spans: str) -> str:
        return f"coalesce(list_sum(list_transform({spans}, lambda s: s.\"end\" - s.start)), 0)"

    tokens = conn.sql(
        f"WITH {sel}, t AS (SELECT f.source, f.token_source, {tok_count(act)} AS a, {lp_count(act)} AS l, "
        f"{tok_count(ver)} AS v, {lp_count(ver)} AS b, {lp_count(unrecorded)} AS u FROM _trajectories_full f "
        f"WHERE f.trajectory_id IN (SELECT trajectory_id FROM sel)) "
        f"SELECT source, token_source, count(*) AS trajectories, sum(a) AS action_tokens, "
        f"sum(l) / nullif(sum(a), 0) AS share_with_logprob, sum(v) / nullif(sum(a), 0) AS share_with_policy_version, "
        f"sum(b) / nullif(sum(a), 0) AS share_with_both, sum(u) / nullif(sum(l), 0) AS share_logprob_mode_unrecorded "
        f"FROM t GROUP BY ALL ORDER BY source, token_source")
    not_trainable = conn.sql(
        f"WITH {sel}, r AS ("
        f"SELECT source, coalesce(not_trainable_reason, 'not trainable') AS reason, trajectory_id FROM sel "
        f"WHERE NOT trainable UNION ALL "
        f"SELECT source, '{NO_ENGINE_LOGPROBS}', trajectory_id FROM sel WHERE trainable "
        f"AND logprob_source <> 'engine' UNION ALL "
        f"SELECT source, 'no reward', trajectory_id FROM sel WHERE trainable AND reward IS NULL UNION ALL "
        f"SELECT source, '{UNREPRODUCIBLE}' || u.why, trajectory_id FROM sel JOIN ("
        f"SELECT trajectory_id, arg_min(why, span_index) AS why FROM (SELECT trajectory_id, span_index, "
        f"{FUNCTION}({', '.join(ARGUMENTS)}) AS why FROM spans WHERE kind = 'action' "
        f"AND trajectory_id IN (SELECT trajectory_id FROM sel WHERE trainable AND logprob_source = 'engine' "
        f"AND token_source = 'engine')) WHERE why IS NOT NULL GROUP BY trajectory_id) u USING (trajectory_id)) "
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

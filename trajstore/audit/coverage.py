"""The coverage audit: whether the logs carry what SAO needs (rollout log-probs, policy versions),
which trajectories ``traj train`` would not train and why, and ingest fidelity gaps."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from trajstore.audit.predicate import selected_cte
from trajstore.audit.report import Report
from trajstore.audit.sampling_sql import ARGUMENTS, FUNCTION
from trajstore.wording import (
    MARKED_NOT_TRAINABLE,
    TEXT_ONLY,
    UNREPRODUCIBLE_LOGPROBS,
    WITHOUT_ENGINE_LOGPROB,
    WITHOUT_REWARD,
)

NO_ENGINE_LOGPROBS = TEXT_ONLY
"""The coverage reason of a trainable row without the engine's tokens or log-probs (a text log)."""

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
        not_trained: per (source, reason): trajectories ``traj train`` does not train as they
            are, with an example id; a trajectory appears once per reason. Reasons, in the words of
            ``traj train``'s data line (:mod:`trajstore.wording`): "marked not trainable: " + the
            stored ``not_trainable_reason`` (e.g. "no action tokens"), "without a reward",
            :data:`NO_ENGINE_LOGPROBS` (stored trainable, but DIS needs behaviour log-probs: only
            with ``--behaviour-logprobs initial-policy``), :data:`UNREPRODUCIBLE` + the reason of its
            first action span whose log-probs the trainer cannot reproduce (the rule of
            :mod:`trajstore.sampling`, e.g. ``raw_logprobs``, ``penalty``). Actions without a
            policy version are no reason (they train; their staleness is undefined):
            ``tokens.share_with_policy_version`` counts them.
        train: per category, in the order ``traj train`` checks them, each trajectory counted once
            (under its first reason): what ``traj train`` would take before ``--where``,
            ``--max-seq-len`` and the tokenizer check; ``trains`` says whether (``yes``, ``no``, or
            only with ``--behaviour-logprobs initial-policy``). Its total is the selection's.
        fidelity: per (source, flag): ingested trajectories that do not reproduce exactly what the
            model was sent or generated (metadata ``fidelity_gaps``, set by ``traj ingest``: e.g.
            ``tool_parameters``, ``observations``, ``system_prompt``), with an example id.
    """

    tokens: duckdb.DuckDBPyRelation
    not_trained: duckdb.DuckDBPyRelation
    train: duckdb.DuckDBPyRelation
    fidelity: duckdb.DuckDBPyRelation

    KEYS = {"tokens": ("source", "token_source"), "not_trained": ("source", "reason"), "train": ("category",),
            "fidelity": ("source", "flag")}
    EMPTY = {"tokens": "no trajectories selected", "not_trained": "traj train would train every selected trajectory",
             "train": "no trajectories selected", "fidelity": "no selected trajectory has a recorded fidelity gap"}
    WRAP = {"not_trained": ("reason",)}


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
    no_reward = "(reward IS NULL OR isnan(reward))"
    text_only = "(logprob_source <> 'engine' OR token_source <> 'engine')"
    unreproducible = (
        f"SELECT trajectory_id, arg_min(why, span_index) AS why FROM (SELECT trajectory_id, span_index, "
        f"{FUNCTION}({', '.join(ARGUMENTS)}) AS why FROM spans WHERE kind = 'action' "
        f"AND trajectory_id IN (SELECT trajectory_id FROM sel WHERE trainable AND NOT {text_only})) "
        f"WHERE why IS NOT NULL GROUP BY trajectory_id")
    not_trained = conn.sql(
        f"WITH {sel}, r AS ("
        f"SELECT source, '{MARKED_NOT_TRAINABLE}: ' || coalesce(not_trainable_reason, 'no reason stored') AS reason, "
        f"trajectory_id FROM sel WHERE NOT trainable UNION ALL "
        f"SELECT source, '{NO_ENGINE_LOGPROBS}', trajectory_id FROM sel WHERE trainable AND {text_only} UNION ALL "
        f"SELECT source, '{WITHOUT_REWARD}', trajectory_id FROM sel WHERE trainable AND {no_reward} UNION ALL "
        f"SELECT source, '{UNREPRODUCIBLE}' || u.why, trajectory_id FROM sel JOIN ({unreproducible}) u "
        f"USING (trajectory_id)) "
        f"SELECT source, reason, count(*) AS trajectories, min(trajectory_id) AS example_id FROM r "
        f"GROUP BY ALL ORDER BY source, reason")
    categories = [(MARKED_NOT_TRAINABLE, "NOT trainable", "no"), (WITHOUT_REWARD, no_reward, "no"),
                  (TEXT_ONLY, text_only, "with --behaviour-logprobs initial-policy"),
                  (WITHOUT_ENGINE_LOGPROB, "num_missing_logprobs >= num_action_tokens", "no"),
                  (UNREPRODUCIBLE_LOGPROBS, "u.why IS NOT NULL", "no"), ("trainable", "true", "yes")]
    case = " ".join(f"WHEN {cond} THEN {i}" for i, (_, cond, _) in enumerate(categories))
    names = "".join(f" WHEN {i} THEN '{name}'" for i, (name, _, _) in enumerate(categories))
    trains = "".join(f" WHEN {i} THEN '{t}'" for i, (_, _, t) in enumerate(categories))
    train = conn.sql(
        f"WITH {sel}, c AS (SELECT CASE {case} END AS k FROM sel LEFT JOIN ({unreproducible}) u USING (trajectory_id)) "
        f"SELECT CASE k{names} END AS category, count(*) AS trajectories, CASE k{trains} END AS trains "
        f"FROM c GROUP BY k ORDER BY k")
    fidelity = conn.sql(
        f"WITH {sel}, g AS (SELECT source, trajectory_id, "
        f"json_keys(json_extract(metadata, '$.fidelity_gaps')) AS flags FROM sel "
        f"WHERE json_extract(metadata, '$.fidelity_gaps') IS NOT NULL), f AS ("
        f"SELECT source, unnest(flags) AS flag, trajectory_id FROM g) "
        f"SELECT source, flag, count(*) AS trajectories, min(trajectory_id) AS example_id FROM f "
        f"GROUP BY ALL ORDER BY source, flag")
    return CoverageReport(tokens=tokens, not_trained=not_trained, train=train, fidelity=fidelity)

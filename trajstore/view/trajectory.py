"""One trajectory's page in ``traj view`` (``/t/<trajectory_id>``): its row fetched by id
(:func:`trajstore.reader.read_trajectories_by_id`: only the shards and row groups that hold it),
the transcript span by span, every token's text, and the numbers the Tokens view colours action
tokens by: the engine's log-prob, the span's policy version, staleness against a run, and that
run's per-token trainer annotations (``runs/<run>/tokens/``) when it recorded them."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trajstore.reader import read_trajectories_by_id
from trajstore.schema import ACTION_LOGPROBS_COLUMN
from trajstore.view.decode import Decoder
from trajstore.view.index import INDEX_TABLE, StoreIndex
from trajstore.view.lineage import LineageTree, parts_in_order, tree_from_links

ANNOTATION_FIELDS: tuple[tuple[str, str], ...] = (
    ("rollout_logprob", "blp"), ("trainer_logprob", "tlp"), ("ratio", "ratio"), ("band", "band"),
    ("advantage", "adv"), ("value", "value"), ("return", "ret"))
"""Columns of ``token_annotations`` and the key each has in :attr:`TrajectoryPage.numbers`."""


@dataclass
class SpanView:
    """One span as the page shows it (offsets into the trajectory's tokens, ``end`` exclusive).

    Attributes:
        answers: for an action, ``(tool call id, index of the observation span that answers it or
            None)`` per tool call. answered: for an observation, the index of the action span
            whose call or tool call it answers (its ``cause_id``), or None.
    """

    index: int
    kind: str
    role: str | None
    start: int
    end: int
    text: str
    fields: dict[str, Any]
    answers: list[tuple[str, int | None]] = field(default_factory=list)
    answered: int | None = None


@dataclass
class TrajectoryPage:
    """Everything ``/t/<id>`` shows.

    Attributes:
        row: the trajectory's scalar columns; metadata: its metadata, parsed.
        spans: the transcript. pieces: each token's own text; token_ids: the ids.
        action_index: per token, its index among the action tokens (into ``numbers``), -1 elsewhere.
        numbers: per action token, in token order: ``lp`` (engine log-prob, nats), ``pv`` (policy
            version), ``st`` (staleness against `run`, versions) and, when `run` recorded this
            trajectory, ``blp``, ``tlp``, ``ratio``, ``band``, ``adv``, ``value``, ``ret`` (see
            :data:`trajstore.token_annotations.TOKEN_ANNOTATION_FIELDS`); None = no value.
        flags: (name, what it means) of what ingest approximated or the row lacks.
        run: the run staleness and annotations are taken from; runs: the store's runs.
        staleness_note: what the staleness numbers are measured against.
        annotation_step: the step whose annotations are shown (None: none recorded).
        consumption: the trajectory's consumption records, every run.
        lineage: its episode's tree (None for a trajectory alone in its episode).
        tokenizer_note: why token ids are shown instead of text (None when decoded).
    """

    trajectory_id: str
    row: dict[str, Any]
    metadata: dict[str, Any] | None
    spans: list[SpanView]
    token_ids: list[int]
    pieces: list[str]
    action_index: list[int]
    numbers: dict[str, list[Any]]
    flags: list[tuple[str, str]]
    run: str | None
    runs: list[str]
    staleness_note: str | None
    annotation_step: int | None
    consumption: list[dict[str, Any]]
    lineage: LineageTree | None
    tokenizer_note: str | None


class TrajectoryNotFound(KeyError):
    """No trajectory with that id in the store (as listed in the index's snapshot)."""


def f32_values(values: Sequence[float] | np.ndarray) -> list[float | None]:
    """float32 values as the shortest decimals that read back as the same float32 (what the page
    shows), NaN as None."""
    arr = np.asarray(values, dtype=np.float32)
    return [None if math.isnan(x) else float(str(v)) for v, x in zip(arr, arr.tolist())]


def load_trajectory(index: StoreIndex, decoder: Decoder, trajectory_id: str, *, run: str | None = None,
                    with_tokens: bool = True) -> TrajectoryPage:
    """The page of one trajectory.

    Args:
        run: take staleness and per-token annotations from this run (default: the configured
            run, else the newest run that trained the trajectory).
        with_tokens: also every token's text (the Tokens view); the transcript needs only spans.

    Raises:
        TrajectoryNotFound: no such id in the store.
    """
    table = read_trajectories_by_id(index.store, [trajectory_id])
    if table.num_rows == 0:
        raise TrajectoryNotFound(trajectory_id)
    row = table.slice(0, 1).to_pylist()[0]
    tokens: list[int] = row.pop("tokens")
    logprobs = np.asarray(row.pop(ACTION_LOGPROBS_COLUMN), dtype=np.float32)
    raw_spans: list[dict[str, Any]] = row.pop("spans")
    try:
        metadata = json.loads(row["metadata"]) if row.get("metadata") else None
    except ValueError:
        metadata = None
    tok, tokenizer_note = decoder.tokenizer(row.get("tokenizer"))
    spans = _spans(raw_spans, tokens, tok, decoder)

    action_index = np.full(len(tokens), -1, np.int64)
    pv: list[int | None] = []
    for s in raw_spans:
        if s["kind"] == "action":
            n = s["end"] - s["start"]
            first = s["logprob_start"] if s.get("logprob_start") is not None else len(pv)
            action_index[s["start"]:s["end"]] = np.arange(first, first + n)
            pv += [s.get("policy_version")] * n
    consumption = _consumption(index, trajectory_id)
    snap = index.snapshot
    if run is None:
        run = index.cfg.run if index.cfg.run in snap.runs else (consumption[-1]["run_id"] if consumption else None)
    numbers: dict[str, list[Any]] = {"lp": f32_values(logprobs), "pv": pv}
    staleness_note = None
    if run is not None:
        mine = [c for c in consumption if c["run_id"] == run]
        at = mine[-1]["trainer_version"] if mine else snap.run_versions.get(run)
        if at is not None:
            numbers["st"] = [None if v is None else at - v for v in pv]
            staleness_note = (f"run {run} trained it at step {mine[-1]['step']} as version {at}" if mine else
                              f"run {run} has not trained it: lag behind its newest version {at}")
        else:
            staleness_note = f"run {run} has trained nothing yet: no staleness"
    step = _annotations(index, run, trajectory_id, action_index, len(pv), numbers) if run is not None else None
    return TrajectoryPage(
        trajectory_id=trajectory_id, row=row, metadata=metadata, spans=spans, token_ids=list(tokens),
        pieces=decoder.pieces(tok, tokens) if with_tokens else [], action_index=action_index.tolist(),
        numbers=numbers, flags=_flags(row, raw_spans, metadata), run=run, runs=snap.runs,
        staleness_note=staleness_note, annotation_step=step, consumption=consumption,
        lineage=_lineage(index, trajectory_id), tokenizer_note=tokenizer_note)


def _spans(raw: list[dict[str, Any]], tokens: list[int], tok: Any, decoder: Decoder) -> list[SpanView]:
    shown = ("policy_version", "policy_version_max", "call_id", "cause_id", "tool_call_ids", "finish_reason",
             "temperature", "top_p", "top_k", "max_tokens", "truncated", "num_missing_logprobs")
    spans = [SpanView(i, s["kind"], s.get("role"), s["start"], s["end"], decoder.text(tok, tokens[s["start"]:s["end"]]),
                      {k: s.get(k) for k in shown if s.get(k) not in (None, [])})
             for i, s in enumerate(raw)]
    # tool-call ids (and call ids) of actions -> the observations that answer them (cause_id)
    action_of: dict[str, int] = {}
    for sp in spans:
        if sp.kind == "action":
            for cid in [*(sp.fields.get("tool_call_ids") or []), sp.fields.get("call_id")]:
                if cid:
                    action_of.setdefault(cid, sp.index)
    answer_of: dict[str, int] = {}
    for sp in spans:
        cause = sp.fields.get("cause_id")
        if sp.kind == "observation" and cause:
            sp.answered = action_of.get(cause)
            answer_of.setdefault(cause, sp.index)
    for sp in spans:
        if sp.kind == "action":
            sp.answers = [(cid, answer_of.get(cid)) for cid in sp.fields.get("tool_call_ids") or []]
    return spans


def _consumption(index: StoreIndex, trajectory_id: str) -> list[dict[str, Any]]:
    cols, rows = index.query(
        "SELECT run_id, step, trainer_version, staleness_min, staleness_max, masked_below, masked_above, ratio_mean, "
        "consumed_at FROM consumed WHERE trajectory_id = ? ORDER BY consumed_at, run_id, step", [trajectory_id])
    return [dict(zip(cols, r)) for r in rows]


def _annotations(index: StoreIndex, run: str, trajectory_id: str, action_index: np.ndarray, n_actions: int,
                 numbers: dict[str, list[Any]]) -> int | None:
    """Fill `numbers` with `run`'s annotations of the trajectory (its latest step that recorded
    it); return that step, None when the run recorded none."""
    if run not in index.snapshot.annotated_runs:
        return None
    names = ", ".join(f'"{c}"' for c, _ in ANNOTATION_FIELDS)
    cols, rows = index.query(f"SELECT step, position, {names} FROM token_annotations WHERE run_id = ? AND "
                             "trajectory_id = ? AND step = (SELECT max(step) FROM token_annotations WHERE run_id = ? "
                             "AND trajectory_id = ?) ORDER BY position", [run, trajectory_id, run, trajectory_id])
    if not rows:
        return None
    cols_of = {c: np.full(n_actions, np.nan, np.float32) for c, _ in ANNOTATION_FIELDS}
    for r in rows:
        pos = r[1]
        a = int(action_index[pos]) if 0 <= pos < len(action_index) else -1
        if a < 0:
            continue  # not an action token of the stored trajectory (should not happen)
        for (c, _), v in zip(ANNOTATION_FIELDS, r[2:]):
            cols_of[c][a] = np.nan if v is None else v
    for c, key in ANNOTATION_FIELDS:
        vals = f32_values(cols_of[c])
        numbers[key] = [None if v is None else int(v) for v in vals] if c == "band" else vals
    return int(rows[0][0])


def _flags(row: dict[str, Any], spans: list[dict[str, Any]], metadata: dict[str, Any] | None
           ) -> list[tuple[str, str]]:
    flags: list[tuple[str, str]] = []
    if row.get("token_source") == "retokenized":
        flags.append(("retokenized", f"token ids re-tokenized from the logged text with the chat template of "
                                     f"{row.get('tokenizer')}: not the ids the engine sampled"))
    if row.get("logprob_source") == "none":
        flags.append(("no engine log-probs", "the log has no rollout log-prob: training needs --behaviour-logprobs "
                                             "initial-policy"))
    elif row.get("num_missing_logprobs"):
        flags.append(("missing log-probs", f"{row['num_missing_logprobs']} action tokens without an engine log-prob"))
    if not row.get("trainable", True):
        flags.append(("not trainable", str(row.get("not_trainable_reason") or "")))
    if row.get("reward") is None:
        flags.append(("no reward", "no reward was logged"))
    if row.get("num_actions") and row.get("min_policy_version") is None:
        flags.append(("no policy version", "the actions carry no policy version: their staleness is undefined"))
    mixed = sum(1 for s in spans if s.get("policy_version_max") is not None)
    if mixed:
        flags.append(("mixed-version actions", f"{mixed} action spans made by several policy versions (counted at "
                                               "the oldest)"))
    capped = sum(1 for s in spans if s.get("truncated"))
    if capped:
        flags.append(("observations capped", f"{capped} observation spans cut at ingest (sizes in the metadata)"))
    meta = metadata or {}
    for name, why in (meta.get("fidelity_gaps") or {}).items():
        flags.append((f"gap: {name}", str(why)))
    for key in ("engine_token_ids_discarded", "engine_token_ids"):
        if meta.get(key):
            flags.append((key.replace("_", " "), str(meta[key])))
    if meta.get("policy_version_known") is False:
        flags.append(("policy version unknown", "the log never recorded which policy version made the actions"))
    return flags


def _lineage(index: StoreIndex, trajectory_id: str) -> LineageTree | None:
    snap = index.snapshot
    cols, rows = index.query(f"SELECT episode FROM {INDEX_TABLE} WHERE trajectory_id = ?", [trajectory_id])
    if not rows:
        return None
    episode = rows[0][0]
    if snap.has_lineage:
        cols, rows = index.query(
            "SELECT trajectory_id, parent_trajectory_id, fork_point, link_kind, status, reward, num_tokens FROM "
            f"{INDEX_TABLE} WHERE ek = hash(?) AND episode = ? ORDER BY created_at, rid", [episode, episode])
        found = [dict(zip(cols, r)) for r in rows]
        if any(r["parent_trajectory_id"] for r in found):
            return tree_from_links(episode, found)
        # no links stored (parts split before schema v3, or by a writer that set none): the
        # parts in the order their metadata ``episode`` gives, as for a v2 store
    cols, rows = index.query(
        f"SELECT trajectory_id, episode_part, episode_change AS change, status, reward, num_tokens FROM {INDEX_TABLE} "
        "WHERE ek = hash(?) AND episode = ? ORDER BY created_at, rid", [episode, episode])
    found = [dict(zip(cols, r)) for r in rows]
    return parts_in_order(episode, found) if len(found) > 1 else None

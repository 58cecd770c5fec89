"""One trajectory's page in ``traj view`` (``/t/<trajectory_id>``): its row fetched by id
(:func:`trajstore.reader.read_trajectories_by_id`: only the shards and row groups that hold it),
the transcript span by span, every token's text, and the numbers the Tokens view colours action
tokens by: the engine's log-prob, the span's policy version, staleness against a run, and that
run's per-token trainer annotations (``runs/<run>/tokens/``) when it recorded them."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trajstore.schema import ACTION_LOGPROBS_COLUMN
from trajstore.view.decode import Decoder
from trajstore.view.index import INDEX_TABLE, StoreIndex
from trajstore.view.lineage import LineageTree, parts_in_order, tree_from_links
from trajstore.view.show import TrajectoryNotInStore, read_one
from trajstore.view.transcript import SpanView, span_views, trajectory_flags

ANNOTATION_FIELDS: tuple[tuple[str, str], ...] = (
    ("rollout_logprob", "blp"), ("trainer_logprob", "tlp"), ("ratio", "ratio"), ("band", "band"),
    ("advantage", "adv"), ("value", "value"), ("return", "ret"))
"""Columns of ``token_annotations`` and the key each has in :attr:`TrajectoryPage.numbers`."""


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
    """No trajectory with that id in the store (as listed in the index's snapshot).

    Attributes:
        unreadable: the shards (URLs) that could not be read: any of them may hold it.
    """

    def __init__(self, trajectory_id: str, unreadable: Sequence[str] = ()):
        super().__init__(trajectory_id)
        self.unreadable = list(unreadable)


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
        TrajectoryNotFound: no such id in the store's readable shards (naming those that could not be read).
    """
    try:
        table = read_one(index.store, trajectory_id)
    except TrajectoryNotInStore as e:
        raise TrajectoryNotFound(trajectory_id, e.unreadable) from None
    row = table.slice(0, 1).to_pylist()[0]
    tokens: list[int] = row.pop("tokens")
    logprobs = np.asarray(row.pop(ACTION_LOGPROBS_COLUMN), dtype=np.float32)
    raw_spans: list[dict[str, Any]] = row.pop("spans")
    try:
        metadata = json.loads(row["metadata"]) if row.get("metadata") else None
    except ValueError:
        metadata = None
    tok, tokenizer_note = decoder.tokenizer(row.get("tokenizer"))
    spans = span_views(raw_spans, tokens, tok, decoder)

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
        numbers=numbers, flags=trajectory_flags(row, raw_spans, metadata), run=run, runs=snap.runs,
        staleness_note=staleness_note, annotation_step=step, consumption=consumption,
        lineage=_lineage(index, trajectory_id), tokenizer_note=tokenizer_note)


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

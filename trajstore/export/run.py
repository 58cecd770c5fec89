"""``traj export``: select trajectories, refuse them if ``traj redact --dry-run`` would find a secret
in them, read them in parts, cut them for the target, refuse or skip what the target cannot take as
it is (and, for a trainer layout, what is stored as not trainable), write the parts and a manifest
into a staging folder and rename it into place (nothing appears at the destination unless the whole
export succeeded)."""

from __future__ import annotations

import datetime as dt
import os
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from trajstore import __version__, audit
from trajstore.errors import CorruptShardError
from trajstore.export import otlp
from trajstore.export.blockers import Blocker, survey_export, unreadable_refusal
from trajstore.export.card import ids_predicate, reproduce_command
from trajstore.export.files import MANIFEST_FILE, staged_folder, write_json
from trajstore.export.hf import push_plan, push_to_hub
from trajstore.export.refusals import (
    ALLOW_SECRETS_OPTION,
    FIELDS,
    INCLUDE_NOT_TRAINABLE_OPTION,
    SKIP_OPTION,
    SKIP_UNREADABLE_OPTION,
    ExportError,
    refusal,
)
from trajstore.export.samples import rows_of, sample_from_row
from trajstore.export.select import Selection, select_trajectories
from trajstore.export.target import MIXED_AS_OLDEST, TAIL_DROPPED, Finish, Part, Target
from trajstore.export.targets import TARGETS
from trajstore.reader import read_trajectories_by_id
from trajstore.store import Store, open_existing_store
from trajstore.store.layout import TRAJECTORIES_DIR
from trajstore.store.shards import CorruptShardWarning, expected_schema, inspect_shard, list_view, shard_paths

DEFAULT_ROWS_PER_FILE = 1024
"""Trajectories per output file: each file is padded to its own longest sample, and the export
holds one file's trajectories in memory at a time."""


@dataclass(frozen=True)
class ExportOptions:
    """How ``traj export`` writes (one field per option).

    Attributes:
        where: SQL predicate over the ``trajectories`` view (as ``traj stats --where``).
        run: only the trajectories this training run consumed.
        limit: at most this many trajectories, the first in arrival order.
        skip_refused: leave out (and count) trajectories the target cannot take as they are,
            instead of stopping at the first with its reason.
        skip_unreadable: export a store some of whose shards cannot be read (truncated, not
            Parquet, undecodable) without their trajectories, recording the shards (and their rows
            where known) in the result, the manifest and the card; by default such an export is
            refused, naming the shards, and nothing is written.
        allow_secrets: write even when ``traj redact --dry-run`` would fail on the selected
            trajectories (a secret found, or a trajectory whose spans cannot be scanned); by
            default such an export is refused and nothing is written.
        include_not_trainable: trainer layouts (``Target.trainer_layout``) also take trajectories
            stored as not trainable (``trainable = false``); by default they are left out and
            counted per ``not_trainable_reason``. ``hf`` and ``atif`` keep every trajectory, flagged.
        without: fields (``logprobs``, ``rewards``, ``versions``) left out of the whole export, so
            that trajectories lacking them are taken.
        pad_token_id: the id written in padded token positions (masked out by every layout).
        rows_per_file: trajectories per output file (>= 1).
        name: the dataset's name on its card (``hf``; default: named after its sources).
        license: the licence id on the card (``hf``; default: "other", marked to fill).
        push: upload the folder to this Hub dataset repository afterwards (``hf`` only).
        private: create the Hub repository private (default) or public.
        endpoint: ``otlp``: also send the traces to this OTLP/HTTP traces endpoint
            (e.g. ``http://localhost:4318/v1/traces``).
        dry_run: write nothing: find every blocker (:mod:`~trajstore.export.blockers`) and what
            would be written and left out (with ``push``: what would be uploaded, see the result).
    """

    where: str | None = None
    run: str | None = None
    limit: int | None = None
    skip_refused: bool = False
    skip_unreadable: bool = False
    include_not_trainable: bool = False
    allow_secrets: bool = False
    without: frozenset[str] = frozenset()
    pad_token_id: int = 0
    rows_per_file: int = DEFAULT_ROWS_PER_FILE
    name: str | None = None
    license: str | None = None
    push: str | None = None
    private: bool = True
    dry_run: bool = False
    endpoint: str | None = None


@dataclass
class ExportResult:
    """What an export wrote.

    Attributes:
        target: the ``--to`` name.
        out: the output folder (absolute).
        selected: trajectories the selection matched.
        exported: trajectories written.
        skipped: per refusal reason, trajectories left out (``--skip-refused``).
        not_trainable_left_out: per stored ``not_trainable_reason``, trajectories stored as not
            trainable that a trainer layout left out (without ``include_not_trainable``).
        not_trainable_included: trajectories stored as not trainable that were written (``hf``,
            ``atif``, or ``include_not_trainable``).
        files: files written, relative to `out`.
        left_out: fields left out of the whole export (``--without``).
        approximations: per kind, what the layout could only approximate (counts).
        pushed: the Hub repository URL (``--push``), else None.
        unreadable_skipped: per unreadable shard (URL) left out with ``skip_unreadable``, its rows
            (None when its footer cannot be read).
        dry_run: nothing was written (``exported`` counts what would be).
        blockers: with ``dry_run``, everything that would stop the export (an export with any is refused).
        sent_spans: ``otlp`` with ``endpoint``: the spans the endpoint accepted.
        push_plan: with ``dry_run`` and ``push``, what would be created and uploaded
            (:func:`~trajstore.export.hf.push_plan`).
    """

    target: str
    out: str
    selected: int = 0
    exported: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    not_trainable_left_out: Counter[str] = field(default_factory=Counter)
    not_trainable_included: int = 0
    files: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    approximations: Counter[str] = field(default_factory=Counter)
    pushed: str | None = None
    unreadable_skipped: dict[str, int | None] = field(default_factory=dict)
    dry_run: bool = False
    blockers: list[Blocker] = field(default_factory=list)
    push_plan: dict[str, Any] | None = None
    sent_spans: int = 0


Progress = Callable[[str, int, int], None]
"""``progress(stage, done, total)``: ``checking`` (trajectories surveyed) or ``writing`` (trajectories
read for writing) of `total`."""


def _check_options(target: Target, opts: ExportOptions) -> frozenset[str]:
    """The fields the export holds. Raises ExportError for an option the target does not take."""
    unknown = sorted(set(opts.without) - set(FIELDS))
    if unknown:
        raise ExportError(f"invalid --without {unknown[0]!r}: the fields are {', '.join(FIELDS)}")
    if opts.without and not target.trainer_layout:  # hf and atif write each field as stored (null where unknown)
        raise ExportError(f"invalid --without {sorted(opts.without)[0]}: --without applies only to trainer layouts; "
                          f"{target.name} keeps every field as stored (null where a trajectory lacks it)")
    for f in sorted(opts.without):
        if f not in target.fields:
            raise ExportError(f"invalid --without {f}: {target.name} writes no {f}")
        if f in target.required:
            raise ExportError(f"invalid --without {f}: {target.name} needs its {target.fields[f]} (its trainer "
                              f"reads them unconditionally); select trajectories that have them with --where, or "
                              f"leave the others out with {SKIP_OPTION}")
    if opts.include_not_trainable and not target.trainer_layout:
        raise ExportError(f"invalid --include-not-trainable: --to {target.name} keeps every trajectory, those "
                          "stored as not trainable flagged by their trainable column")
    if opts.endpoint is not None and target.name != "otlp":
        raise ExportError(f"invalid --endpoint: only --to otlp sends to an endpoint, not --to {target.name}")
    if opts.push is not None and target.name != "hf":
        raise ExportError(f"invalid --push: only --to hf uploads to the Hub, not --to {target.name}")
    if opts.rows_per_file < 1:
        raise ExportError(f"invalid --rows-per-file {opts.rows_per_file}: must be >= 1")
    return frozenset(target.fields) - frozenset(opts.without)


def _nothing_selected(conn: duckdb.DuckDBPyConnection, store: Store, sel: Selection,
                      skipped: list[CorruptShardError]) -> str:
    """Why the selection is empty, in one line: an empty store (or one whose every readable shard
    is empty: the `skipped` unreadable shards named), or what it filtered on."""
    total = conn.execute("SELECT count(*) FROM trajectories").fetchone()[0]
    left_out = (f" (left out with {SKIP_UNREADABLE_OPTION}: {len(skipped)} unreadable shard(s): "
                + ", ".join(e.path for e in skipped) + ")") if skipped else ""
    if not total:
        return f"nothing to export: the store {store.uri} has no readable trajectories{left_out}" if skipped else (
            f"nothing to export: the store {store.uri} has no trajectories")
    what = []
    if sel.where:
        what.append(f"match --where {sel.where!r}")
    if sel.run:
        what.append(f"were consumed by training run {sel.run!r} (--run)")
    return (f"nothing to export: no trajectories {' and '.join(what) or 'selected'} (of {total} in the store)"
            + left_out)


def _nothing_left(result: ExportResult) -> str:
    """Why an export whose selection was not empty has nothing to write: every selected trajectory
    was left out (stored as not trainable, or refused with --skip-refused)."""
    why = []
    if result.not_trainable_left_out:
        why.append(_counts(result.not_trainable_left_out, "stored as not trainable")
                   + f"; {INCLUDE_NOT_TRAINABLE_OPTION} writes them")
    if result.skipped:
        why.append(_counts(result.skipped) + f"; {SKIP_OPTION} leaves out what {result.target} cannot take")
    return f"nothing to export: all {result.selected} selected trajectories were left out ({'; '.join(why)})"


def _counts(counts: Counter[str], what: str = "") -> str:
    """``2 stored as not trainable: 1 no action tokens, 1 redacted`` (or without `what`: the per-reason part)."""
    each = ", ".join(f"{n} {r}" for r, n in sorted(counts.items()))
    return f"{sum(counts.values())} {what}: {each}" if what else each


def unreadable_shards(store: Store) -> tuple[list[CorruptShardError], dict[str, int]]:
    """The shards under ``trajectories/`` that cannot be read (each as its
    :class:`CorruptShardError`: URL and reason), and the rows of each readable shard by URL."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CorruptShardWarning)
        infos, res = list_view(store, TRAJECTORIES_DIR)
    readable = {i.path for i in infos}
    visible = None if res is None else set(res.visible)
    bad = []
    for path, size in shard_paths(store, TRAJECTORIES_DIR):
        if path in readable or (visible is not None and path.rsplit("/", 1)[-1] not in visible):
            continue
        try:
            inspect_shard(store, path, size, expected_schema(TRAJECTORIES_DIR))
        except FileNotFoundError:
            continue  # deleted since the listing (a compaction replaced it): not unreadable
        except CorruptShardError as e:
            bad.append(e)
    return bad, {store.url_of(i.path): i.num_rows for i in infos}


def _read_chunk(store: Store, ids: list[str], opts: ExportOptions, result: ExportResult,
                rows_of_shard: dict[str, int]) -> pa.Table:
    """The stored rows of `ids`, read strictly: a shard that cannot be decoded raises ExportError
    (or, with ``skip_unreadable``, is left out and recorded in ``result.unreadable_skipped``)."""
    try:
        return read_trajectories_by_id(store, ids, strict=True)
    except CorruptShardError as e:
        if not opts.skip_unreadable:
            raise ExportError(unreadable_refusal(store, [e])) from e
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CorruptShardWarning)
        table = read_trajectories_by_id(store, ids, strict=False)
    for w in caught:
        shard = getattr(w.message, "shard", None) if issubclass(w.category, CorruptShardWarning) else None
        if shard is not None:
            result.unreadable_skipped.setdefault(shard, rows_of_shard.get(shard))
    return table


def _describe(sel: Selection, result: ExportResult) -> str:
    parts = [f"`--where {sel.where}`" if sel.where else "every trajectory of the store"]
    if sel.run:
        parts.append(f"consumed by training run `{sel.run}`")
    if sel.limit:
        parts.append(f"the first {sel.limit} in arrival order")
    text = ", ".join(parts) + f": {result.selected} selected, {result.exported} exported"
    left_out = result.skipped + result.not_trainable_left_out
    if left_out:
        text += " (left out: " + ", ".join(f"{n} {r}" for r, n in sorted(left_out.items())) + ")"
    if result.unreadable_skipped:
        text += (f". Left out with {SKIP_UNREADABLE_OPTION}, {len(result.unreadable_skipped)} unreadable shard(s): "
                 + ", ".join(f"`{u}` ({'rows unknown' if n is None else f'{n} rows'})"
                             for u, n in sorted(result.unreadable_skipped.items())))
    return text + "."


def export_store(store: str | os.PathLike[str] | Store, to: str, out: str, options: ExportOptions | None = None, *,
                 storage_options: dict[str, Any] | None = None, hub_api: Any = None,
                 progress: Progress | None = None) -> ExportResult:
    """Export the selected trajectories of `store` to target `to` (:data:`TARGETS`) in folder `out`.

    The folder appears complete or not at all; it holds the target's files and
    ``.trajstore/export.json`` (what was exported from where, how it is aligned, what was left
    out or approximated, how to load it). With ``options.push`` the finished folder is then
    uploaded (:func:`trajstore.export.hf.push_to_hub`; `hub_api` replaces its ``HfApi``). Every
    blocker is found before anything is written (:func:`~trajstore.export.blockers.survey_export`);
    ``options.dry_run`` returns them (and what would be written) instead. `progress` is told how far
    the checking and the writing are (:data:`Progress`).

    Raises:
        ExportError: an unknown target, an option the target does not take, nothing to export
            (an empty store, a selection matching nothing, every selected trajectory left out),
            ``traj redact --dry-run`` failing on what would be exported (without ``allow_secrets``), a
            refused trajectory (without ``skip_refused``), `out` not empty: every blocker in one
            line, each with its count and the options that lift it. Nothing is written.
        ExportError (also): a shard of the store that cannot be read (without
            ``skip_unreadable``), naming each shard and the ways out.
        AuditError: an invalid ``where``, an unknown ``run``.
        StoreError: the store cannot be opened.
    """
    opts = options or ExportOptions()
    if to not in TARGETS:
        raise ExportError(f"unknown target {to!r}: choose one of {', '.join(TARGETS)}")
    target = TARGETS[to]
    holds = _check_options(target, opts)
    s = store if isinstance(store, Store) else open_existing_store(store, storage_options=storage_options)
    bad, rows_of_shard = unreadable_shards(s)
    conn = audit.connect(s)
    sel = select_trajectories(conn, s, where=opts.where, run=opts.run, limit=opts.limit)
    if not sel.ids:
        if bad and not opts.skip_unreadable:  # the rows may be in the shards that cannot be read
            raise ExportError(unreadable_refusal(s, bad))
        raise ExportError(_nothing_selected(conn, s, sel, bad))
    # every blocker at once, before anything is written; the secret scan covers only what would be exported
    found = survey_export(s, sel.ids, target, holds, skip_refused=opts.skip_refused,
                          include_not_trainable=opts.include_not_trainable, allow_secrets=opts.allow_secrets,
                          unreadable=bad, skip_unreadable=opts.skip_unreadable,
                          on_rows=None if progress is None else lambda i, n: progress("checking", i, n))
    result = ExportResult(target=to, out=os.path.abspath(out), selected=len(sel.ids),
                          left_out=sorted(opts.without))
    if opts.skip_unreadable:
        result.unreadable_skipped = {e.path: None for e in bad}  # a footer that cannot be read: rows unknown
    if opts.dry_run:
        result.dry_run, result.blockers, result.exported = True, found.blockers, found.would_export
        result.skipped, result.not_trainable_left_out = found.skipped, found.not_trainable_left_out
        if opts.push is not None:
            result.push_plan = push_plan(opts.push, private=opts.private, parts=-(-result.exported // opts.rows_per_file))
        return result
    if found.blockers:
        raise found.refused(to)
    exported_ids: list[str] = []
    groups: dict[str, int] = {}  # group numbers across the parts of this export
    with staged_folder(out) as stage:
        for index, start in enumerate(range(0, len(sel.ids), opts.rows_per_file)):
            chunk = _read_chunk(s, sel.ids[start:start + opts.rows_per_file], opts, result, rows_of_shard)
            rows, samples = _cut(chunk, target, holds, opts, result)
            part = Part(out_dir=stage, index=index, offset=result.exported, rows=rows, samples=samples,
                        holds=holds, pad_token_id=opts.pad_token_id, groups=groups)
            if rows.num_rows:
                result.files += target.write(part)
            result.exported += rows.num_rows
            result.not_trainable_included += rows.num_rows - (pc.sum(rows.column("trainable")).as_py() or 0)
            exported_ids += rows.column("trajectory_id").to_pylist()
            if progress is not None:
                progress("writing", min(start + opts.rows_per_file, len(sel.ids)), len(sel.ids))
        if not result.exported:  # raised inside the staging folder: it is removed, nothing appears
            raise ExportError(_nothing_left(result))
        if target.finish is not None:
            exact = (not sel.run and not sel.limit and not result.skipped and not result.not_trainable_left_out
                     and not result.unreadable_skipped)
            where = sel.where if exact else ids_predicate(conn, exported_ids)
            result.files += target.finish(Finish(
                out_dir=stage, conn=conn, where=where, reproduce=reproduce_command(sel.where) if exact else None,
                selection=_describe(sel, result), name=opts.name,
                license=opts.license))
        write_json(stage, MANIFEST_FILE, _manifest(s, target, sel, result, holds, opts))
    if opts.endpoint is not None:  # the folder is complete: send what it holds
        result.sent_spans = otlp.send(result.out, result.files, opts.endpoint)
    if opts.push is not None:
        result.pushed = push_to_hub(result.out, opts.push, private=opts.private, api=hub_api)
    return result


def _cut(chunk: pa.Table, target: Target, holds: frozenset[str], opts: ExportOptions,
         result: ExportResult) -> tuple[pa.Table, list]:
    """The rows (and samples) of `chunk` the target takes; refusals raise or are counted, and a
    trainer layout leaves out (and counts) rows stored as not trainable unless asked to include them."""
    if not target.uses_samples:
        return chunk, []
    keep, samples = [], []
    leave_not_trainable = target.trainer_layout and not opts.include_not_trainable
    for i, row in enumerate(rows_of(chunk)):
        if leave_not_trainable and not row["trainable"]:
            result.not_trainable_left_out[row["not_trainable_reason"] or "not trainable"] += 1
            continue
        sample = sample_from_row(row)
        why = refusal(row["trajectory_id"], sample, target=target.name, holds=holds, field_names=dict(target.fields))
        if why is not None:
            if not opts.skip_refused:
                raise ExportError(why.message)
            result.skipped[why.reason] += 1
            continue
        assert sample is not None
        keep.append(i)
        samples.append(sample)
        if TAIL_DROPPED in target.approximates:
            result.approximations[TAIL_DROPPED] += sample.dropped_tail
        if MIXED_AS_OLDEST in target.approximates and "versions" in holds:
            result.approximations[MIXED_AS_OLDEST] += sample.mixed_version_calls
    return chunk.take(pa.array(keep, pa.int64())), samples


def _manifest(store: Store, target: Target, sel: Selection, result: ExportResult, holds: frozenset[str],
              opts: ExportOptions) -> dict[str, Any]:
    return {
        "target": target.name, "description": target.description, "trajstore_version": __version__,
        "created_at": dt.datetime.now(dt.timezone.utc).isoformat(), "store": store.uri,
        "selection": {"where": sel.where, "run": sel.run, "limit": sel.limit},
        "trajectories": {"selected": result.selected, "exported": result.exported,
                         "skipped": dict(sorted(result.skipped.items())),
                         "unreadable_shards_skipped": [{"shard": u, "rows": n} for u, n in
                                                       sorted(result.unreadable_skipped.items())],
                         "not_trainable": {"left_out": dict(sorted(result.not_trainable_left_out.items())),
                                           "included": result.not_trainable_included}},
        "fields": {f: target.fields[f] for f in sorted(holds)}, "left_out": result.left_out,
        "secret_check": f"not run ({ALLOW_SECRETS_OPTION})" if opts.allow_secrets else
                        "traj redact --dry-run found nothing in the selected trajectories",
        "pad_token_id": opts.pad_token_id, "alignment": target.alignment,
        "approximations": {k: v for k, v in sorted(result.approximations.items()) if v},
        "checked_against": target.checked_against, "files": result.files, "load": target.loader,
    }

"""The dataset card (README.md) of a Hugging Face export, generated from the store: sources,
tokenizers, counts, statuses, rewards, lengths, staleness, what is exact and what approximated,
and a licence to fill. Every number comes from the audit reports ``traj stats`` prints, run with
the same predicate, so the card and ``traj stats`` cannot disagree."""

from __future__ import annotations

import datetime as dt
import decimal
import glob
import hashlib
import json
import math
import os
from collections.abc import Callable
from typing import Any, Final

import duckdb
import pyarrow as pa

from trajstore import __version__, audit
from trajstore.audit.predicate import where_sql
from trajstore.export.files import INSTALL_EXPORT_EXTRA
from trajstore.extras import require
from trajstore.schema import FIELD_DOCS, LOGPROB_LAYOUT, SCHEMA_VERSION, TRAJECTORY_SCHEMA

CARD_TABLES: Final[tuple[str, ...]] = (
    "overview.totals", "statuses.by_source", "rewards.by_source", "lengths.by_source", "coverage.tokens",
    "coverage.not_trained", "coverage.fidelity", "staleness.by_run", "staleness.unconsumed")
"""The ``traj stats`` tables a card holds, named as ``traj stats --format json`` names them."""

LICENSE_TO_FILL: Final[str] = "other"
"""The card's ``license`` when none is given: Hugging Face's "other", with a note to replace it."""

_REPORTS: Final[dict[str, Callable[..., audit.Report]]] = {
    "overview": audit.overview_report, "statuses": audit.status_report, "rewards": audit.reward_report,
    "lengths": audit.length_report, "coverage": audit.coverage_report, "staleness": audit.staleness_report}


def plain(v: Any) -> Any:
    """A report value as JSON data, as ``traj stats --format json`` writes it: non-finite floats ->
    null, times -> ISO text, DuckDB decimals -> int or float."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (dt.datetime, dt.date)):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return int(v) if v.is_finite() and v.as_tuple().exponent >= 0 else float(v)
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    return v


def card_stats(conn: duckdb.DuckDBPyConnection, where: str | None) -> dict[str, list[dict[str, Any]]]:
    """The :data:`CARD_TABLES` over the trajectories `where` selects, as rows of plain values.

    Raises:
        AuditError: the predicate is invalid.
    """
    wanted: dict[str, list[str]] = {}
    for name in CARD_TABLES:
        report, table = name.split(".")
        wanted.setdefault(report, []).append(table)
    out = {}
    for report, tables in wanted.items():
        rels = _REPORTS[report](conn, where=where).tables()
        for t in tables:
            rel = rels[t]
            out[f"{report}.{t}"] = [{c: plain(v) for c, v in zip(rel.columns, r)} for r in rel.fetchall()]
    return out


def sources_table(conn: duckdb.DuckDBPyConnection, where: str | None) -> list[dict[str, Any]]:
    """Per (source, model, tokenizer, token_source, logprob_source): trajectories."""
    rel = conn.sql(f"SELECT source, model, tokenizer, token_source, logprob_source, count(*) AS trajectories "
                   f"FROM trajectories WHERE {where_sql(conn, where)} GROUP BY ALL ORDER BY ALL")
    return [{c: plain(v) for c, v in zip(rel.columns, r)} for r in rel.fetchall()]


def version_table(conn: duckdb.DuckDBPyConnection, where: str | None) -> dict[str, int]:
    """Action spans of the selected trajectories: ``action_spans``, ``unversioned`` (no policy
    version) and ``mixed_version`` (tokens of several versions, no known boundary)."""
    r = conn.sql(f"SELECT count(*), count(*) FILTER (WHERE policy_version IS NULL), count(policy_version_max) "
                 f"FROM spans WHERE kind = 'action' AND trajectory_id IN (SELECT trajectory_id FROM trajectories "
                 f"WHERE {where_sql(conn, where)})").fetchall()[0]
    return {"action_spans": int(r[0]), "unversioned": int(r[1]), "mixed_version": int(r[2])}


def not_trainable_count(conn: duckdb.DuckDBPyConnection, where: str | None) -> int:
    """Selected trajectories stored as not trainable (``trainable`` false)."""
    return int(conn.sql(f"SELECT count(*) FILTER (WHERE NOT trainable) FROM trajectories "
                        f"WHERE {where_sql(conn, where)}").fetchall()[0][0])


SIZE_CATEGORIES: Final[tuple[tuple[int, str], ...]] = (
    (1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
    (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M"), (1_000_000_000, "100M<n<1B"))
"""The Hub's ``size_categories`` by row count (upper bound exclusive); more: ``1B<n<10B``."""

TASK_CATEGORIES: Final[list[str]] = ["reinforcement-learning", "text-generation"]
"""The Hub task categories of agent trajectories with token ids, log-probs and rewards."""

DEFAULT_LANGUAGE: Final[list[str]] = ["en"]
"""The card's ``language`` (the logs' language is not detected; the card says so)."""

DATA_PATTERN: Final[str] = "data/*.parquet"


def size_category(n: int) -> str:
    """The Hub ``size_categories`` value of a dataset of `n` rows."""
    return next((c for bound, c in SIZE_CATEGORIES if n < bound), "1B<n<10B")


def hf_features(schema: pa.Schema = TRAJECTORY_SCHEMA) -> list[dict[str, Any]]:
    """The ``dataset_info.features`` YAML of `schema` as ``datasets`` writes it
    (``Features.from_arrow_schema(schema)._to_yaml_list()``, datasets 5.2; checked in the tests)."""
    def feature(t: pa.DataType) -> dict[str, Any]:
        if pa.types.is_struct(t):
            return {"struct": [{"name": f.name, **feature(f.type)} for f in t]}
        if pa.types.is_large_list(t) or pa.types.is_list(t):
            inner = feature(t.value_type)
            key = "large_list" if pa.types.is_large_list(t) else "list"
            if "struct" in inner:
                return {key: inner["struct"]}
            return {key: inner["dtype"] if set(inner) == {"dtype"} else inner}
        return {"dtype": {"bool": "bool", "float": "float32", "double": "float64"}.get(str(t), str(t))}
    return [{"name": f.name, **feature(f.type)} for f in schema]


def export_digest(out_dir: str) -> str:
    """SHA-256 over the bytes of the export's data files (``data/*.parquet``, in name order): the
    name of the export's ``datasets`` config, so that two different exports (in folders of the same
    name, or one after another in the same folder) never share a ``datasets`` cache entry, which is
    keyed by the folder's name and the card's metadata, not by the files' contents."""
    h = hashlib.sha256()
    for f in sorted(glob.glob(os.path.join(out_dir, DATA_PATTERN))):
        h.update(os.path.basename(f).encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def card_metadata(*, name: str, license: str | None, rows: int, out_dir: str) -> str:
    """The card's YAML header, built with ``huggingface_hub``'s :class:`DatasetCardData`: licence
    (``other`` marked to fill when none is given), ``pretty_name``, ``size_categories``,
    ``task_categories``, ``language``, tags, the one config (named by :func:`export_digest`, the
    default, split ``train`` = ``data/*.parquet``) and its ``dataset_info`` (features, rows, and the
    Parquet files' bytes as ``download_size``).

    Raises:
        MissingExtraError: huggingface_hub is not installed.
    """
    require(("huggingface_hub",), what="traj export --to hf (the dataset card)", install=INSTALL_EXPORT_EXTRA)
    # huggingface_hub: the export extra, loaded only when a dataset card is written
    from huggingface_hub import DatasetCardData

    config = f"trajstore-{export_digest(out_dir)[:16]}"
    size = sum(os.path.getsize(f) for f in glob.glob(os.path.join(out_dir, DATA_PATTERN)))
    data = DatasetCardData(
        license=license or LICENSE_TO_FILL, pretty_name=name, size_categories=[size_category(rows)],
        task_categories=TASK_CATEGORIES, language=DEFAULT_LANGUAGE,
        tags=["trajstore", "agentic-rl", "trajectories", "reinforcement-learning"],
        configs=[{"config_name": config, "default": True,
                  "data_files": [{"split": "train", "path": DATA_PATTERN}]}],
        dataset_info={"config_name": config, "features": hf_features(),
                      "splits": [{"name": "train", "num_examples": rows}], "download_size": size})
    text = data.to_yaml()
    if not license:
        text = text.replace(f"license: {LICENSE_TO_FILL}\n", f"license: {LICENSE_TO_FILL}  # TO FILL: the licence "
                            "of these trajectories (the logs' and the model outputs')\n", 1)
    return "---\n" + text + "\n---\n"


def default_name(conn: duckdb.DuckDBPyConnection, where: str | None) -> str:
    """A ``pretty_name`` when none is given: the sources of the exported trajectories."""
    sources = [r["source"] for r in sources_table(conn, where)]
    names = list(dict.fromkeys(sources))
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"Agent trajectories ({shown})" if names else "Agent trajectories"


def _markdown(rows: list[dict[str, Any]], empty: str) -> str:
    if not rows:
        return f"_{empty}_\n"
    cols = list(rows[0])

    def cell(v: Any) -> str:
        if v is None:
            return ""
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def card_text(conn: duckdb.DuckDBPyConnection, *, where: str | None, reproduce: str | None, name: str | None,
              selection: str, out_dir: str, license: str | None = None) -> str:
    """The README.md of a Hugging Face dataset folder whose Parquet files are under ``data/``.

    Args:
        where: the predicate that selects exactly the exported trajectories on `conn`.
        reproduce: the ``traj stats`` command that prints the same numbers (None when the
            selection cannot be written as one, e.g. with ``--limit``).
        name: the dataset's name (``pretty_name``; None: :func:`default_name`).
        out_dir: the folder whose ``data/*.parquet`` the card describes (sizes, :func:`export_digest`).
        selection: how the trajectories were chosen, in words.
        license: a Hugging Face licence id; None = :data:`LICENSE_TO_FILL` with a note to replace it.
    """
    stats = card_stats(conn, where)
    versions = version_table(conn, where)
    lic = license or LICENSE_TO_FILL
    totals = (stats["overview.totals"] or [{}])[0]
    name = name or default_name(conn, where)
    parts = [
        card_metadata(name=name, license=license, rows=int(totals.get("trajectories") or 0), out_dir=out_dir),
        f"# {name}\n\nAgent trajectories exported from a trajstore store with `traj export --to hf` "
        f"(trajstore {__version__}, schema v{SCHEMA_VERSION}) on {dt.date.today().isoformat()}: "
        f"{totals.get('trajectories', 0)} trajectories, successful and failed alike, with the rollout engine's "
        "token ids, log-probs and policy versions where the logs had them.\n",
        f"## Selection\n\n{selection}\n\n" + (
            f"Every number below is what `{reproduce}` prints.\n" if reproduce else
            "Every number below comes from the `traj stats` reports run over exactly the exported trajectories.\n"),
        "## Sources\n\n" + _markdown(sources_table(conn, where), "no trajectories"),
        "## Counts\n\n" + _markdown(stats["overview.totals"], "no trajectories"),
        "## Status\n\n" + _markdown(stats["statuses.by_source"], "no trajectories"),
        "## Rewards\n\n" + _markdown(stats["rewards.by_source"], "no trajectories"),
        "## Lengths\n\nTurns are model calls; tokens are counted per trajectory.\n\n"
        + _markdown(stats["lengths.by_source"], "no trajectories"),
        "## Staleness\n\nIn policy versions. Consumed by a training run:\n\n"
        + _markdown(stats["staleness.by_run"], "no training run in the store consumed these trajectories")
        + "\nNot consumed (lag behind the newest version in the store, spread inside a trajectory):\n\n"
        + _markdown(stats["staleness.unconsumed"], "no unconsumed trajectory has policy versions"),
        "## What is exact and what is approximated\n\n"
        "- Token ids are exact where `token_source` is `engine` (the rollout engine's own ids); `retokenized` "
        "rows were tokenized again from logged text and may differ from what the model saw.\n"
        "- Log-probs are the engine's own (nats) where present; a token without one holds NaN, never a "
        "made-up value. Policy versions are the engine's; an action span without one has unknown staleness.\n"
        f"- Action spans: {versions['action_spans']}, without a policy version: {versions['unversioned']}, "
        f"generated across several versions without a known boundary (given their oldest): "
        f"{versions['mixed_version']}.\n\n"
        "Share of action tokens with a log-prob / a policy version, per source and token source:\n\n"
        + _markdown(stats["coverage.tokens"], "no trajectories")
        + "\nWhat the logs did not record exactly (ingest fidelity gaps):\n\n"
        + _markdown(stats["coverage.fidelity"], "no recorded fidelity gap")
        + f"\nTrajectories stored as not trainable (`trainable` false, why in `not_trainable_reason`): "
        f"{not_trainable_count(conn, where)}. This dataset keeps them, flagged, as it keeps every exported "
        "trajectory; `traj export` to a trainer's layout (verl, slime, SkyRL, TRL, AReaL, OpenRLHF) leaves them out "
        "unless `--include-not-trainable`.\n"
        + "\nTrajectories a trainer would not take as they are:\n\n"
        + _markdown(stats["coverage.not_trained"], "every trajectory is trainable"),
        "## Columns\n\nOne row per trajectory, the columns of the trajstore schema:\n\n"
        + "".join(f"- `{c}`: {d}\n" for c, d in FIELD_DOCS.items())
        + f"\nLog-prob layout: {LOGPROB_LAYOUT[SCHEMA_VERSION]}.\n",
        "## Licence\n\n" + (f"`{lic}`.\n" if license else
                            "TO FILL: set `license` above to the licence of the logs and of the model outputs "
                            "(the harness's, the benchmark's and the model's terms apply).\n"),
        "## Statistics (machine-readable)\n\nThe tables above as `traj stats --format json` prints them:\n\n"
        "```json\n" + json.dumps(stats, indent=1, sort_keys=True) + "\n```\n",
    ]
    return "\n".join(parts)


def ids_predicate(conn: duckdb.DuckDBPyConnection, ids: list[str]) -> str:
    """A predicate selecting exactly `ids` on `conn` (registered as a small in-memory table)."""
    conn.register("_export_ids", pa.table({"trajectory_id": pa.array(ids, pa.string())}))
    return "trajectory_id IN (SELECT trajectory_id FROM _export_ids)"


def reproduce_command(where: str | None) -> str:
    """``traj stats STORE --all [--where '...']`` (``--all``: every report, not the short
    overview), the predicate quoted for a POSIX shell."""
    if not where:
        return "traj stats STORE --all"
    return "traj stats STORE --all --where " + "'" + where.replace("'", "'\\''") + "'"


"""The round trip of a store through a format trajstore both writes and reads (store -> ``traj
export --to FORMAT`` -> ``traj ingest`` -> store), and the comparison of the rows before and after:
every column and every span field identical, except what the format cannot carry
(:data:`NOT_CARRIED`, the README's list, "Round trips")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import numpy as np

import trajstore as ts
from trajstore.export import ExportOptions, export_store
from trajstore.ingest import ingest_paths
from trajstore.schema import ACTION_LOGPROBS_COLUMN

ROUND_TRIP_FORMATS: Final[tuple[str, ...]] = ("atif", "hf")
"""The formats both ``traj export`` writes and ``traj ingest`` reads back (hf: its Parquet files,
read as trajectory Parquet)."""

NOT_CARRIED: Final[dict[str, frozenset[str]]] = {
    "atif": frozenset({"metadata.ingest"}),  # names the ATIF file read, as every ingest does
    "hf": frozenset(),
}
"""What each round-trip format cannot carry: ``column`` or ``metadata.<key>`` that may differ."""

EVERYTHING = ExportOptions(allow_secrets=True)


def round_trip(store: str, fmt: str, tmp: Path) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The rows of `store` and those of a new store ingested from its `fmt` export, by id."""
    out, back = tmp / f"{fmt}-out", tmp / f"{fmt}-back"
    export_store(store, fmt, str(out), EVERYTHING)
    report = ingest_paths([str(out)], str(back))
    assert not report.problems, report.problems
    return rows(store), rows(str(back))


def rows(store: str) -> dict[str, dict[str, Any]]:
    return {r["trajectory_id"]: r for r in ts.read_trajectories(store).to_pylist()}


def differences(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """``{column or metadata.<key> or spans.<field>: [trajectory ids]}`` where the rows differ
    (log-probs compared as float32 bits, NaN equal to NaN); a missing or extra row is ``row``."""
    out: dict[str, list[str]] = {}
    for tid in sorted(set(before) | set(after)):
        if tid not in before or tid not in after:
            out.setdefault("row", []).append(tid)
            continue
        for name in sorted(_differing(before[tid], after[tid])):
            out.setdefault(name, []).append(tid)
    return out


def _differing(a: dict[str, Any], b: dict[str, Any]) -> set[str]:
    names = set()
    for col in set(a) | set(b):
        x, y = a.get(col), b.get(col)
        if col == ACTION_LOGPROBS_COLUMN:
            if not np.array_equal(np.asarray(x, np.float32).view(np.int32), np.asarray(y, np.float32).view(np.int32)):
                names.add(col)
        elif col == "metadata":
            mx, my = json.loads(x or "{}"), json.loads(y or "{}")
            names |= {f"metadata.{k}" for k in set(mx) | set(my) if mx.get(k) != my.get(k)}
        elif col == "spans":
            if len(x) != len(y):
                names.add("spans")
            names |= {f"spans.{f}" for sx, sy in zip(x, y) for f in set(sx) | set(sy) if sx.get(f) != sy.get(f)}
        elif x != y:
            names.add(col)
    return names

"""What changed between two trajectory schema versions (``traj schema --diff A B``): columns and
span fields added, removed or retyped, and those whose documented meaning changed, all derived
from :mod:`trajstore.schema` (no hand-kept changelog to drift)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pyarrow as pa

from trajstore.schema import (
    ACTION_LOGPROBS_COLUMN,
    LEGACY_LOGPROBS_COLUMN,
    LOGPROB_LAYOUT,
    schema_description,
    trajectory_schema,
)

Change = Literal["added", "removed", "retyped", "meaning"]


@dataclass(frozen=True)
class SchemaChange:
    """One difference from version `a` to version `b`.

    Attributes:
        change: added | removed | retyped | meaning (the field's documentation changed).
        field: the column, or ``spans[].<name>`` for a span field.
        before, after: the type (retyped, added, removed) or documentation (meaning) in each
            version; None where the field does not exist.
    """

    change: Change
    field: str
    before: str | None
    after: str | None


def _doc(f: pa.Field) -> str:
    return ((f.metadata or {}).get(b"doc") or b"").decode()


def _span_fields(schema: pa.Schema) -> dict[str, pa.Field]:
    t = schema.field("spans").type.value_type
    return {t.field(i).name: t.field(i) for i in range(t.num_fields)}


def _span_docs(version: int) -> dict[str, str]:
    """Span field docs of `version` (the Arrow struct carries none; the description does)."""
    spans = next(f for f in schema_description(version)["fields"] if f["name"] == "spans")
    return {f["name"]: f["doc"] for f in spans["type"]["item"]["fields"]}


def _compare(prefix: str, a: dict[str, pa.Field], b: dict[str, pa.Field], docs_a: dict[str, str],
             docs_b: dict[str, str], skip_type: frozenset[str] = frozenset()) -> list[SchemaChange]:
    out = []
    for name, f in a.items():
        if name not in b:
            out.append(SchemaChange("removed", prefix + name, str(f.type), None))
    for name, f in b.items():
        if name not in a:
            out.append(SchemaChange("added", prefix + name, None, str(f.type)))
            continue
        if name not in skip_type and not a[name].type.equals(f.type):
            out.append(SchemaChange("retyped", prefix + name, str(a[name].type), str(f.type)))
        if docs_a.get(name) != docs_b.get(name):
            out.append(SchemaChange("meaning", prefix + name, docs_a.get(name), docs_b.get(name)))
    return out


def schema_diff(a: int, b: int) -> list[SchemaChange]:
    """Changes from schema version `a` to `b`: top-level columns first, then span fields, each
    in schema order. ``spans`` itself is not listed as retyped for a change inside its struct
    (the span fields are listed instead). The log-prob layout (:data:`~trajstore.schema.LOGPROB_LAYOUT`)
    is listed as a change of meaning of the log-prob column (``logprobs`` in v1 / v2,
    ``action_logprobs`` in v3) when it differs.

    Raises:
        ValueError: a version this package does not read.
    """
    sa, sb = trajectory_schema(a), trajectory_schema(b)
    cols_a, cols_b = {f.name: f for f in sa}, {f.name: f for f in sb}
    docs_a, docs_b = {n: _doc(f) for n, f in cols_a.items()}, {n: _doc(f) for n, f in cols_b.items()}
    for docs, cols, v in ((docs_a, cols_a, a), (docs_b, cols_b, b)):  # the log-prob column under its name in v
        lp = ACTION_LOGPROBS_COLUMN if ACTION_LOGPROBS_COLUMN in cols else LEGACY_LOGPROBS_COLUMN
        docs[lp] += f" [layout: {LOGPROB_LAYOUT[v]}]"
    out = _compare("", cols_a, cols_b, docs_a, docs_b, skip_type=frozenset({"spans"}))
    spans_a, spans_b = _span_fields(sa), _span_fields(sb)
    out += _compare("spans[].", spans_a, spans_b, _span_docs(a), _span_docs(b))
    return out

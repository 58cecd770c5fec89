"""DuckDB relations as plain rows, for tests that compare audit results with hand counts."""

from __future__ import annotations

from typing import Any


def rows(rel: Any) -> list[dict[str, Any]]:
    """Every row of a DuckDB relation (``DuckDBPyRelation``) as ``{column: value}``."""
    return [dict(zip(rel.columns, r)) for r in rel.fetchall()]


def pick(r: dict[str, Any], *keys: str) -> tuple[Any, ...]:
    """The values of `keys` in row `r`, in that order."""
    return tuple(r[k] for k in keys)

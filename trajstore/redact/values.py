"""Secrets in JSON values (a trajectory's ``metadata`` and ``reward_raw``): every string is scanned
and its secrets replaced by the marker text; the JSON structure is kept."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trajstore.redact.rules import Match, Rules, marker


@dataclass(frozen=True)
class StringHit:
    """The secrets of one string inside a JSON value.

    Attributes:
        path: JSON pointer (RFC 6901) of the string (``""`` = the value itself).
        text: the string as it was.
        matches: its secrets (character ranges into `text`), sorted, not overlapping.
    """

    path: str
    text: str
    matches: list[Match]


def _pointer_part(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def replace_matches(text: str, matches: list[Match]) -> str:
    """`text` with each match replaced by its marker (``[REDACTED:<kind>]``)."""
    parts, pos = [], 0
    for m in matches:
        parts += [text[pos:m.start], marker(m.kind)]
        pos = m.end
    parts.append(text[pos:])
    return "".join(parts)


def _find_under(key: str, value: str, rules: Rules) -> list[Match]:
    """The secrets of `value` found in ``<key>: <value>``, as ranges of `value`."""
    head = f"{key}: "
    n = len(head)
    return [Match(max(m.start, n) - n, m.end - n, m.kind, m.rank) for m in rules.find(head + value) if m.end > n]


def scrub_json(value: Any, rules: Rules, *, skip_keys: frozenset[str] = frozenset()) -> tuple[Any, list[StringHit]]:
    """`value` with the secrets of its strings replaced (dict keys are kept as they are), and
    where they were. A string under a dict key is scanned as ``<key>: <string>``, so that rules
    that know a secret by its name (``api_key``, ``x-api-key``, ``*_TOKEN``, ``password``) find
    ``{"api_key": "..."}`` as they find ``api_key: ...`` in text; only matches inside the string count.

    Args:
        value: a parsed JSON value (dicts, lists, strings, numbers, booleans, None).
        skip_keys: keys of the top-level object left out (the redaction record itself).

    Returns:
        (the new value, the strings that held secrets in document order); the new value is
        `value` itself when nothing was found.
    """
    hits: list[StringHit] = []

    def walk(v: Any, path: str, top: bool, key: str | None = None) -> Any:
        if isinstance(v, str):
            found = rules.find(v) if key is None else _find_under(key, v, rules)
            if not found:
                return v
            hits.append(StringHit(path, v, found))
            return replace_matches(v, found)
        if isinstance(v, dict):
            out, changed = {}, False
            for k, x in v.items():
                if top and k in skip_keys:
                    out[k] = x
                    continue
                y = walk(x, f"{path}/{_pointer_part(str(k))}", False, str(k))
                changed |= y is not x
                out[k] = y
            return out if changed else v
        if isinstance(v, list):
            items = [walk(x, f"{path}/{i}", False) for i, x in enumerate(v)]
            return items if any(a is not b for a, b in zip(items, v)) else v
        return v

    return walk(value, "", True), hits

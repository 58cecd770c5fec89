"""Span-by-span faithfulness checks of a stored trajectory against its source log: the spans a
log's messages must become, written from the log itself in SmolLM2's ChatML (the ingest tests'
oracle template, see :mod:`tests.helpers.ingest`), and the stored spans decoded to compare.

A model call is an action span (its text, reasoning and tool calls, closed by ``<|im_end|>``
unless it stopped at the length limit); each message after it is one observation span (the
first after an action starts with ChatML's separator ``\\n``; the one before the next action
ends with the generation prompt).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.helpers.ingest import END, GEN
from tests.helpers.paths import REPO_ROOT

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "ingest"
"""Real public logs of the formats added in this repository (provenance in each folder's SOURCES.md)."""


@dataclass
class Turn:
    """One message of a log as the trajectory must hold it: ``action`` (a model call) or
    ``observation`` (what came back), its role and text as rendered for SmolLM2."""

    kind: str
    role: str
    text: str
    finish_reason: str | None = None


def call_block(name: str, args: str) -> str:
    return f'<tool_call>\n{{"name": {json.dumps(name)}, "arguments": {args}}}\n</tool_call>'


def action(content: str = "", calls: list[tuple[str, str]] = (), reasoning: str | None = None,
           finish_reason: str | None = None) -> Turn:
    """A model call: ``<think>`` reasoning, the text, one ``<tool_call>`` block per call."""
    text = f"<think>\n{reasoning}\n</think>\n\n{content}" if reasoning else content
    for name, args in calls:
        text += ("\n" if text else "") + call_block(name, args)
    return Turn("action", "assistant", text, finish_reason)


def observation(role: str, text: str) -> Turn:
    return Turn("observation", role, text)


def expected_spans(turns: list[Turn]) -> list[tuple[str, str, str]]:
    """(kind, role, decoded text) of every span after the prompt, from `turns` (the log's
    messages after the first model call's context, in order, starting with that call)."""
    out = []
    for i, t in enumerate(turns):
        if t.kind == "action":
            out.append(("action", "assistant", t.text + ("" if t.finish_reason == "length" else END)))
            continue
        text = ("\n" if i and turns[i - 1].kind == "action" else "") + f"<|im_start|>{t.role}\n{t.text}{END}\n"
        if i + 1 < len(turns) and turns[i + 1].kind == "action":
            text += GEN
        out.append(("observation", t.role, text))
    return out


def stored_spans(row: dict[str, Any], tok: Any) -> list[tuple[str, str | None, str]]:
    """(kind, role, decoded text) of every span of a stored row."""
    return [(s["kind"], s["role"], tok.decode(row["tokens"][s["start"]:s["end"]])) for s in row["spans"]]


def assert_faithful(row: dict[str, Any], tok: Any, turns: list[Turn], prompt_tail: str) -> None:
    """The row's prompt ends with `prompt_tail` (the first call's context as rendered, up to its
    generation prompt) and every later span is the one `turns` make, in order, with the logged
    finish reasons on the actions."""
    got = stored_spans(row, tok)
    assert got[0][0] == "prompt" and got[0][2].endswith(prompt_tail), got[0][2][-400:]
    want = expected_spans(turns)
    assert [(k, r) for k, r, _ in got[1:]] == [(k, r) for k, r, _ in want]
    for n, ((_, _, g), (_, _, w)) in enumerate(zip(got[1:], want)):
        assert g == w, f"span {n + 1}: {g[:300]!r} != {w[:300]!r}"
    actions = [s for s in row["spans"] if s["kind"] == "action"]
    assert [s["finish_reason"] for s in actions] == [t.finish_reason for t in turns if t.kind == "action"]


def load(path: Path) -> Any:
    return json.loads(path.read_text())


def load_jsonl(path: Path) -> list[Any]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]

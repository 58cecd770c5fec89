"""A model call's stop reason as logged by the API it went through, in the one vocabulary spans
store (``finish_reason``: OpenAI's ``stop``, ``length``, ``tool_calls``, ``content_filter``):
Anthropic Messages ``stop_reason`` (:func:`anthropic_finish_reason`), OpenAI chat completions
``finish_reason`` (:func:`openai_finish_reason`). A call cut at the output limit is ``length`` in
every API, so the renderer leaves its end of turn off whatever the harness.
"""

from __future__ import annotations

from typing import Any, Final

ANTHROPIC_STOP_REASONS: Final[dict[str, str]] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}
"""Anthropic Messages API ``stop_reason`` -> ``finish_reason`` (others, e.g. ``pause_turn``, are
kept as logged)."""

OPENAI_ALIASES: Final[dict[str, str]] = {"max_tokens": "length", "max_output_tokens": "length"}
"""Spellings of a length stop that OpenAI-compatible servers write instead of ``length``."""


def anthropic_finish_reason(stop_reason: Any) -> str | None:
    """The ``finish_reason`` of an Anthropic ``stop_reason`` (``max_tokens`` -> ``length``,
    ``tool_use`` -> ``tool_calls``, ``end_turn`` -> ``stop``); None when not logged."""
    if not isinstance(stop_reason, str) or not stop_reason:
        return None
    return ANTHROPIC_STOP_REASONS.get(stop_reason, stop_reason)


def openai_finish_reason(finish_reason: Any) -> str | None:
    """An OpenAI(-compatible) chat ``finish_reason`` as stored (``max_tokens`` -> ``length``);
    None when not logged."""
    if not isinstance(finish_reason, str) or not finish_reason:
        return None
    return OPENAI_ALIASES.get(finish_reason, finish_reason)


LENGTH_STOPS: Final[frozenset[str]] = frozenset(
    {"length", "max_tokens", "max_output_tokens", "model_context_window_exceeded"})
"""Every API's spelling of a call cut at the output limit (compared lower-cased: Gemini writes
``MAX_TOKENS``, the Responses API ``incomplete_details.reason = max_output_tokens``)."""


def stored_finish_reason(reason: Any) -> str | None:
    """A logged finish reason in the vocabulary spans store: every length stop is ``length`` (so
    the action ends where the model was cut, without an end of turn it never generated); other
    reasons as logged; None when not logged."""
    if not isinstance(reason, str) or not reason:
        return None
    return "length" if reason.lower() in LENGTH_STOPS else reason

"""The engine token ids of successive model calls as one rollout's segments: the first prompt,
each call's generation as an action, and the tokens each later prompt adds after the previous
prompt + generation as an observation (a prompt that does not extend them starts a new context).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trajstore.ingest.records import EngineSegment


class EngineChain:
    """Segments of model calls added in order (OpenHands V1 TokenEvents, NeMo Gym output items,
    ATIF agent steps).

    Attributes:
        segments: the segments so far: ``prompt`` for the first call and for every call whose
            prompt does not extend the previous prompt + generation (the history was rewritten:
            a new trajectory of the episode), else ``observation`` (role ``tool``, answering the
            previous call's first tool call, else the call) for the tokens the prompt adds, when
            it adds any; then the call's ``action``.
    """

    def __init__(self, *, prompt_role: str):
        self.prompt_role = prompt_role
        self.segments: list[EngineSegment] = []
        self._seen: list[int] = []
        self._last: EngineSegment | None = None

    def extends(self, prompt_ids: Sequence[int]) -> bool:
        """Whether `prompt_ids` start with everything before it (False for the first call)."""
        return self._last is not None and list(prompt_ids[:len(self._seen)]) == self._seen

    def add(self, prompt_ids: Sequence[int], generation_ids: Sequence[int], logprobs: list[Any] | None = None, *,
            call_id: str | None, tool_call_ids: list[str] | None = None, **sampling: Any) -> None:
        """Add one model call: the prompt it was sent and what it generated (token ids, with the
        log-probs when logged), as an ``action`` segment of role ``assistant``.

        Args:
            call_id: the call's id (response or step id).
            tool_call_ids: the ids of the tool calls it made (None or []: none).
            sampling: the segment's ``finish_reason``, ``temperature``, ``top_p``, when logged.
        """
        action = EngineSegment("action", list(generation_ids), logprobs, role="assistant", call_id=call_id,
                               tool_call_ids=tool_call_ids or None, **sampling)
        p = list(prompt_ids)
        if self.extends(p):
            if len(p) > len(self._seen):
                last = self._last
                assert last is not None
                self.segments.append(EngineSegment("observation", p[len(self._seen):], role="tool",
                                                   cause_id=(last.tool_call_ids or [last.call_id])[0]))
        else:
            self.segments.append(EngineSegment("prompt", p, role=self.prompt_role))
        self.segments.append(action)
        self._seen = p + list(action.token_ids)
        self._last = action

"""The engine token ids of successive model calls as one rollout's segments: the first prompt,
each call's generation as an action, and the tokens each later prompt adds after the previous
prompt + generation as an observation (a prompt that does not extend them starts a new context).
"""

from __future__ import annotations

from collections.abc import Sequence

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

    def add(self, prompt_ids: Sequence[int], action: EngineSegment) -> None:
        """Add one model call: the prompt it was sent (token ids) and its ``action`` segment."""
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

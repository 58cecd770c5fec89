"""One model call of ``traj proxy`` while it is in flight (:class:`InFlightCall`): from its start,
through the upstream's answer, to the end of its recording; what it records (the client's body,
its observation, the policy version at its start) and what the shutdown may do to it (cut it)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from trajstore.proxy.recorder import Session
from trajstore.proxy.sync import Ticket


def observation_of(body: dict[str, Any], chat: bool) -> tuple[str | None, str | None]:
    """(role, cause id) of what a chat request added after the last assistant message: the
    tool results (``tool``, the first one's ``tool_call_id``), else ``user``; (None, None) for a
    text completion."""
    if not chat:
        return None, None
    tail = []
    for m in reversed(body.get("messages") or []):
        if not isinstance(m, dict) or m.get("role") == "assistant":
            break
        tail.append(m)
    tools = [m for m in reversed(tail) if m.get("role") == "tool"]
    if tools:
        return "tool", tools[0].get("tool_call_id")
    return "user", None


class InFlightCall:
    """One model call from its start to the end of its recording (or failure).

    Attributes:
        session: its episode (the call counts in ``session.in_flight`` while it is registered).
        body: the client's JSON body (not modified). chat: ``/v1/chat/completions`` rather than
            ``/v1/completions``. ephemeral: a call without a session, its own episode (written
            before the answer goes out). lineage: the lineage the client named, or None.
        observation: (role, cause id) of what its prompt added since the last call (:func:`observation_of`).
        ticket: the policy version and reload epoch when the upstream got it (None until then).
        task: the request's task, cancelled to cut a call that waits for the upstream.
        waiting: True while it waits for the upstream's answer (or for a drain-mode reload).
        stop_relay: while a stream is relayed: stops reading the upstream (the relay then sends
            the client an error event).
        answered: the upstream's answer is complete (its recording is under way: never cut).
        cut: the shutdown cut it.
        started_at: when the proxy got the request (UTC). first_token_at: when a streamed answer's
            first generated token arrived (None until then, and for an answer read whole).
        ended_at: when the answer was complete (None until then). Stored on its action span(s).
    """

    __slots__ = ("session", "body", "chat", "ephemeral", "lineage", "observation", "ticket", "task", "waiting",
                 "stop_relay", "answered", "cut", "started_at", "first_token_at", "ended_at", "_registry",
                 "_ended")

    def __init__(self, session: Session, registry: set[InFlightCall], *, body: dict[str, Any], chat: bool,
                 ephemeral: bool, lineage: str | None):
        self.session = session
        self.body = body
        self.chat = chat
        self.ephemeral = ephemeral
        self.lineage = lineage
        self.observation = observation_of(body, chat)
        self.ticket: Ticket | None = None
        self.task = asyncio.current_task()
        self.waiting = False
        self.stop_relay: Callable[[], object] | None = None
        self.answered = False
        self.cut = False
        self.started_at = datetime.now(timezone.utc)
        self.first_token_at: datetime | None = None
        self.ended_at: datetime | None = None
        self._registry = registry
        self._ended = False
        registry.add(self)
        session.begin()

    def end(self) -> None:
        """The call is answered and recorded, or failed (idempotent)."""
        if not self._ended:
            self._ended = True
            self._registry.discard(self)
            self.session.end()

    def cut_now(self) -> bool:
        """Cut the call if it can be (it waits for the upstream, or its stream is being relayed);
        the client then gets an error from the proxy. True when cut."""
        if self.cut or self.answered:
            return False
        if self.stop_relay is not None:
            self.cut = True
            self.stop_relay()
            return True
        if self.waiting and self.task is not None:
            self.cut = True
            self.task.cancel(msg="cut at the shutdown deadline")
            return True
        return False

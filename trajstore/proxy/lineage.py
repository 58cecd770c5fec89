"""Lineages of a ``traj proxy`` session: which stored trajectory each model call extends.

A session (one episode) keeps every lineage it opened: each holds the token ids it has so far
(the engine's prompt ids of its last call plus the ids that call sampled), where its last action
starts, its call count, the trajectory being recorded for it and the id of its last one written.
A call goes to the deepest lineage (most tokens; the most recently called on a tie) whose tokens
are a prefix of the call's prompt ids, the ids the engine saw, never re-tokenized text. When none
is, a new lineage starts, linked (``parent_trajectory_id``) to the lineage with the longest
common prefix, ``fork_point`` = that common prefix's length; its stored prompt is the whole prompt
the engine saw, so the shared tokens are never an action of the child (a trainer never trains
them twice). An unmatched prompt counts as a context break (``context_breaks``).

Explicit lineages: a call that names one (``X-Lineage-Id`` header, or the URL form
``/s/<session>/l/<lineage>/v1/...``) goes to that lineage. A new name inside a session that
already has a lineage starts a ``subagent`` child linked to the lineage with the longest common
prefix (the session's first lineage, named or not, is its root). A named lineage whose own
tokens a call's prompt does not extend continues as a new trajectory linked to its previous one
(a rewrite of that lineage's context: ``fork`` or ``context_rewrite`` by the rule below).

``link_kind`` (decided when the child is written, since it depends on what came after it; an
installment already written is immutable, so a later call cannot change it):

* an explicit new lineage id: ``subagent``;
* a new trajectory of the same lineage after an installment (idle eviction, a ``/finish`` that
  stopped waiting for calls in flight, the shutdown flush: metadata ``episode.change``
  ``after-idle-eviction``, ``after-finish``, ``after-shutdown-flush``): ``continuation`` of its
  previous trajectory, ``fork_point`` = that trajectory's length;
* an unmatched prompt whose parent lineage goes on receiving calls afterwards: ``subagent``
  (parent and sub-agent interleave);
* an unmatched prompt whose parent lineage is never extended again: ``fork`` when the shared
  prefix covers at least one of the parent's actions (a retry that resends earlier turns and
  continues differently, or resends the last prompt) or when the prompt is only a prefix of the
  parent's tokens (it resends what the parent had and adds nothing: a resample, even of the first
  call), else ``context_rewrite`` (a condenser or summariser replaced the context). A prompt that keeps the parent's context up to its last
  action and goes on past where it differs from it (the chat template re-rendered the last reply:
  reasoning dropped, content trimmed) re-renders the same line: ``context_rewrite`` too.

Credit (``abandoned``, decided when written, as the link kind): the parent of a ``fork`` child is
a branch the harness threw away (the fork replaced it: a retry or resample), written with
``abandoned = true``; every other trajectory the proxy writes says ``false``. Only the branch the
harness went on with reaches the episode's end (``/finish``), so a trainer credits the episode's
reward to it alone (README, "Episodes stored as several trajectories"). A parent already written in an earlier installment
(idle eviction, shutdown flush) is immutable and keeps ``false``.

An unnamed sub-agent whose first prompt extends its parent's whole context goes to the parent's
lineage (its prompt extends it), and the parent's next turn, going on from its own earlier
context, opens a child. When the two interleaved and the child's line called last (a sub-agent
ends before its parent), they trade places when written (:meth:`LineageSet.settle`): the parent's
trajectory keeps its own calls, the sub-agent's become a ``subagent`` child whose prompt is all
before its first action. One that ends before its parent goes on looks like a retry (``fork``).

Every trajectory of the session carries ``episode_id`` = the session's episode id.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from trajstore.builder import TrajectoryBuilder

SUBAGENT, CONTEXT_REWRITE, FORK, CONTINUATION = "subagent", "context_rewrite", "fork", "continuation"
"""The ``link_kind`` values the proxy writes (:data:`trajstore.schema.LINK_KINDS`)."""

ENGINE_PROMPT = "engine-prompt"
"""``episode.change`` of a trajectory opened by a prompt that extends no lineage (ingest's name)."""
NEW_LINEAGE = "new-lineage"
"""``episode.change`` of the first trajectory of an explicitly named lineage (not the root)."""

LINEAGE_HEADER = "x-lineage-id"
"""Request header naming the call's lineage (the URL form is ``/s/<session>/l/<lineage>/v1``)."""


@dataclass(eq=False)
class PendingPart:
    """One trajectory of a lineage, recorded and not yet written.

    Attributes:
        builder: its spans so far. number: its part number in the episode (1-based, creation order).
        change: metadata ``episode.change`` (None for the episode's first trajectory).
        parent_id, fork_point: its link (None: a root).
        link: the link kind when known at creation (``subagent`` for a named lineage,
            ``continuation``, or None: decided when written, see the module docstring).
        parent: the parent lineage, for that decision. parent_calls: its calls when this part opened.
        covers_action: the shared prefix holds at least one of the parent's actions.
        rerender: the prompt re-renders the parent's last reply (see the module docstring).
        resends: the prompt is only a prefix of the parent's tokens (a resample, see the module docstring).
        ends: its lineage's token count after each of its calls.
        observation: role and cause of the tokens its first prompt adds past its parent's.
    """

    builder: TrajectoryBuilder
    number: int
    change: str | None
    parent_id: str | None = None
    fork_point: int | None = None
    link: str | None = None
    parent: SessionLineage | None = None
    parent_calls: int = 0
    covers_action: bool = False
    rerender: bool = False
    resends: bool = False
    ends: list[int] = field(default_factory=list)
    observation: tuple[str | None, str | None] = ("tool", None)

    def link_kind(self) -> str | None:
        """The link kind to write now (None without a parent)."""
        if self.parent_id is None:
            return None
        if self.link is not None:
            return self.link
        p = self.parent
        assert p is not None and self.fork_point is not None
        if p.calls > self.parent_calls:
            return SUBAGENT
        return FORK if (self.covers_action and not self.rerender) or self.resends else CONTEXT_REWRITE


@dataclass(eq=False)
class SessionLineage:
    """One line of context in a session (see the module docstring).

    Attributes:
        name: the explicit lineage id, or None.
        tokens: int32 (N,): its token ids so far (last prompt + last sampled ids).
        last_action_start: where its last call's sampled ids begin in `tokens`.
        last_finish: its last call's finish reason.
        first_action_end: end of its first action in its own token coordinates (None: no action
            yet); a prefix at least this long covers one of its actions.
        calls: calls recorded into it. last_call: the session's call count at its last call.
        part: the trajectory being recorded for it (None after an installment wrote it).
        written_id: its last trajectory in the store.
        resume_change: ``episode.change`` of its next trajectory after an installment.
    """

    name: str | None
    tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    last_action_start: int = 0
    last_finish: str | None = None
    first_action_end: int | None = None
    calls: int = 0
    last_call: int = 0
    part: PendingPart | None = None
    written_id: str | None = None
    resume_change: str | None = None

    @property
    def head_id(self) -> str | None:
        """Its newest trajectory: the one being recorded, else the last one written."""
        return self.part.builder.trajectory_id if self.part is not None else self.written_id


def _rerenders(prompt: np.ndarray, parent: SessionLineage, n: int) -> bool:
    """`prompt`, sharing `n` tokens with `parent`, keeps its context up to its last action and
    goes on past where they differ: the last reply re-rendered, not a retry."""
    return parent.calls > 0 and len(prompt) > n >= parent.last_action_start


def extends(prompt: np.ndarray, tokens: np.ndarray) -> bool:
    """True when `tokens` is a prefix of `prompt` (both 1-D integer arrays)."""
    n = len(tokens)
    return len(prompt) >= n and bool(np.array_equal(prompt[:n], tokens))


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two 1-D integer arrays."""
    m = min(len(a), len(b))
    diff = np.flatnonzero(a[:m] != b[:m])
    return int(diff[0]) if len(diff) else m


@dataclass
class CallRoute:
    """Where one call goes (:meth:`LineageSet.route`).

    Attributes:
        lineage: the lineage it extends or opens.
        opens: a new trajectory starts with this call (its whole prompt is the prompt span).
        change, parent, fork_point, link: that trajectory's ``episode.change`` and link (see :class:`PendingPart`).
        unmatched: the prompt extends no lineage it could go to (a context break).
        closest: the lineage with the longest common prefix (for an unmatched prompt).
        rerender: the prompt keeps `closest`'s context up to its last action and goes on past
            where it differs (a re-rendered last reply).
        resends: the prompt is only a prefix of `closest`'s tokens (a resample).
    """

    lineage: SessionLineage
    opens: bool
    change: str | None = None
    parent: SessionLineage | None = None
    fork_point: int | None = None
    link: str | None = None
    unmatched: bool = False
    closest: SessionLineage | None = None
    rerender: bool = False
    resends: bool = False


@dataclass
class LineageSet:
    """The lineages of one session, in creation order, and its trajectories not yet written."""

    lineages: list[SessionLineage] = field(default_factory=list)
    pending: list[PendingPart] = field(default_factory=list)
    """Trajectories recorded since the last installment, in creation order."""
    parts: int = 0
    """Trajectories opened in the episode so far (written or not)."""
    calls: int = 0
    counted: int = 0
    """Its lineage count when the episode last ended (``/proxy/stats`` ``lineages_per_episode``)."""

    def named(self, name: str) -> SessionLineage | None:
        return next((x for x in self.lineages if x.name == name), None)

    def deepest(self, prompt: np.ndarray) -> SessionLineage | None:
        """The lineage with the most tokens that `prompt` extends (the most recent on a tie)."""
        best = None
        for x in self.lineages:
            if (best is None or (len(x.tokens), x.last_call) > (len(best.tokens), best.last_call)) and \
                    extends(prompt, x.tokens):
                best = x
        return best

    def closest(self, prompt: np.ndarray, *, exclude: SessionLineage | None = None) -> tuple[SessionLineage | None, int]:
        """The lineage sharing the longest prefix with `prompt` (the most recent on a tie) and that length."""
        best, best_n = None, -1
        for x in self.lineages:
            if x is exclude:
                continue
            n = common_prefix(prompt, x.tokens)
            if (n, x.last_call) > (best_n, best.last_call if best else -1):
                best, best_n = x, n
        return best, max(best_n, 0)

    def route(self, prompt: np.ndarray, name: str | None) -> CallRoute:
        """Where a call with these prompt ids (and explicit lineage `name`, or None) goes; nothing
        changes until :meth:`open` / :meth:`extend`."""
        if name is not None:
            x = self.named(name)
            if x is None:
                parent, n = self.closest(prompt)
                if parent is None:  # the session's first lineage: the root
                    return CallRoute(SessionLineage(name), opens=True)
                return CallRoute(SessionLineage(name), opens=True, change=NEW_LINEAGE, parent=parent, fork_point=n,
                                 link=SUBAGENT)
            if extends(prompt, x.tokens):
                return self._attach(x)
            # its own context was rewritten: its calls go to the new trajectory, so the old one never goes on
            n = common_prefix(prompt, x.tokens)
            covers = x.first_action_end is not None and n >= x.first_action_end
            link = FORK if (covers and not _rerenders(prompt, x, n)) or n == len(prompt) else CONTEXT_REWRITE
            return CallRoute(x, opens=True, change=ENGINE_PROMPT, parent=x, fork_point=n, link=link, unmatched=True,
                             closest=x)
        x = self.deepest(prompt)
        if x is not None:
            return self._attach(x)
        if not self.lineages:
            return CallRoute(SessionLineage(None), opens=True)
        parent, n = self.closest(prompt)
        assert parent is not None
        return CallRoute(SessionLineage(None), opens=True, change=ENGINE_PROMPT, parent=parent, fork_point=n,
                         unmatched=True, closest=parent, rerender=_rerenders(prompt, parent, n),
                         resends=n == len(prompt))

    @staticmethod
    def _attach(x: SessionLineage) -> CallRoute:
        if x.part is not None:
            return CallRoute(x, opens=False)
        # its last trajectory is written (an installment): a continuation with the whole context as prompt
        return CallRoute(x, opens=True, change=x.resume_change, parent=x, fork_point=len(x.tokens), link=CONTINUATION)

    def settle(self) -> None:
        """Before the pending trajectories are written: an unnamed child opened from lineage `p`
        whose prompt goes on from `p`'s whole context as of an earlier call of `p`'s part, while
        `p` was extended after it opened (they interleaved) and the child's line called last, is
        `p`'s own line: the calls `p` got after that earlier call are a sub-agent that inherited
        the context (its first prompt extended it, so it was taken for `p`'s next turn), and a
        sub-agent ends before its parent. They trade places: `p`'s part is cut back to that call
        and goes on with the child's calls (same id, link and part number); the sub-agent's calls
        become the child's trajectory (its id and part number), a ``subagent`` of `p` whose prompt
        is everything before its first action."""
        for c in list(self.pending):
            p = c.parent
            if c.link is not None or c.fork_point is None or p is None or p.part is None or p.calls <= c.parent_calls \
                    or c.parent_id != p.part.builder.trajectory_id:  # opened from the part recorded now
                continue
            child = next((x for x in self.lineages if x.part is c), None)
            if child is None or child.name is not None or child.last_call <= p.last_call:
                continue
            k = max((i for i, e in enumerate(p.part.ends[:-1]) if e <= c.fork_point), default=None)
            if k is not None:
                self._trade(p, child, k)

    def _trade(self, p: SessionLineage, child: SessionLineage, k: int) -> None:
        """:meth:`settle`: `p`'s calls after its part's `k`-th call and `child`'s trade places."""
        part, c = p.part, child.part
        assert part is not None and c is not None and c.fork_point is not None
        at, before = part.ends[k], p.calls - (len(part.ends) - k - 1)
        sub = SessionLineage(None, tokens=p.tokens, last_action_start=p.last_action_start,
                             last_finish=p.last_finish, first_action_end=p.first_action_end,
                             calls=p.calls - before, last_call=p.last_call)
        sub.part = PendingPart(part.builder.split_off(at, c.builder.trajectory_id), number=c.number,
                               change=ENGINE_PROMPT, parent_id=part.builder.trajectory_id, fork_point=c.fork_point,
                               link=SUBAGENT, parent=p, ends=part.ends[k + 1:])
        part.builder.append_from(c.builder, role=c.observation[0], cause_id=c.observation[1])
        part.ends = [*part.ends[:k + 1], *c.ends]
        p.tokens, p.last_action_start, p.last_finish = child.tokens, child.last_action_start, child.last_finish
        p.calls, p.last_call = before + child.calls, child.last_call
        for q in self.pending:  # other children follow the context they branched off
            if q.parent is child:
                q.parent, q.parent_id, q.parent_calls = p, part.builder.trajectory_id, q.parent_calls + before
            elif q.parent is p and q is not c and q.fork_point is not None and q.fork_point > at:
                q.parent, q.parent_id, q.parent_calls = sub, sub.part.builder.trajectory_id, q.parent_calls - before
        self.lineages[self.lineages.index(child)] = sub
        self.pending[self.pending.index(c)] = sub.part

    def open(self, r: CallRoute, builder: TrajectoryBuilder) -> PendingPart:
        """Start the trajectory `r` opens (`builder` holds nothing yet) and register its lineage."""
        self.parts += 1
        parent_id = r.parent.head_id if r.parent is not None else None
        fork_point = r.fork_point if parent_id is not None else None
        part = PendingPart(builder, number=self.parts, change=r.change, parent_id=parent_id, fork_point=fork_point,
                           link=r.link, parent=r.parent, parent_calls=r.parent.calls if r.parent is not None else 0)
        x = r.lineage
        if r.parent is not None and fork_point is not None:
            # the parent's actions inside the shared prefix are actions of this context too
            first = r.parent.first_action_end
            part.covers_action = first is not None and first <= fork_point
            part.rerender = r.rerender
            part.resends = r.resends
            x.first_action_end = first if part.covers_action else None
        if x not in self.lineages:
            self.lineages.append(x)
        x.part = part
        self.pending.append(part)
        return part

    def extend(self, x: SessionLineage, prompt: np.ndarray, sampled: np.ndarray) -> None:
        """Record that lineage `x` got a call: its tokens become `prompt` + `sampled`."""
        self.calls += 1
        start = len(prompt)
        x.tokens = np.concatenate([prompt.astype(np.int32, copy=False), sampled.astype(np.int32, copy=False)])
        x.last_action_start = start
        if x.first_action_end is None and len(sampled):
            x.first_action_end = len(x.tokens)
        x.calls += 1
        x.last_call = self.calls
        if x.part is not None:
            x.part.ends.append(len(x.tokens))

    def written(self, resume_change: str | None) -> list[PendingPart]:
        """The pending trajectories, now written: each lineage remembers its last one's id, and its
        next call opens a continuation (``episode.change`` = `resume_change`)."""
        out, self.pending = self.pending, []
        for x in self.lineages:
            if x.part is not None:
                x.written_id = x.part.builder.trajectory_id
                x.part = None
                x.resume_change = resume_change
        return out

    def abandoned(self) -> set[str]:
        """Ids of the pending trajectories that a pending ``fork`` child replaced (branches the
        harness threw away: a retry or resample; see the module docstring)."""
        return {p.parent_id for p in self.pending if p.parent_id is not None and p.link_kind() == FORK}

    def set_resume_change(self, change: str) -> None:
        """After an idle eviction: each lineage's next trajectory says so."""
        for x in self.lineages:
            x.resume_change = change

    @property
    def token_count(self) -> int:
        """Token ids held (what an evicted episode keeps in memory)."""
        return sum(len(x.tokens) for x in self.lineages)

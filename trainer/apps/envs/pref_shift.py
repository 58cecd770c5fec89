"""The chain task with a reward preference that shifts in stages (a learning benchmark
environment modelled on the paper's simulated online task, docs/sao.md "Results").

Each action starts with a style token, one of :data:`STYLES`, then the chain task's two digits
and the end-of-action token. A term counts fully when the action's style is the one preferred
at the time and a quarter otherwise, so after a shift of preference the reward of a policy that
kept its old style drops to a quarter of its correctness until it relearns. Nothing in the
observations names the preferred style: it shows only in the reward, as user feedback would.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trajstore.trainer.apps.envs.base import Reply
from trajstore.trainer.apps.envs.chain import TAGS, TERMS_PER_ACTION, ChainTask

STYLES = ("<", "=", ">")
"""Style tokens an action may start with."""
OFF_STYLE_WEIGHT = 0.25
"""Credit of a right term written in a style that is not the preferred one."""
MAX_ACTION_TOKENS = 1 + TERMS_PER_ACTION + 1
"""Token budget of one action: style, digits, end-of-action token."""


@dataclass
class PrefChainTask:
    """A :class:`~trajstore.trainer.apps.envs.chain.ChainTask` instance played with styled actions.

    Prompt ``G<tag><x0><x1>|``. Action: ``<style><d1><d2>`` then the end token; an action whose
    first character is not a style gets no credit for its terms. Observations are the chain
    task's (``R``/``W`` per term, then the true terms). Reward at the end: the mean over terms of
    correctness x (1 if the action's style is `preferred`, else :data:`OFF_STYLE_WEIGHT`), in [0, 1].

    Args:
        family, x0, x1: the chain instance (see ChainTask).
        preferred: the style the reward prefers for this episode (the stage in force when the
            episode starts).
    """

    family: str
    x0: int
    x1: int
    preferred: str
    chain: ChainTask = field(init=False)
    credit: float = 0.0
    prompt_id: str = field(init=False)

    def __post_init__(self) -> None:
        if self.preferred not in STYLES:
            raise ValueError(f"PrefChainTask: preferred style must be one of {STYLES}, got {self.preferred!r}")
        self.chain = ChainTask(self.family, self.x0, self.x1)
        self.prompt_id = f"pref-{self.family}-{self.x0}{self.x1}"

    @property
    def turns(self) -> int:
        return self.chain.turns

    def prompt(self) -> str:
        return f"G{TAGS[self.family]}{self.x0}{self.x1}|"

    def expected(self) -> str:
        """The best next action's characters: the preferred style, then the right digits."""
        return self.preferred + self.chain.expected()

    def step(self, action: str) -> Reply:
        """Grade `action` (style + digits, without the end-of-action token) and move on one turn."""
        styled = len(action) >= 1 and action[0] in STYLES
        digits = action[1:] if styled else ""
        weight = (1.0 if action[0] == self.preferred else OFF_STYLE_WEIGHT) if styled else 0.0
        marks = self.chain.grade(digits)
        reply = self.chain.step(digits)
        self.credit += weight * sum(marks)
        if reply.done:
            return Reply("", True, self.credit / self.chain.total_terms, reply.correct and weight == 1.0)
        return Reply(reply.observation, False, None, reply.correct and weight == 1.0)

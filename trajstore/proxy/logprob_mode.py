"""What the upstream's log-probs are the log-probs of, learnt once and stored with every action
span the proxy records (span field ``logprob_mode``, :data:`trajstore.schema.LOGPROB_MODES`).

The proxy never guesses it. In order:

1. ``traj serve`` says it in ``GET /v1/models`` (each model's ``logprob_mode``): the proxy asks at
   start-up, and again before recording a call while the upstream has not answered yet.
2. vLLM and SGLang do not report it: ``--logprob-mode`` says what the engine was started with.
   vLLM's default ``--logprobs-mode`` is ``raw_logprobs`` (the model's log-softmax before the
   temperature and any truncation: ``raw``); ``--logprobs-mode processed_logprobs`` gives the
   log-probs of the distribution the token was drawn from (``processed``). SGLang reports the
   log-probs after the temperature and before top-k / top-p / min-p (``tempered``; ``raw`` with
   ``SGLANG_RETURN_ORIGINAL_LOGPROB=1``).
3. Neither: the start-up log says so in a warning naming the flag, and action spans are stored
   with ``logprob_mode`` null (not recorded), which ``traj train`` trains as ``processed`` (the
   meaning of every store written before the field existed) and ``traj stats --coverage`` counts.

A flag that contradicts what the upstream reports stops the proxy at start-up.
"""

from __future__ import annotations

import logging
from typing import Any, Final, Literal

import httpx

from trajstore.errors import TrajstoreError
from trajstore.schema import LOGPROB_MODES

log = logging.getLogger("trajstore.proxy")

LogprobModeOption = Literal["auto", "processed", "tempered", "raw"]
"""``traj proxy --logprob-mode``: ``auto`` = what the upstream reports (``traj serve``), else the
mode the engine was started with."""

ENGINE_ADVICE: Final[dict[str, str]] = {
    "vllm": "vLLM does not report it and its default --logprobs-mode is raw_logprobs (before the temperature and "
            "any truncation): start vLLM with --logprobs-mode processed_logprobs and pass --logprob-mode processed "
            "(or --logprob-mode raw for its default)",
    "sglang": "SGLang does not report it; its log-probs are after the temperature and before top-k / top-p / min-p: "
              "pass --logprob-mode tempered (or raw with SGLANG_RETURN_ORIGINAL_LOGPROB=1)",
}
"""What to do when the upstream does not say, per ``--engine``."""


def reported_mode(models: Any) -> str | None:
    """The ``logprob_mode`` a ``GET /v1/models`` answer reports (its first model that has one, or
    the top level), else None.

    Raises:
        TrajstoreError: a mode that is not one of :data:`~trajstore.schema.LOGPROB_MODES`.
    """
    if not isinstance(models, dict):
        return None
    entries = [m for m in models.get("data") or [] if isinstance(m, dict)] + [models]
    for m in entries:
        mode = m.get("logprob_mode")
        if mode is not None:
            if mode not in LOGPROB_MODES:
                raise TrajstoreError(f"the upstream reports logprob_mode {mode!r} in GET /v1/models, not one of "
                                     f"{list(LOGPROB_MODES)}")
            return str(mode)
    return None


class LogprobMode:
    """The mode recorded on every action span (:attr:`mode`; None = not known) and where it came from.

    Args:
        option: ``--logprob-mode`` (``auto`` or a mode).
        engine: ``--engine`` (the advice when nothing is known).
    """

    def __init__(self, option: LogprobModeOption, engine: str):
        self.option = option
        self.engine = engine
        self.mode: str | None = None if option == "auto" else option
        self.source = "unknown" if option == "auto" else "--logprob-mode"
        """``upstream`` (reported), ``--logprob-mode``, or ``unknown``."""
        self.asked = False
        """The upstream answered ``GET /v1/models`` (whether or not it reported a mode)."""

    async def ask(self, client: httpx.AsyncClient, headers: dict[str, str], *, timeout_s: float = 5.0) -> None:
        """Ask the upstream (``GET /v1/models``) unless it already answered; an unreachable one is
        asked again at the next call.

        Raises:
            TrajstoreError: the upstream reports a mode other than ``--logprob-mode``, or an unknown one.
        """
        if self.asked:
            return
        try:
            r = await client.get("/v1/models", headers=headers, timeout=timeout_s)
            body = r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return
        self.asked = True
        reported = reported_mode(body)
        if reported is None:
            return
        if self.option != "auto" and reported != self.option:
            raise TrajstoreError(f"--logprob-mode {self.option} but the upstream reports logprob_mode {reported!r} "
                                 "(GET /v1/models): drop the flag or correct it")
        self.mode, self.source = reported, "upstream"

    def describe(self) -> str:
        """One line for the start-up log."""
        if self.mode is not None:
            via = "reported by the upstream" if self.source == "upstream" else "--logprob-mode"
            return f"action log-probs are recorded as logprob_mode {self.mode} ({via})"
        why = ENGINE_ADVICE.get(self.engine, "pass --logprob-mode")
        where = "the upstream did not answer GET /v1/models yet (asked again at the first call)" if not self.asked \
            else "the upstream does not report it in GET /v1/models"
        return (f"what the upstream's log-probs are is not known: {where}; {why}. Until then action spans are stored "
                "with logprob_mode null, which traj train trains as processed")

    def announce(self) -> None:
        """Log :meth:`describe`: info when the mode is known, a warning when not."""
        if self.mode is not None:
            log.info("%s", self.describe())
        else:
            log.warning("%s", self.describe())

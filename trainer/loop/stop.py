"""Stopping a run on SIGTERM / SIGINT: the first signal lets the current iteration finish and
ends the run as at the end of the data; a second one interrupts it at once."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any

import torch

from trajstore.trainer.loop import distributed as D


class TrainingInterrupted(BaseException):
    """A second SIGTERM / SIGINT: the run stops at once; a publish or checkpoint in progress is
    rolled back (its temporary files removed), the committed ones stay. A BaseException, like
    KeyboardInterrupt, so that no ``except Exception`` swallows it."""


class StopRequest:
    """Graceful stop on SIGTERM / SIGINT (main thread only): the first signal lets the current
    iteration, its records and any publish or checkpoint in progress finish, then the run ends as
    at the end of the data (final checkpoint and publish); a second one raises
    :class:`TrainingInterrupted` at once."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, say: Callable[[str], None] | None = None) -> None:
        """`say` prints the line the first signal answers with (default: straight to stderr's
        file descriptor, which a signal handler may write to while the main thread is printing)."""
        self.requested = threading.Event()
        self.signal_name: str | None = None
        self.say = say or (lambda line: os.write(2, (line + "\n").encode()))
        self.checkpoint_iteration: int | None = None
        """The iteration of the run's newest committed checkpoint (None: none yet)."""
        self.in_progress: Callable[[], str] = lambda: ""
        """What the run is doing when the first signal comes, in words (e.g. ``step 0: critic
        values, micro-batch 1/2 (...)``; empty when unknown)."""
        self.rerun_hint: Callable[[], str] = lambda: "rerun it from the start"
        """What the second signal's message offers when there is no checkpoint."""
        self._old: dict[int, Any] = {}

    def _handle(self, signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.requested.is_set():
            after = (f"--resume continues from the last checkpoint (iteration {self.checkpoint_iteration})"
                     if self.checkpoint_iteration is not None else f"no checkpoint yet: {self.rerun_hint()}")
            raise TrainingInterrupted(f"interrupted by a second {name}: the publish or checkpoint in progress was "
                                      f"rolled back; {after}")
        self.signal_name = name
        self.requested.set()
        doing = self.in_progress()
        self.say(f"{name} received: stopping after the current iteration{f' (now: {doing})' if doing else ''}, "
                 f"then a final checkpoint and publish (a long pass may take minutes); a second {name} interrupts "
                 "at once")

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()

    def agreed(self, env: D.DistEnv) -> bool:
        """Whether any rank was asked to stop (all ranks stop at the same iteration); a single
        process needs no collective and reads no tensor."""
        if not env.distributed:
            return self.requested.is_set()
        flag = torch.tensor([1.0 if self.requested.is_set() else 0.0], device=env.device)
        return float(D.all_reduce_max(flag, env)) > 0

"""The trainer process of ``traj demo`` (``python -m trajstore.trainer.apps.demo train-child``):
train on the store while the demo's agents play, then stop once they are done."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

import torch

from trajstore.trainer.config import TrainConfig
from trajstore.trainer.loop.setup import setup
from trajstore.trainer.loop.train import train
from trajstore.wording import plural

PRODUCERS_DONE_GRACE_S = 10.0
"""Once the demo's agents are done, the trainer stops after this long without new data (every
finished episode is already durable then: ``/finish`` returns after the write)."""


def stop_waiting_when_closed(fd: int, data: Any, grace_s: float = PRODUCERS_DONE_GRACE_S) -> threading.Thread:
    """Let a following trainer wait for data as long as the pipe `fd` is open, then at most `grace_s`.

    A daemon thread reads file descriptor `fd` (the demo's end of the pipe stays open while its
    agents play; it also closes when the demo process dies) and at end of file sets
    ``data.idle_timeout_s`` (the live :class:`~trajstore.trainer.config.DataConfig` of the
    trainer's stream, which reads it at every empty poll) to `grace_s`. It reads the raw
    descriptor: a daemon thread blocked inside ``sys.stdin.buffer.read`` holds the buffer's lock
    and aborts the interpreter at exit ("could not acquire lock for <stdin>"). Returns the thread.
    """

    def watch() -> None:
        while os.read(fd, 4096):
            pass
        data.idle_timeout_s = grace_s

    th = threading.Thread(target=watch, name="demo-producers-watch", daemon=True)
    th.start()
    return th


def train_child(config_path: str, threads: int) -> None:
    """The trainer process of a demo: load the saved config and train while the demo plays."""
    torch.set_num_threads(threads)
    cfg = TrainConfig.from_json(Path(config_path).read_text())
    tr = setup(cfg)
    stop_waiting_when_closed(sys.stdin.fileno(), tr.stream.cfg)
    summary = train(cfg, trainer=tr)
    print(f"trainer done: {plural(summary.iterations, 'iteration')}, {plural(summary.steps, 'policy step')}, "
          f"final version v{summary.version}", flush=True)

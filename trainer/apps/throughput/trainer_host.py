"""The trainer process of ``traj bench throughput`` (``python -m trajstore.trainer.apps.throughput
trainer-host THREADS``): ``traj train --follow``'s library entry (:func:`trajstore.trainer.loop.train.train`)
run for one arm after another in one process, so that torch and transformers are imported once per
suite instead of once per arm (on a loaded 2-core machine that took about a minute each time).

Protocol: each line on stdin is ``CONFIG_PATH<TAB>STATUS_PATH``; the host trains the saved
:class:`~trajstore.trainer.config.TrainConfig` and then writes STATUS_PATH (atomically) as
``{"ok": true, "steps": N, "version": V}`` or ``{"ok": false, "error": "..."}``. It exits at the end
of its stdin."""

from __future__ import annotations

import gc
import json
import os
import sys
import traceback
from pathlib import Path

import torch

from trajstore.trainer.config import TrainConfig
from trajstore.trainer.loop.train import train


def write_status(path: str, status: dict) -> None:
    """`status` as JSON at `path`, appearing whole (a temporary file, then a rename)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    Path(tmp).write_text(json.dumps(status))
    os.replace(tmp, path)


def trainer_host(threads: int) -> None:
    """Train each config named on stdin, in turn (see the module docstring)."""

    torch.set_num_threads(threads)
    print(f"trainer host ready ({threads} torch thread{'s' if threads > 1 else ''})", flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        config_path, status_path = line.rstrip("\n").split("\t")
        try:
            cfg = TrainConfig.from_json(Path(config_path).read_text())
            print(f"training run {cfg.run.run_id}", flush=True)
            summary = train(cfg)
            status = {"ok": True, "steps": summary.steps, "version": summary.version}
        except Exception as e:  # noqa: BLE001 - reported to the suite, which names the log
            traceback.print_exc()
            status = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        gc.collect()
        write_status(status_path, status)
        print(f"run done: {json.dumps(status)}", flush=True)

"""``python -m trajstore.trainer.apps.demo train-child CONFIG THREADS``: the trainer process that
:func:`~trajstore.trainer.apps.demo.run.run_demo` starts (see trainer_child.py)."""

import sys

from trajstore.lifeline import watch_lifeline
from trajstore.trainer.apps.demo.trainer_child import train_child

if __name__ == "__main__":
    watch_lifeline()  # ends with the process that started it
    if len(sys.argv) != 4 or sys.argv[1] != "train-child":
        sys.exit("usage: python -m trajstore.trainer.apps.demo train-child CONFIG.json THREADS (use `traj demo`)")
    train_child(sys.argv[2], int(sys.argv[3]))

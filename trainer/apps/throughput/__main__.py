"""``python -m trajstore.trainer.apps.throughput trainer-host THREADS``: the trainer process that
``traj bench throughput`` starts (see trainer_host.py)."""

import sys

from trajstore.lifeline import watch_lifeline
from trajstore.trainer.apps.throughput.trainer_host import trainer_host

if __name__ == "__main__":
    watch_lifeline()  # ends with the process that started it
    if len(sys.argv) != 3 or sys.argv[1] != "trainer-host":
        sys.exit("usage: python -m trajstore.trainer.apps.throughput trainer-host THREADS (use `traj bench throughput`)")
    trainer_host(int(sys.argv[2]))

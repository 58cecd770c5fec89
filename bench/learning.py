"""Learning benchmark: SAO and its ablations, from a supervised warm start, under simulated
asynchrony, with paired seeds (results in bench/LEARNING.md). Same as
``traj bench learning``; this script only forwards its arguments. Writes to a fresh directory
under the system temp dir (``--scratch`` to choose), never into the checkout.

    python bench/learning.py                       # the default grid (16 min on 2 idle cores)
    python bench/learning.py --preset smoke        # every task and arm once: ~77 CPU-s (bench/LEARNING.md)
    python bench/learning.py --preset calibrate    # the one-off learning-rate calibration
"""

from __future__ import annotations

import sys

from trajstore.cli.main import app

if __name__ == "__main__":
    app(["bench", "learning", *sys.argv[1:]], prog_name="bench/learning.py")

"""Throughput benchmark: what asynchrony buys in wall-clock time to N policy steps on the real
topology (traj serve -> traj proxy -> store -> traj train --follow, a tiny random model, tool
calls of lognormal latency), against a synchronous batch barrier, and what it costs in staleness
(results in bench/RESULTS.md). Same as ``traj bench throughput``; this script only
forwards its arguments. Writes to a fresh directory under the system temp dir (``--scratch`` to
choose), never into the checkout.

    python bench/throughput.py                     # 3 sigmas x 3 seeds x 7 arms
    python bench/throughput.py --preset smoke      # every arm once, 2 short steps
"""

from __future__ import annotations

import sys

from trajstore.cli.main import app

if __name__ == "__main__":
    app(["bench", "throughput", *sys.argv[1:]], prog_name="bench/throughput.py")

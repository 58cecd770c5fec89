"""Learning benchmark: does the pipeline learn? (issue 7; results in bench/LEARNING.md)

Tiny random-init Llama policies (2 layers, d = 64, a 27-token character vocabulary) learn two
multi-turn tasks from scratch through writer SDK -> store -> trainer -> published versions ->
a rollout worker lagging K versions behind, for 8 arms x staleness / learning-rate conditions
x seeds. Same as ``traj bench learning``; this script only forwards its arguments.

    python bench/learning.py                       # the full table (about 13-15 min on 2 cores)
    python bench/learning.py --preset smoke        # one SAO run (seconds)
"""

from __future__ import annotations

import sys

from trajstore.cli.main import app

if __name__ == "__main__":
    app(["bench", "learning", *sys.argv[1:]], prog_name="bench/learning.py")

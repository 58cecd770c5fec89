"""How long ``traj`` takes to answer: the installed entry point against every command imported.

    python bench/startup.py [--rounds 9]

Runs, in fresh processes, ``traj --help``, ``traj --version``, ``traj stats STORE`` and
``traj sql STORE "SELECT count(*) FROM trajectories"`` on a 7-trajectory store written here with
the SDK, each two ways, alternating run by run (launcher, eager, launcher, eager, ...):

- **launcher**: the installed ``traj`` (:mod:`trajstore.cli.launcher`, a command's module imported
  only when it runs);
- **eager**: the same commands through :mod:`trajstore.cli.main`, which imports every command
  module first (what ``traj`` was before the launcher: the baseline).

Printed per command: the median and the best (lowest) wall time and the median CPU time (user +
system of the child process) of each side, and the ratios launcher / eager of the medians. CPU time is what a command costs; wall time
is what a user waits, which on a busy machine is mostly waiting for a core, so the targets
(``traj --help`` under 0.3 s, ``traj stats`` / ``traj sql`` on a small store under 0.7 s, on an
idle machine) are checked against the wall time only when the 1-minute load average is under 1,
and against CPU time otherwise (said in the output). The load average is printed with the figures.

The children write and reuse bytecode (``.pyc``) as an installed package does, in a cache folder
of their own (``PYTHONPYCACHEPREFIX``): with ``PYTHONDONTWRITEBYTECODE`` set, as in some shells and
containers, every run would compile the package's sources again and measure that instead.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trajstore import TrajectoryBuilder, write_trajectories

TARGETS_S = {"help": 0.3, "version": 0.3, "stats": 0.7, "sql": 0.7}
"""Start-up targets on an idle 2-core machine, seconds (wall)."""

EAGER = "import sys; from trajstore.cli.main import app; sys.argv[0] = 'traj'; app()"


def write_small_store(root: Path, n: int = 7) -> str:
    """A store of `n` short trajectories (prompt, action, observation, action, reward)."""
    trajectories = []
    for i in range(n):
        b = TrajectoryBuilder(trajectory_id=f"t{i}", source="sdk")
        b.add_prompt(list(range(8)))
        b.add_action([11, 12, 13], [-0.1, -0.2, -0.3], policy_version=i // 3)
        b.add_observation([20, 21])
        b.add_action([14, 15], [-0.4, -0.5], policy_version=i // 3)
        b.set_reward(float(i % 2))
        trajectories.append(b.finish())
    write_trajectories(str(root), trajectories)
    return str(root)


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Run `argv` to completion; (wall seconds, child CPU seconds). A failing command stops the bench."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {proc.stderr.read().decode()[-500:] if proc.stderr else ''}")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9, help="runs of each side per command (alternated)")
    args = ap.parse_args()
    traj = str(Path(sys.executable).with_name("traj"))
    with tempfile.TemporaryDirectory() as tmp:
        store = write_small_store(Path(tmp) / "store")
        commands = {
            "help": ["--help"], "version": ["--version"], "stats": ["stats", store],
            "sql": ["sql", store, "SELECT count(*) FROM trajectories"],
        }
        sides = {"launcher": [traj], "eager": [sys.executable, "-c", EAGER]}
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        load_before = os.getloadavg()[0]
        results: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for name, rest in commands.items():
            for head in sides.values():  # one untimed run each: page cache, .pyc files
                run_once(head + rest, env)
            for _ in range(args.rounds):
                for side, head in sides.items():
                    results.setdefault((name, side), []).append(run_once(head + rest, env))
    load = os.getloadavg()[0]
    idle = max(load, load_before) < 1.0
    print(f"traj start-up, median of {args.rounds} alternated runs; 1-min load average {load_before:.2f} before, "
          f"{load:.2f} after (targets checked on {'wall' if idle else 'CPU'} time: {'idle' if idle else 'busy'} "
          f"machine)")
    print(f"{'command':<9} {'launcher wall':>13} {'best':>6} {'cpu':>6} {'eager wall':>11} {'best':>6} {'cpu':>6} "
          f"{'ratio wall':>10} {'ratio cpu':>9}  target")
    for name in commands:
        lw, lc = (statistics.median(x) for x in zip(*results[(name, "launcher")], strict=True))
        ew, ec = (statistics.median(x) for x in zip(*results[(name, "eager")], strict=True))
        lb, eb = (min(w for w, _ in results[(name, side)]) for side in ("launcher", "eager"))
        measured = lw if idle else lc
        verdict = "met" if measured < TARGETS_S[name] else "MISSED"
        print(f"{name:<9} {lw:>12.3f}s {lb:>5.3f}s {lc:>5.3f}s {ew:>10.3f}s {eb:>5.3f}s {ec:>5.3f}s {lw / ew:>10.2f} "
              f"{lc / ec:>9.2f}  < {TARGETS_S[name]} s: {verdict}")


if __name__ == "__main__":
    main()

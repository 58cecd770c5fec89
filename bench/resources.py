"""Peak memory and disk of one command, for the resource table of docs/benchmarks.md.

    python bench/resources.py --watch /tmp/s -- traj ingest /tmp/s ../shared/fixtures/trajectories

Runs the command in its own process group and samples, every --interval seconds, the summed
resident set size (RSS) of the command and every process it started (``/proc``; the demo and
the trainer start children, so one process's ``/usr/bin/time`` maximum would undercount), and
the bytes on disk under each --watch directory (allocated blocks, like ``du``). Prints one JSON
object: wall seconds, exit code, peak summed RSS, and peak / final disk per watched directory.
Linux only. Figures are a sampled peak: a spike shorter than the interval can be missed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

from trajstore.lifeline import Stopped, signals_stop


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        out.setdefault(ppid, []).append(int(name))
    return out


def tree_rss_bytes(root: int) -> int:
    """Summed RSS (bytes) of `root` and all its descendants now."""
    kids = _children()
    total, todo, page = 0, [root], os.sysconf("SC_PAGE_SIZE")
    while todo:
        pid = todo.pop()
        todo.extend(kids.get(pid, []))
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * page
        except (OSError, IndexError, ValueError):
            pass
    return total


def disk_bytes(path: str) -> int:
    """Allocated bytes under `path` (st_blocks x 512, hard links counted once); 0 if absent."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--watch", action="append", default=[], help="directory whose disk use to track (repeatable)")
    ap.add_argument("--interval", type=float, default=0.2, help="seconds between memory samples")
    ap.add_argument("--disk-interval", type=float, default=2.0, help="seconds between disk samples")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = ap.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("no command given (put it after --)")
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, start_new_session=True)
    peak_rss, peak_disk = 0, {w: 0 for w in args.watch}
    last_disk = 0.0
    try:
        while proc.poll() is None:
            peak_rss = max(peak_rss, tree_rss_bytes(proc.pid))
            if time.monotonic() - last_disk >= args.disk_interval:
                last_disk = time.monotonic()
                for w in args.watch:
                    peak_disk[w] = max(peak_disk[w], disk_bytes(w))
            time.sleep(args.interval)
    except (KeyboardInterrupt, Stopped):  # the measured command (its own session) stops with this one
        os.killpg(proc.pid, signal.SIGTERM)
        raise
    wall = time.monotonic() - t0
    final = {w: disk_bytes(w) for w in args.watch}
    mib = 2**20
    print(json.dumps({
        "command": " ".join(cmd), "exit_code": proc.returncode, "wall_s": round(wall, 1),
        "peak_rss_mib": round(peak_rss / mib),
        "disk_mib": {w: {"peak": round(max(peak_disk[w], final[w]) / mib, 1), "final": round(final[w] / mib, 1)}
                     for w in args.watch},
    }, indent=2))
    sys.exit(proc.returncode)


if __name__ == "__main__":
    try:
        with signals_stop():
            main()
    except Stopped as e:
        print(f"stopped: {e.message}", file=sys.stderr)
        sys.exit(e.exit_code)

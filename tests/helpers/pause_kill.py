"""Killing a child process at a chosen point of its work: the crash tests of the writer and of
`traj migrate` run a child that prints a line per finished step and, at the chosen point, prints
``paused ...`` and waits; the test SIGKILLs it there (no timing involved)."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable


def kill_at_pause(cmd: list[str], on_line: Callable[[str, list[str]], None]) -> list[str]:
    """Run `cmd`, hand each line before its ``paused`` line to `on_line` (first word, the other
    words), SIGKILL the child at its pause; return the words after ``paused``.

    Raises:
        AssertionError: the child ended without pausing (its exit status and stderr in the message),
            or was not ended by the SIGKILL.
    """
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    try:
        for line in proc.stdout:  # the child waits at its pause: the loop ends at the "paused" line
            word, *rest = line.split()
            if word == "paused":
                os.kill(proc.pid, signal.SIGKILL)
                break
            on_line(word, rest)
        else:
            raise AssertionError(f"the child never paused: {proc.wait()} {proc.stderr.read()}")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=120)
    assert proc.returncode == -signal.SIGKILL
    return rest

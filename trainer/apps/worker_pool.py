"""Worker processes of the benchmark apps that never outlive their parent.

A benchmark's jobs run in a spawn :class:`~concurrent.futures.ProcessPoolExecutor`. Two ways a
parent goes away without its workers noticing, both closed here:

* **SIGTERM / SIGINT** (``pkill``, Ctrl-C): :func:`run_jobs` turns the signal into
  :class:`~trajstore.lifeline.Stopped` in the parent's main thread, cancels the pending jobs, terminates the workers
  and waits for them before the exception goes on (the CLI prints one line and exits 128 + the
  signal's number). Without this, the executor's exit waits for the running jobs, or the default
  SIGTERM action ends the parent alone and the workers train on, reparented to pid 1.
* **SIGKILL** (or any death that runs no clean-up): each worker's initializer starts a daemon
  thread blocked on the *parent sentinel* of :mod:`multiprocessing` (``parent_process().join()``):
  the read end of a pipe whose write end only the parent holds (the spawn start method passes
  each child its own pipe and no other descriptor, so no sibling or grandchild keeps the write end
  open). The kernel closes it when the parent dies, however it dies, so the read returns EOF at
  once and the worker exits with :data:`PARENT_GONE_EXIT`. Polling ``os.getppid()`` would need a
  period and a wake-up per worker; ``PR_SET_PDEATHSIG`` is Linux-only and fires when the *thread*
  that started the worker ends (the executor starts workers from more than one thread).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from typing import Any

from trajstore.lifeline import PARENT_GONE_EXIT, Stopped, signals_stop

POLL_PARENT_S = 1.0
"""Without a multiprocessing parent sentinel (a worker not started by multiprocessing): seconds
between checks of ``os.getppid()``."""


def _exit_when_parent_dies() -> None:
    """Worker initializer: a daemon thread that ends this process as soon as its parent is gone."""
    parent = mp.parent_process()
    start_ppid = os.getppid()

    def watch() -> None:
        if parent is not None:
            parent.join()  # returns when the sentinel pipe reaches EOF: the parent has exited
        else:
            while os.getppid() == start_ppid:
                threading.Event().wait(POLL_PARENT_S)
        os._exit(PARENT_GONE_EXIT)  # no clean-up: nobody collects this worker's result

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def worker_pool(n: int) -> ProcessPoolExecutor:
    """`n` spawn worker processes (a fresh interpreter each: no forked torch state), each of which
    exits within moments of its parent's death (:func:`_exit_when_parent_dies`)."""
    return ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("spawn"), initializer=_exit_when_parent_dies)


def terminate(pool: ProcessPoolExecutor) -> int:
    """Cancel `pool`'s pending jobs, SIGTERM its workers and wait for them; return how many were alive."""
    procs = list((getattr(pool, "_processes", None) or {}).values())  # no public handle before Python 3.14
    pool.shutdown(wait=False, cancel_futures=True)
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        p.terminate()
    for p in alive:
        p.join(10)
        if p.is_alive():
            p.kill()
            p.join()
    return len(alive)


def run_jobs(jobs: list[tuple[str, Callable[..., Any], tuple[Any, ...]]], processes: int,
             on_done: Callable[[str, Any], None]) -> None:
    """Run ``fn(*args)`` for every ``(name, fn, args)`` of `jobs`, in this process (`processes` 1)
    or in a :func:`worker_pool`; call ``on_done(name, result)`` here as each finishes.

    Raises:
        Stopped: SIGTERM or SIGINT arrived; the pending jobs were cancelled and every worker
            was terminated and reaped before it is raised (its message says how many).
        Exception: the first job's exception (the pool is shut down the same way).
    """
    with signals_stop():
        if processes == 1:
            for name, fn, args in jobs:
                on_done(name, fn(*args))
            return
        pool = worker_pool(processes)
        futs: dict[Future[Any], str] = {}
        try:
            futs = {pool.submit(fn, *args): name for name, fn, args in jobs}
            for f in as_completed(futs):
                on_done(futs[f], f.result())
        except Stopped as e:
            left = sum(not f.done() for f in futs)
            n = terminate(pool)
            raise Stopped(e.signum, f"{signal.Signals(e.signum).name}: stopped {n} worker process"
                                    f"{'es' if n != 1 else ''}, {left} job{'s' if left != 1 else ''} not done") from None
        except BaseException:
            terminate(pool)
            raise
        pool.shutdown(wait=True)

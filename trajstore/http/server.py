"""Starting and stopping trajstore's HTTP servers with uvicorn on a socket bound beforehand
(:func:`~trajstore.http.sockets.listening_socket`): :func:`serve` runs a command's server in the
main thread until SIGINT / SIGTERM, :class:`ServerThread` runs one in a thread (tests, benchmarks)."""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Literal

import uvicorn

from trajstore.http.limits import MAX_HEADER_BYTES
from trajstore.http.sockets import listening_socket

GRACEFUL_SHUTDOWN_S = 10.0
"""uvicorn's graceful shutdown (s): after the stop signal, requests in flight may finish this long."""

STARTUP_TIMEOUT_S = 120.0
"""Longest wait for a :class:`ServerThread` to listen (s)."""


def uvicorn_config(app: Any, *, graceful_shutdown_s: float = GRACEFUL_SHUTDOWN_S,
                   lifespan: Literal["auto", "on", "off"] = "auto") -> uvicorn.Config:
    """uvicorn's settings for every trajstore server: no access log (one line per request on the
    request path), warnings only, h11's header limit equal to :data:`~trajstore.http.limits.MAX_HEADER_BYTES`."""
    return uvicorn.Config(app, log_level="warning", access_log=False, lifespan=lifespan,
                          timeout_graceful_shutdown=graceful_shutdown_s,
                          h11_max_incomplete_event_size=MAX_HEADER_BYTES)


class Server(uvicorn.Server):
    """uvicorn's server; `on_stop_signal` sees the first SIGINT / SIGTERM before uvicorn does.

    Args:
        on_stop_signal: called with the server on each stop signal until the server is told to
            exit; returning True means the app takes the stop over (it sets ``should_exit`` itself
            when it is done: ``traj proxy`` first writes its open episodes); False lets uvicorn
            stop as usual.
    """

    def __init__(self, config: uvicorn.Config, *, on_stop_signal: Callable[[Server], bool] | None = None):
        super().__init__(config)
        self.on_stop_signal = on_stop_signal

    def handle_exit(self, sig: int, frame: Any) -> None:
        if not self.should_exit and self.on_stop_signal is not None and self.on_stop_signal(self):
            self._captured_signals.append(sig)  # uvicorn re-raises it once the server has stopped
            return
        super().handle_exit(sig, frame)


def serve(app: Any, sock: socket.socket, *, graceful_shutdown_s: float = GRACEFUL_SHUTDOWN_S,
          lifespan: Literal["auto", "on", "off"] = "auto",
          on_stop_signal: Callable[[Server], bool] | None = None) -> None:
    """Serve `app` on the listening `sock` until SIGINT / SIGTERM (call from the main thread).

    uvicorn re-raises the stop signal once it has stopped: a SIGINT then ends in
    ``KeyboardInterrupt``, while a SIGTERM (a supervisor's stop) ends the process normally, exit 0.
    """
    server = Server(uvicorn_config(app, graceful_shutdown_s=graceful_shutdown_s, lifespan=lifespan),
                    on_stop_signal=on_stop_signal)
    signal.signal(signal.SIGTERM, lambda *_: None)  # what uvicorn's re-raised SIGTERM meets
    server.run(sockets=[sock])


class ServerThread:
    """An ASGI app served by uvicorn on ``127.0.0.1`` (`port`; 0 = any free one) in a daemon
    thread: ``with`` starts it and returns once it listens (``.url``), and stops it."""

    def __init__(self, app: Any, port: int = 0, *, lifespan: Literal["auto", "on", "off"] = "auto"):
        self.sock = listening_socket("127.0.0.1", port, backlog=1024)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn_config(app, lifespan=lifespan))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self.server.started:  # uvicorn has no event for it: its flag, checked often
            if not self.thread.is_alive():
                self.sock.close()
                raise RuntimeError("the server stopped while starting (its log says why)")
            if time.monotonic() > deadline:
                raise RuntimeError(f"server did not start within {STARTUP_TIMEOUT_S:g} s")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=STARTUP_TIMEOUT_S)
        self.sock.close()

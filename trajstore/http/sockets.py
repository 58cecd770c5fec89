"""The listening socket that ``traj proxy``, ``traj view``, ``traj serve`` and the test servers hand to
uvicorn: bound before the app starts, so that a port in use fails at once with one clear error."""

from __future__ import annotations

import errno
import socket

from trajstore.errors import TrajstoreError


class PortInUseError(TrajstoreError, OSError):
    """The TCP port asked for is taken (another server, or an earlier one still running).

    Attributes:
        host: the interface asked for. port: the port asked for.
    """

    def __init__(self, host: str, port: int):
        self.host = host
        self.port = port
        super().__init__(errno.EADDRINUSE, f"port {port} on {host} is already in use")

    def __str__(self) -> str:
        return self.strerror


def listening_socket(host: str, port: int, *, backlog: int = 2048) -> socket.socket:
    """A TCP socket bound to ``(host, port)`` (port 0 = any free one) and listening.

    ``TCP_NODELAY`` is set on it, so every connection it accepts inherits it (Linux). Without
    it, uvicorn (which writes a response's head and body as two sends and, given a socket,
    does not set the option itself) waits for the client's delayed ACK before the body goes
    out: about 40 ms added to every call on loopback, measured with ``bench/proxy.py``.

    Raises:
        PortInUseError: `port` is taken on `host` (an ``OSError``, errno ``EADDRINUSE``).
        OSError: the address cannot be bound otherwise.
    """
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise PortInUseError(host, port) from e
        raise
    return sock

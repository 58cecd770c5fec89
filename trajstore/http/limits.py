"""What one request to trajstore's HTTP servers may send: at most :data:`MAX_HEADERS` headers of at
most :data:`MAX_HEADER_BYTES` together (431 beyond: :class:`trajstore.http.app.HeaderLimits`), and a
body of at most the server's limit (:func:`read_body`, 413 beyond; ``traj proxy --max-request-mb``).

No web framework is imported here: the commands' options read these numbers at start-up."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.requests import Request

MAX_HEADERS = 100
"""Request headers accepted at most (Python's ``http.client`` reads no more either)."""
MAX_HEADER_BYTES = 64 * 1024
"""Bytes of request header names and values accepted at most, together (a long bearer token or
cookie fits many times)."""
DEFAULT_MAX_REQUEST_MB = 32.0
"""Largest request body (MiB) a server accepts unless configured otherwise."""


class BodyError(ValueError):
    """A request body the server refuses: too large (``status`` 413) or not what the route reads (400).

    Attributes:
        status: the HTTP status to answer with.
    """

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, read only as far as `limit` bytes.

    Raises:
        BodyError: 413, the body (or its declared ``Content-Length``) is larger than `limit`.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyError(413, f"request body larger than {limit / 2**20:g} MiB")
    chunks, size = [], 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise BodyError(413, f"request body larger than {limit / 2**20:g} MiB")
        chunks.append(part)
    return b"".join(chunks)

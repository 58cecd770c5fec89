"""Access control of trajstore's HTTP servers: a bearer token (RFC 6750) that every request but
``/health`` must carry when one is configured (``traj proxy --client-token-env``, ``traj view``'s
token). The scheme is matched in any case (``Bearer``, ``bearer``: authentication schemes are
case-insensitive, RFC 9110 section 11.1); the token itself exactly, in constant time."""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterable

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from trajstore.http.errors import error_response

OPEN_PATHS: frozenset[str] = frozenset({"/health"})
"""Paths answered without the token (a supervisor's health check has none)."""

def token_equal(given: str | bytes, token: str) -> bool:
    """Whether `given` is `token` (constant-time; any text, compared as UTF-8)."""
    raw = given if isinstance(given, bytes) else given.encode("utf-8", "surrogatepass")
    return hmac.compare_digest(raw, token.encode("utf-8", "surrogatepass"))


def bearer_credentials(value: bytes) -> bytes | None:
    """The token of an ``Authorization`` header value whose scheme is ``Bearer`` in any case
    (``b"bearer abc"`` -> ``b"abc"``), else None."""
    scheme, _, token = value.strip().partition(b" ")
    token = token.lstrip(b" ")
    return token if scheme.lower() == b"bearer" and token else None


def bearer_token_ok(headers: Iterable[tuple[bytes, bytes]], token: str) -> bool:
    """Whether an ASGI request's raw headers carry ``Authorization: Bearer <token>`` (the first
    ``Authorization`` header counts)."""
    for name, value in headers:
        if name == b"authorization":
            given = bearer_credentials(value)
            return given is not None and token_equal(given, token)
    return False


def refuse_unauthorized(_scope: Scope, _token: str) -> Response:
    """The default answer to a request without the token: 401 in the shared error shape."""
    return error_response(401, "missing or wrong bearer token: send Authorization: Bearer <token>",
                          headers={"WWW-Authenticate": "Bearer"})


class TokenAuth:
    """ASGI middleware: an HTTP request to any path but `open_paths` must carry `token` as a
    bearer token (or pass `accept`); any other gets `refuse`'s answer.

    A plain ASGI middleware: Starlette's ``@app.middleware("http")`` runs every request through
    an extra task and memory streams, about 0.5 ms per call (bench/proxy.py).

    Args:
        token: the token (not empty).
        accept: another way in, given the request's scope and the token (``traj view``'s cookie).
        refuse: the answer to a request without the token (default :func:`refuse_unauthorized`).
    """

    def __init__(self, app: ASGIApp, *, token: str, open_paths: frozenset[str] = OPEN_PATHS,
                 accept: Callable[[Scope, str], bool] | None = None,
                 refuse: Callable[[Scope, str], Response] = refuse_unauthorized):
        if not token:
            raise ValueError("TokenAuth needs a token")
        self.app = app
        self.token = token
        self.open_paths = open_paths
        self.accept = accept
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in self.open_paths and \
                not bearer_token_ok(scope["headers"], self.token) and \
                not (self.accept is not None and self.accept(scope, self.token)):
            await self.refuse(scope, self.token)(scope, receive, send)
            return
        await self.app(scope, receive, send)


"""The application every trajstore HTTP server starts from (:func:`http_app`): FastAPI with the
shared error shape (:mod:`~trajstore.http.errors`), the header limits (:class:`HeaderLimits`, the
numbers in :mod:`~trajstore.http.limits`) and, when a token is configured, the bearer-token check
(:class:`~trajstore.http.auth.TokenAuth`). Each server then adds only its routes."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from fastapi import FastAPI
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from trajstore.http.auth import TokenAuth, refuse_unauthorized
from trajstore.http.errors import error_response, install_error_handlers
from trajstore.http.limits import MAX_HEADER_BYTES, MAX_HEADERS


class HeaderLimits:
    """ASGI middleware: a request with more than `max_headers` headers, or more than
    `max_bytes` of them, is answered 431 before any route or check reads them.

    (uvicorn's HTTP parsers have read them by then; h11's own limit is set to `max_bytes` too,
    :func:`trajstore.http.server.uvicorn_config`.)"""

    def __init__(self, app: ASGIApp, *, max_headers: int = MAX_HEADERS, max_bytes: int = MAX_HEADER_BYTES):
        self.app = app
        self.max_headers = max_headers
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = scope["headers"]
            too_many = len(headers) > self.max_headers
            if too_many or sum(len(k) + len(v) for k, v in headers) > self.max_bytes:
                what = f"more than {self.max_headers} headers" if too_many else \
                    f"headers larger than {self.max_bytes // 1024} KiB together"
                await error_response(431, f"request has {what}")(scope, receive, send)
                return
        await self.app(scope, receive, send)


def http_app(title: str, *, token: str | None = None, lifespan: Callable[[FastAPI], AbstractAsyncContextManager[Any]]
             | None = None, openapi: bool = False, accept: Callable[[Scope, str], bool] | None = None,
             refuse: Callable[[Scope, str], Response] = refuse_unauthorized) -> FastAPI:
    """A FastAPI application with trajstore's HTTP plumbing and no routes.

    Args:
        title: the server's name (``traj proxy``).
        token: every request but ``/health`` must carry it as a bearer token
            (None: no token asked); `accept` and `refuse` as for :class:`~trajstore.http.auth.TokenAuth`.
        lifespan: the app's startup/shutdown context (FastAPI's ``lifespan``).
        openapi: publish ``/openapi.json`` (never the docs pages, which load scripts from a CDN).
    """
    app = FastAPI(title=title, docs_url=None, redoc_url=None, openapi_url="/openapi.json" if openapi else None,
                  lifespan=lifespan)
    install_error_handlers(app)
    if token:
        app.add_middleware(TokenAuth, token=token, accept=accept, refuse=refuse)
    app.add_middleware(HeaderLimits)  # added last, runs first: before the token is even looked at
    return app

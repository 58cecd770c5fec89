"""Credentials at ``traj proxy``'s two edges: the client token every request but ``/health`` must
carry (when one is configured), and the Authorization header sent upstream."""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import Request

from trajstore.proxy.httpio import openai_error
from trajstore.proxy.state import ProxyState


def bearer_token_ok(headers: dict[bytes, bytes], token: str) -> bool:
    """Whether an ASGI request's raw headers carry ``Authorization: Bearer <token>`` (constant-time
    comparison). Shared with ``traj view``, whose optional token works as the proxy's."""
    return hmac.compare_digest(headers.get(b"authorization", b""), f"Bearer {token}".encode())


class ClientAuth:
    """Refuses requests without the client token (when one is configured), ``/health`` aside.

    A plain ASGI middleware: Starlette's ``@app.middleware("http")`` runs every request through
    an extra task and memory streams, about 0.5 ms per call (bench/proxy.py)."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] != "/health":
            st: ProxyState = scope["app"].state.proxy
            if st.client_token:
                if not bearer_token_ok(dict(scope["headers"]), st.client_token):
                    await openai_error(401, "missing or wrong bearer token", "authentication_error")(
                        scope, receive, send)
                    return
        await self.app(scope, receive, send)


def upstream_auth_headers(st: ProxyState, request: Request) -> dict[str, str]:
    """The Authorization header for the upstream: the configured upstream key; without one, a
    client's own Authorization header goes upstream (unless it is the proxy's token)."""
    if st.upstream_headers:
        return st.upstream_headers
    got = request.headers.get("authorization")
    return {"Authorization": got} if got and not st.client_token else {}

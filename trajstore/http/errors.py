"""The one JSON error shape of trajstore's HTTP servers, OpenAI's (what the clients of ``traj proxy``
and ``traj serve`` already parse): ``{"error": {"message", "type", "param", "code"}}``. The routes
answer their own errors with :func:`error_response`; :func:`install_error_handlers` gives the
framework's own (unknown path, wrong method, an exception no route caught) the same shape."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

KIND_BY_STATUS: dict[int, str] = {400: "invalid_request_error", 401: "authentication_error",
                                  403: "permission_error", 404: "not_found_error", 409: "conflict",
                                  413: "invalid_request_error", 431: "invalid_request_error"}
"""The error ``type`` of a status when the route names none (OpenAI's names; ``server_error`` for 5xx)."""


def error_kind(status: int) -> str:
    """The default error ``type`` for HTTP `status`."""
    return KIND_BY_STATUS.get(status, "server_error" if status >= 500 else "invalid_request_error")


def error_response(status: int, message: str, kind: str | None = None, *, param: str | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    """An error in the shared shape.

    Args:
        status: the HTTP status (also the body's ``code``).
        message: one line for the client, naming the field or option at fault.
        kind: the body's ``type`` (default: :func:`error_kind` of `status`).
        param: the request field at fault, if one is.
        headers: extra response headers (e.g. ``WWW-Authenticate``).
    """
    return JSONResponse({"error": {"message": message, "type": kind or error_kind(status), "param": param,
                                   "code": status}}, status_code=status, headers=headers)


async def _http_exception(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    return error_response(exc.status_code, str(exc.detail), headers=exc.headers)


async def _invalid_request(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    first: dict[str, Any] = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(p) for p in first.get("loc", ()))
    return error_response(400, f"{where}: {first.get('msg', 'invalid request')}", param=where or None)


async def _unhandled(_request: Request, exc: Exception) -> JSONResponse:
    # Starlette re-raises the exception after this answer, so uvicorn logs its traceback
    return error_response(500, f"internal error ({type(exc).__name__}); the server's log has the details")


def install_error_handlers(app: FastAPI) -> None:
    """Answer the framework's own errors in the shared shape: an unknown path (404), a wrong
    method (405), a path parameter that does not parse (400), and an exception a route let
    through (500; uvicorn logs the traceback, the client learns only the exception's type)."""
    app.add_exception_handler(HTTPException, _http_exception)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(Exception, _unhandled)

"""The HTTP edges every ``traj proxy`` route shares: request bodies read within the size limit
(``--max-request-mb``), and errors answered in OpenAI's shape."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from trajstore.proxy.jsonio import strict_json_loads


def openai_error(status: int, message: str, kind: str = "invalid_request_error", *, param: str | None = None
                 ) -> JSONResponse:
    """An error in OpenAI's shape (``param``: the request field at fault, if one is)."""
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": status}},
                        status_code=status)


async def read_limited(request: Request, limit: int) -> bytes | None:
    """The request body, or None when it is larger than `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    chunks, size = [], 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            return None
        chunks.append(part)
    return b"".join(chunks)


async def read_json_object(request: Request, limit: int) -> dict[str, Any] | None:
    """The request body as a strict JSON object ({} for an empty body), or None when it is too
    large, not strict JSON, or not an object."""
    raw = await read_limited(request, limit)
    if not raw:
        return {} if raw is not None else None
    try:
        body = strict_json_loads(raw)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None

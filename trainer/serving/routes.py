"""The HTTP routes of ``traj serve``: health and model info (which says what its log-probs are:
:data:`LOGPROB_INFO`), SGLang's weight-reload and cache endpoints, and the two generation
endpoints (answered in :mod:`.completions`)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from trajstore.http.app import http_app
from trajstore.http.errors import error_response
from trajstore.http.json_body import read_json_object
from trajstore.http.limits import BodyError
from trajstore.sampling import PROCESSING_ORDER
from trajstore.trainer.serving.completions import complete
from trajstore.trainer.serving.state import ServeApp

LOGPROB_INFO: dict[str, Any] = {"logprob_mode": "processed", "logprob_processing": list(PROCESSING_ORDER)}
"""What the log-probs ``traj serve`` reports are, in ``/v1/models`` (each model) and ``/model_info``:
``logprob_mode`` (:data:`trajstore.schema.LOGPROB_MODES`: always ``processed``, the log-prob of the
distribution the token was drawn from) and ``logprob_processing``, the steps that build it from the
logits in order (:data:`trajstore.sampling.PROCESSING_ORDER`)."""


def create_app(app_state: ServeApp) -> FastAPI:
    """The FastAPI application of ``traj serve`` around a ready :class:`ServeApp`."""
    # /openapi.json stays published, as it always was
    api = http_app("traj serve", openapi=True)
    st = app_state

    @api.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "weight_version": st.engine.version}

    @api.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": st.model_name, "object": "model", "created": 0,
                                            "owned_by": "trajstore", "max_model_len": st.max_model_len,
                                            **LOGPROB_INFO}]}

    @api.get("/model_info")
    async def model_info() -> dict[str, Any]:
        return {"model_path": st.cfg.model, "tokenizer_path": st.cfg.tokenizer or st.cfg.model,
                "is_generation": True, "weight_version": st.engine.version, **LOGPROB_INFO}

    @api.post("/flush_cache")
    async def flush_cache() -> dict[str, Any]:
        # Nothing to flush: KV caches live for one batch only and are recomputed after a reload.
        return {"success": True, "message": "traj serve keeps no prefix cache across requests"}

    @api.post("/update_weights_from_disk")
    async def update_weights(request: Request) -> JSONResponse:
        # The engine queues the reload; the loading itself is trajstore.trainer.serving.weights.
        try:
            body = await read_json_object(request, st.max_request_bytes)
        except BodyError as e:
            return error_response(e.status, str(e))
        path = body.get("model_path")
        if not isinstance(path, str) or not path:
            return error_response(400, "body must be a JSON object with a model_path string", param="model_path")
        mode = body.get("mode") or ("abort" if body.get("abort_all_requests") else "drain")
        if mode not in ("drain", "abort", "retract"):
            return error_response(400, f"mode must be drain, abort or retract, got {mode!r}")
        version = body.get("weight_version")
        fut = st.engine.reload(path, version=None if version is None else str(version), mode=mode)
        result = await asyncio.wrap_future(fut)
        return JSONResponse(result, status_code=200 if result["success"] else 400)

    @api.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        return await complete(st, request, chat=True)

    @api.post("/v1/completions")
    async def completions(request: Request) -> Any:
        return await complete(st, request, chat=False)

    return api

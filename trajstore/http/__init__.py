"""The HTTP layer that ``traj proxy``, ``traj view`` and ``traj serve`` share, so that each server
keeps only its routes: the application (:mod:`~trajstore.http.app`: FastAPI with the pieces below),
the bearer token (:mod:`~trajstore.http.auth`), the JSON error shape (:mod:`~trajstore.http.errors`),
header and body limits (:mod:`~trajstore.http.limits`), strict JSON request bodies
(:mod:`~trajstore.http.json_body`), OpenAI's request fields as vLLM types them
(:mod:`~trajstore.http.openai_fields`), the listening socket (:mod:`~trajstore.http.sockets`) and
uvicorn started and stopped (:mod:`~trajstore.http.server`).

Torch-free. Every module but :mod:`~trajstore.http.sockets` and :mod:`~trajstore.http.limits` needs
the web extras (FastAPI / Starlette, uvicorn): import the modules themselves, this package imports
nothing.
"""

"""The ``traj proxy`` ASGI application: :func:`create_app` wires the shared state
(:mod:`~trajstore.proxy.state`) to the routes (:mod:`~trajstore.proxy.calls`,
:mod:`~trajstore.proxy.episodes`, :mod:`~trajstore.proxy.info`); :func:`run_proxy` serves it.
See :mod:`trajstore.proxy` for the whole picture.

Routes (each ``/v1/...`` route also exists under ``/s/<session>/v1/...``, and the model-call
routes under ``/s/<session>/l/<lineage>/v1/...``, which names the call's lineage as the
``X-Lineage-Id`` header does: :mod:`~trajstore.proxy.lineage`):

* ``POST /v1/chat/completions``, ``POST /v1/completions`` (streaming or not), ``GET /v1/models``;
* ``POST /s/<session>/reward`` ``{"reward": float, "raw": any}``;
* ``POST /s/<session>/finish`` ``{"status": "completed", "reward": ..., "prompt_id": ..., "group_id": ...,
  "metadata": {...}}``: ends the episode and returns once its trajectories are durable in the
  store (``prompt_id`` / ``group_id`` may also come as ``X-Prompt-Id`` / ``X-Group-Id`` headers on
  the session's first call; ``group_id`` is a GRPO group of rollouts of one prompt, none by
  default), with their ids, final status, the policy version of each action (``policy_versions``; the oldest
  for a mixed-version call, whose newest is in ``policy_versions_max``, else null), the token count, the
  calls it stopped waiting for (``calls_in_flight``, after ``--finish-wait``) and the trajectories
  written earlier at idle evictions (``evicted_parts``);
* ``GET /proxy/stats``: counters (``mixed_version_calls`` and ``lineages`` among them), ended
  episodes by lineage count (``lineages_per_episode``), per-version counts of the calls made by
  one version, open sessions, weight sync state;
* ``POST /proxy/policy_version`` ``{"version": N}``: the upstream was reloaded by hand and now
  serves version N (refused with ``--follow-run``, which loads versions itself);
* ``GET /health``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from fastapi import FastAPI

from trajstore.http.app import http_app
from trajstore.http.server import Server, serve
from trajstore.http.sockets import listening_socket
from trajstore.proxy.calls import chat_completions, completions
from trajstore.proxy.config import ProxyConfig
from trajstore.proxy.control import set_policy_version
from trajstore.proxy.episodes import finish_episode, set_episode_reward
from trajstore.proxy.info import health, models, stats
from trajstore.proxy.shutdown import begin_shutdown, shut_down
from trajstore.proxy.state import ProxyState


def create_app(cfg: ProxyConfig) -> FastAPI:
    """The proxy application for `cfg` (state is built when the server starts; the client token,
    ``cfg.client_token_env``, is read now)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        st = ProxyState(cfg)
        app.state.proxy = st
        app.state.loop = asyncio.get_running_loop()
        await st.start()
        try:
            yield
        finally:
            await shut_down(st)

    # /openapi.json stays published, as it always was (the routes' comments are not docstrings for it)
    app = http_app("traj proxy", token=cfg.client_token(), lifespan=lifespan, openapi=True)
    app.add_api_route("/health", health, methods=["GET"])
    app.add_api_route("/proxy/stats", stats, methods=["GET"])
    app.add_api_route("/proxy/policy_version", set_policy_version, methods=["POST"])
    app.add_api_route("/v1/models", models, methods=["GET"])
    app.add_api_route("/s/{session}/v1/models", models, methods=["GET"])
    app.add_api_route("/s/{session}/l/{lineage}/v1/models", models, methods=["GET"])
    # The model-call routes are plain Starlette routes: FastAPI's request handler (dependency
    # solving, exit stacks) has nothing to inject here and costs ~0.1-0.2 ms a call (bench/proxy.py).
    for name, call in (("chat/completions", chat_completions), ("completions", completions)):
        app.add_route(f"/v1/{name}", call, methods=["POST"], include_in_schema=False)
        app.add_route(f"/s/{{session}}/v1/{name}", call, methods=["POST"], include_in_schema=False)
        app.add_route(f"/s/{{session}}/l/{{lineage}}/v1/{name}", call, methods=["POST"], include_in_schema=False)
    app.add_api_route("/s/{session}/reward", set_episode_reward, methods=["POST"])
    app.add_api_route("/s/{session}/finish", finish_episode, methods=["POST"])
    return app


UVICORN_SHUTDOWN_S = 10.0
"""uvicorn's graceful shutdown timeout (s). The proxy tells uvicorn to stop only once its own
shutdown (:func:`~trajstore.proxy.shutdown.drain`) has answered or cut every call and written
every episode, so uvicorn decides about no call: this only bounds closing connections (a client
that never reads the end of its stream)."""


def _drain_first(app: FastAPI) -> Callable[[Server], bool]:
    """The stop-signal hook: the proxy's shutdown runs first, with the server still answering (503
    to new calls, the calls in flight finishing), and tells uvicorn to stop once it is done; a
    second signal cuts the calls in flight at once. uvicorn's own graceful shutdown would wait for
    the calls in flight, cancel them at its timeout and only then let the open episodes be
    written, which a supervisor's SIGKILL often came before."""

    def hook(server: Server) -> bool:
        st: ProxyState | None = getattr(app.state, "proxy", None)
        loop = getattr(app.state, "loop", None)
        if st is None or loop is None:  # not started yet: nothing to write
            return False
        loop.call_soon_threadsafe(begin_shutdown, st, lambda: setattr(server, "should_exit", True))
        return True

    return hook


def run_proxy(cfg: ProxyConfig, *, on_ready: Callable[[str, int], object] | None = None) -> None:
    """Serve until SIGINT / SIGTERM; then the proxy takes no new calls, writes open episodes as
    ``aborted`` at once, lets the calls in flight finish for ``cfg.shutdown_grace_s`` and cuts the
    rest (:func:`~trajstore.proxy.shutdown.begin_shutdown`), and only then stops the server. A second signal
    cuts the calls in flight at once. A SIGTERM ends the process with exit 0 once everything is
    written.

    Args:
        on_ready: called with the bound ``(host, port)`` once the socket listens.

    Raises:
        PortInUseError: ``cfg.port`` is taken (an ``OSError``).
    """
    logging.basicConfig(level=logging.INFO, format="traj proxy: %(message)s")
    for noisy in ("httpx", "httpcore"):  # one INFO line per upstream request: 0.1-0.2 ms each, on the request path
        logging.getLogger(noisy).setLevel(logging.WARNING)
    app = create_app(cfg)
    sock = listening_socket(cfg.host, cfg.port)
    host, port = sock.getsockname()[:2]
    if on_ready is not None:
        on_ready(host, port)
    serve(app, sock, graceful_shutdown_s=UVICORN_SHUTDOWN_S, on_stop_signal=_drain_first(app))

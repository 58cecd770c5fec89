"""The ``traj view`` web app (Starlette): the list page (``/``), a trajectory's transcript
(``/t/<trajectory_id>``) and its Tokens view (``?view=tokens``), rendered on the server from
templates (no build step, nothing fetched from elsewhere), plus ``/api/list`` (the same page as
JSON) and ``/health``. Requests share one :class:`~trajstore.view.index.StoreIndex`.

An optional token guards every route but ``/health`` as ``traj proxy``'s does
(``Authorization: Bearer <token>``, :mod:`trajstore.http.auth`); a browser opens
``/?token=<token>`` once and keeps it in a cookie."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import Scope

from trajstore.http.app import http_app
from trajstore.http.auth import token_equal
from trajstore.http.errors import error_response
from trajstore.http.server import serve
from trajstore.http.sockets import listening_socket
from trajstore.view.config import ViewConfig
from trajstore.view.decode import Decoder
from trajstore.view.index import StoreIndex
from trajstore.view.listing import EPISODE_SORTS, FLAGS, SORTS, ListQuery, ListQueryError, list_page
from trajstore.view.render import colourings, fmt, tokens_html, trajectory_url
from trajstore.view.trajectory import TrajectoryNotFound, load_trajectory

HERE = Path(__file__).parent
TOKEN_COOKIE = "traj_view_token"
TOKEN_COOKIE_BYTES = TOKEN_COOKIE.encode()


def _cookie_ok(scope: Scope, token: str) -> bool:
    """The browser's way in: the cookie that ``/?token=<token>`` set."""
    for name, value in scope["headers"]:
        if name == b"cookie":
            for part in value.split(b";"):
                key, _, given = part.strip().partition(b"=")
                if key == TOKEN_COOKIE_BYTES and token_equal(given, token):  # bytes as sent: UTF-8 for a browser
                    return True
    return False


def _token_in_url(scope: Scope, token: str) -> Response:
    """A request without the token: ``?token=<token>`` sets the cookie and redirects to the same
    page without it (the token leaves the URL); anything else is refused (401)."""
    request = Request(scope)
    given = request.query_params.get("token")
    if given is None or not token_equal(given, token):
        return error_response(401, "missing or wrong token: send Authorization: Bearer <token>, or open "
                                   "/?token=<token> once in the browser", headers={"WWW-Authenticate": "Bearer"})
    rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
    response = RedirectResponse(scope["path"] + (f"?{urlencode(rest)}" if rest else ""), status_code=303)
    response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict")
    return response


def create_app(cfg: ViewConfig, *, index: StoreIndex | None = None) -> FastAPI:
    """The app over ``cfg.store`` (the index is built now unless given).

    Raises:
        StoreError, AuditError: see :class:`~trajstore.view.index.StoreIndex`.
    """
    index = index or StoreIndex(cfg)
    decoder = Decoder(cfg.tokenizer)
    # The routes are plain functions: Starlette runs them in its thread pool, so a slow page (a
    # tokenizer loading, a predicate read from the shards) never blocks the others or /health;
    # the index serialises their queries.
    # loading a tokenizer takes seconds: the ones the store uses most are loaded in the background
    threading.Thread(target=decoder.warm, args=([n for n, _ in index.snapshot.tokenizers[:3]],),
                     name="traj-view-tokenizers", daemon=True).start()
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.filters["fmt"] = fmt
    templates.env.globals.update(trajectory_url=trajectory_url, FLAGS=FLAGS, SORTS=SORTS, zip=zip,
                                 EPISODE_SORTS=EPISODE_SORTS)

    def list_context(request: Request) -> tuple[ListQuery | None, dict[str, Any]]:
        try:
            q = ListQuery.from_params(request.query_params)
        except ListQueryError as e:
            return None, {"error": str(e)}
        return q, {"page": list_page(index, q)}

    def home(request: Request) -> Response:
        if request.query_params.get("reload"):
            index.refresh()
            return RedirectResponse("/", status_code=303)
        q, ctx = list_context(request)
        q = q or ListQuery()
        return templates.TemplateResponse(request, "list.html", {
            "q": q, "snap": index.snapshot, "store": cfg.store, "where": cfg.where, **ctx,
            "link": lambda **changes: "/?" + urlencode(q.params(**changes))})

    def api_list(request: Request) -> Response:
        q, ctx = list_context(request)
        if q is None:
            return error_response(400, ctx["error"])
        page = ctx["page"]
        if page.error:
            return error_response(400, page.error)
        rows = [{c: (v.isoformat() if isinstance(v, datetime) else v) for c, v in zip(page.columns, r)}
                for r in page.rows]
        return JSONResponse({"total": page.total, "page": page.page, "pages": page.pages, "rows": rows,
                             "elapsed_s": page.elapsed_s})

    def trajectory(request: Request) -> Response:
        tid = request.path_params["trajectory_id"]
        view = request.query_params.get("view", "transcript")
        run = request.query_params.get("run") or None
        if view not in ("transcript", "tokens"):
            return PlainTextResponse(f"unknown view {view!r} (transcript or tokens)", status_code=400)
        if run is not None and run not in index.snapshot.runs:
            return PlainTextResponse(f"run {run!r} is not a run of {cfg.store}", status_code=404)
        try:
            page = load_trajectory(index, decoder, tid, run=run, with_tokens=view == "tokens")
        except TrajectoryNotFound as e:
            return HTMLResponse(templates.get_template("missing.html").render(
                trajectory_id=tid, store=cfg.store, unreadable=e.unreadable), status_code=404)
        numbers = json.dumps(page.numbers, separators=(",", ":"), allow_nan=False) if view == "tokens" else "{}"
        ids = json.dumps(page.token_ids, separators=(",", ":")) if view == "tokens" else "[]"
        return templates.TemplateResponse(request, "trajectory.html", {
            "p": page, "view": view, "store": cfg.store, "numbers_json": numbers, "ids_json": ids,
            "colourings": colourings(page), "tokens_html": tokens_html(page) if view == "tokens" else "",
            "metadata_json": json.dumps(page.metadata, indent=2, ensure_ascii=False) if page.metadata else None})

    def health(_request: Request) -> Response:
        return JSONResponse({"ok": True, "trajectories": index.snapshot.trajectories})

    app = http_app("traj view", token=cfg.token, accept=_cookie_ok, refuse=_token_in_url)
    for path, page in (("/", home), ("/api/list", api_list), ("/health", health),
                       ("/t/{trajectory_id:path}", trajectory)):
        app.add_route(path, page, methods=["GET"])
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")
    app.state.index = index
    return app


def run_view(cfg: ViewConfig, *, on_ready: Callable[[str, int, StoreIndex], object] | None = None) -> None:
    """Bind the port, build the index, then serve until SIGINT / SIGTERM (exit 0). Call from the
    main thread.

    Args:
        on_ready: called with the bound ``(host, port)`` and the index once the socket listens.

    Raises:
        PortInUseError: ``cfg.port`` is taken (raised before the index is built; an ``OSError``).
    """
    sock = listening_socket(cfg.host, cfg.port)  # a port in use fails at once, not after indexing
    try:
        index = StoreIndex(cfg)
        app = create_app(cfg, index=index)
    except BaseException:
        sock.close()
        raise
    host, port = sock.getsockname()[:2]
    if on_ready is not None:
        on_ready(host, port, index)
    serve(app, sock)

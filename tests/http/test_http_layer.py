"""trajstore/http: the layer traj proxy, traj view and traj serve share, through an app of its own
(the servers' own routes are tested in tests/proxy and tests/view): the bearer token (its scheme in
any case), one JSON error shape for every refusal, header and body limits, and request bodies
that are strict JSON, or a 400 naming why (never a 500)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi")

from starlette.requests import Request  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from trajstore.http.app import http_app  # noqa: E402
from trajstore.http.auth import bearer_credentials, token_equal  # noqa: E402
from trajstore.http.errors import error_response  # noqa: E402
from trajstore.http.json_body import MAX_JSON_DEPTH, read_json_object, strict_json_loads  # noqa: E402
from trajstore.http.limits import MAX_HEADER_BYTES, MAX_HEADERS, BodyError  # noqa: E402
from trajstore.http.server import ServerThread  # noqa: E402

LIMIT = 1000  # bytes of body the echo route reads at most


def _app(token: str | None = None):
    app = http_app("test", token=token)

    async def echo(request: Request):
        try:
            return {"got": await read_json_object(request, LIMIT)}
        except BodyError as e:
            return error_response(e.status, str(e))

    async def boom(_request: Request):
        raise RuntimeError("a bug")

    app.add_api_route("/echo", echo, methods=["POST"])
    app.add_api_route("/boom", boom, methods=["GET"])
    app.add_api_route("/health", lambda: {"ok": True}, methods=["GET"])
    return app


def _error(r) -> dict:
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    assert body["error"]["code"] == r.status_code
    return body["error"]


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
def test_the_bearer_scheme_is_matched_in_any_case(scheme):
    # RFC 9110 section 11.1: an authentication scheme is case-insensitive; "bearer <token>" was a 401
    c = TestClient(_app(token="s3cret"))
    assert c.post("/echo", json={}, headers={"Authorization": f"{scheme} s3cret"}).status_code == 200
    assert c.post("/echo", json={}, headers={"Authorization": f"{scheme}  s3cret"}).status_code == 200


def test_a_missing_or_wrong_token_is_a_401_in_the_error_shape():
    c = TestClient(_app(token="s3cret"))
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret"},
                    {"Authorization": "Bearer S3CRET"}, {"Authorization": "Bearers3cret"}, {"Authorization": "Bearer"}):
        r = c.post("/echo", json={}, headers=headers)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", headers
        assert _error(r)["type"] == "authentication_error"
    assert c.get("/health").status_code == 200  # a supervisor's check needs no token


def test_token_comparison_takes_any_text():
    assert bearer_credentials(b"bearer abc") == b"abc" and bearer_credentials(b"Basic abc") is None
    assert token_equal("caf\u00e9", "caf\u00e9") and not token_equal("caf\u00e9", "cafe")  # no TypeError on non-ASCII
    assert not token_equal(b"\xff", "x")


def test_the_frameworks_own_errors_have_the_shape():
    c = TestClient(_app(), raise_server_exceptions=False)
    assert _error(c.get("/nowhere"))["type"] == "not_found_error"
    assert c.get("/echo").status_code == 405 and _error(c.get("/echo"))
    r = c.get("/boom")
    assert r.status_code == 500 and _error(r)["message"] == ("internal error (RuntimeError); the server's log has the "
                                                              "details")  # nothing of the exception's text


def test_too_many_or_too_large_headers_are_a_431():
    c = TestClient(_app())
    many = [(f"x-h{i}", "v") for i in range(MAX_HEADERS + 1)]
    r = c.post("/echo", json={}, headers=many)
    assert r.status_code == 431 and "more than 100 headers" in _error(r)["message"]
    r = c.post("/echo", json={}, headers={"x-big": "v" * MAX_HEADER_BYTES})
    assert r.status_code == 431 and "larger than 64 KiB" in _error(r)["message"]
    assert c.post("/echo", json={}, headers={"x-big": "v" * 8000}).status_code == 200


def test_a_body_over_the_limit_is_a_413_declared_or_not():
    c = TestClient(_app())
    assert c.post("/echo", content=b"{" + b" " * LIMIT + b"}").status_code == 413

    def chunks():  # no Content-Length: chunked, counted as it arrives
        yield b"{"
        yield b" " * LIMIT
        yield b"}"

    r = c.post("/echo", content=chunks())
    assert r.status_code == 413 and "larger than" in _error(r)["message"]


@pytest.mark.parametrize(("raw", "why"), [
    (b'{"a": NaN}', "NaN is not JSON"),
    (b'{"a": 1e400}', "out of the float range"),
    (b'{"a": "\\ud800"}', "lone UTF-16 surrogate"),
    (b'{"\\udfff": 1}', "lone UTF-16 surrogate"),  # a key too
    (b'{"a": "\xed\xa0\x80"}', "not UTF-8"),  # a surrogate encoded as UTF-8 bytes
    (b'{"a": "\xff"}', "not UTF-8"),
    (b"[1]", "a JSON array"),
    (b"", "Expecting value"),
])
def test_a_body_that_is_not_a_strict_json_object_is_a_400_saying_why(raw, why):
    r = TestClient(_app()).post("/echo", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 400 and why in _error(r)["message"], r.text


def test_nesting_is_bounded_and_a_100k_deep_body_is_a_400():
    # 100,000 nested arrays made Python's parser raise RecursionError: a 500
    deep = b"[" * 100_000 + b"]" * 100_000
    for raw in (deep, b'{"a": ' + b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH + b"}"):
        with pytest.raises(ValueError, match=f"nested deeper than {MAX_JSON_DEPTH} levels"):
            strict_json_loads(raw)
    ok = b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH
    assert strict_json_loads(ok) is not None
    # many containers side by side are not deep
    assert len(strict_json_loads(json.dumps({"m": [{"k": [1]} for _ in range(5000)]}))["m"]) == 5000
    with ServerThread(_app()) as srv:  # a real server: the body goes through uvicorn's parser too
        import httpx

        r = httpx.post(f"{srv.url}/echo", content=b'{"a": ' + b"[" * 400 + b"]" * 400 + b"}", timeout=30)
        assert r.status_code == 400 and "nested deeper" in _error(r)["message"], r.text


def test_what_strict_json_keeps():
    assert strict_json_loads('{"e": "\\ud83d\\ude00", "n": 123456789012345678901234567890}') == {
        "e": "\U0001f600", "n": 123456789012345678901234567890}  # a surrogate pair is a character; big ints stay

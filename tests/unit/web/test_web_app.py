"""The shared web stack in process (Starlette's test client): common endpoints, JSON errors, auth."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tidelog.observability.registry import Registry
from tidelog.web.app import create_app
from tidelog.web.auth import TokenFileError, parse_tokens
from tidelog.web.errors import ApiError, unavailable


async def echo(request: Request) -> Response:
    return JSONResponse({"principal": request.state.principal if hasattr(request.state, "principal") else None,
                         "body": len(await request.body())})


async def busy(request: Request) -> Response:
    raise unavailable("full", retry_after_s=2)


async def broken(request: Request) -> Response:
    raise RuntimeError("boom")


class InProcess:
    """Requests straight into the ASGI app (no socket), one event loop per call."""

    def __init__(self, app: Any) -> None:
        self.transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        async def call() -> httpx.Response:
            async with httpx.AsyncClient(transport=self.transport, base_url="http://test") as http:
                return await http.request(method, url, **kwargs)
        return asyncio.run(call())

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)


def client(tokens: dict[str, str] | None = None, ready: bool = True) -> InProcess:
    routes = [Route("/echo", echo, methods=["POST"]), Route("/busy", busy), Route("/broken", broken)]
    app = create_app(routes, registry=Registry(), readiness=[("things", lambda: (ready, "" if ready else "not yet"))],
                     tokens=tokens)
    return InProcess(app)


def test_health_and_readiness_say_what_is_missing() -> None:
    assert client().get("/healthz").text == "ok\n"
    assert client().get("/readyz").text == "ok things\n"
    not_ready = client(ready=False).get("/readyz")
    assert (not_ready.status_code, not_ready.text) == (503, "fail things: not yet\n")


def test_every_error_is_json_with_a_code() -> None:
    web = client()
    assert web.get("/nowhere").json()["error"]["code"] == "NOT_FOUND"
    assert web.get("/echo").json()["error"]["code"] == "METHOD_NOT_ALLOWED"
    full = web.get("/busy")
    assert (full.status_code, full.headers["retry-after"], full.json()["error"]["retryAfterSeconds"]) == (503, "2", 2)
    crash = web.get("/broken")
    assert crash.status_code == 500
    assert crash.json() == {"error": {"code": "INTERNAL_ERROR", "message": "internal error; see the server's log"}}


def test_metrics_count_requests_by_route_template() -> None:
    web = client()
    web.post("/echo", content=b"abc")
    web.get("/nowhere")
    text = web.get("/metrics").text
    assert 'http_requests_total{route="/echo",method="POST",status="200"} 1' in text
    assert 'http_requests_total{route="other",method="GET",status="404"} 1' in text


def test_bearer_token_maps_to_a_principal_and_probes_stay_open() -> None:
    web = client({"t0k": "User:alice"})
    assert web.get("/healthz").status_code == 200
    refused = web.post("/echo", content=b"x" * 100_000)
    assert (refused.status_code, refused.headers["www-authenticate"]) == (401, "Bearer")
    assert web.post("/echo", headers={"authorization": "Basic t0k"}).status_code == 401
    assert web.post("/echo", headers={"authorization": "Bearer t0k"}).json() == {"principal": "User:alice", "body": 0}


@pytest.mark.parametrize(("text", "fragment"), [("tok", "expected"), ("tok alice", "expected"),
                                                 ("a User:x\na User:y", "twice")])
def test_tokens_file_that_does_not_parse_is_an_error_naming_the_line(text: str, fragment: str) -> None:
    with pytest.raises(TokenFileError, match=fragment):
        parse_tokens(text)


def test_tokens_file_skips_comments_and_blank_lines() -> None:
    assert parse_tokens("# ops\n\nabc User:ops\n") == {"abc": "User:ops"}


def test_api_error_carries_extra_fields() -> None:
    error = ApiError(421, "NOT_OWNER", "elsewhere", owner="http://b:8080")
    assert error.body() == {"error": {"code": "NOT_OWNER", "message": "elsewhere", "owner": "http://b:8080"}}

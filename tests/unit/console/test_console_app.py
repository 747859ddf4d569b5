"""The console's login gate and assets, in process (httpx over ASGI; the pages used need no broker)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
from starlette.applications import Starlette

from tidelog.console.app import build
from tidelog.console.auth import hash_password
from tidelog.console.config import parse_config


class Client:
    """A blocking face on httpx's ASGI transport: each call runs on a fresh event loop."""

    def __init__(self, app: Starlette) -> None:
        self.app = app
        self.cookies = httpx.Cookies()

    def request(self, method: str, path: str, **kwargs: object) -> httpx.Response:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://console", cookies=self.cookies) as c:
                answer = await c.request(method, path, **kwargs)  # type: ignore[arg-type]
                self.cookies.update(c.cookies)
                return answer
        return asyncio.run(go())

    def get(self, path: str) -> httpx.Response:
        return self.request("GET", path)

    def post(self, path: str, data: dict[str, str]) -> httpx.Response:
        return self.request("POST", path, data=data)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def client_for(props: dict[str, str]) -> Client:
    config = parse_config({"bootstrap.servers": "127.0.0.1:1", "console.request.timeout.ms": "500", **props})
    app, _ = build(config, httpx.AsyncClient(), secret=b"s" * 32)
    return Client(app)


def test_without_a_users_file_a_visitor_gets_a_signed_anonymous_admin_session() -> None:
    with client_for({}) as client:
        page = client.get("/platform")
        assert page.status_code == 200
        assert "anonymous (admin)" in page.text
        assert "tidelog_console=" in page.headers["set-cookie"] and "HttpOnly" in page.headers["set-cookie"]
        assert "No gateway, mirror or governor endpoint is configured" in page.text


def test_with_a_users_file_pages_redirect_to_login_and_apis_answer_401(tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.write_text(f"alice read-only {hash_password('pw', n=2**10)}\n")
    with client_for({"console.users.file": str(users)}) as client:
        page = client.get("/topics?q=x")
        assert page.status_code == 303 and page.headers["location"] == "/login?next=/topics"
        assert client.get("/api/overview").status_code == 401
        assert client.post("/topics", data={"name": "x"}).status_code == 401
        assert client.get("/healthz").status_code == 200  # probes stay open
        login = client.get("/login")
        csrf = login.text.split('name="csrf" value="')[1].split('"')[0]
        done = client.post("/login", data={"user": "alice", "password": "pw", "csrf": csrf, "next": "//evil.example"})
        assert done.status_code == 303 and done.headers["location"] == "/"  # no open redirect
        page = client.get("/platform")
        assert page.status_code == 200 and "alice (read-only)" in page.text


def test_every_asset_is_served_by_the_console_itself() -> None:
    with client_for({}) as client:
        page = client.get("/platform").text
        assert "http://" not in page.split("<main")[0] and "https://" not in page.split("<main")[0]
        assert client.get("/static/console.js").status_code == 200
        assert client.get("/static/console.css").status_code == 200


def test_the_sampler_reports_an_unreachable_cluster_on_readyz() -> None:
    config = parse_config({"bootstrap.servers": "127.0.0.1:1", "console.request.timeout.ms": "300"})
    app, sampler = build(config, httpx.AsyncClient(), secret=b"s" * 32)
    stop = asyncio.Event()

    async def one_poll() -> None:
        task = asyncio.create_task(sampler.run(stop))
        while not sampler.last_error:
            await asyncio.sleep(0.05)
        stop.set()
        await task

    asyncio.run(asyncio.wait_for(one_poll(), 20))
    ready = Client(app).get("/readyz")
    assert ready.status_code == 503 and "fail cluster" in ready.text


def test_a_configured_platform_endpoint_that_is_down_is_shown_as_such() -> None:
    with client_for({"console.gateway.url": "http://127.0.0.1:1"}) as client:
        page = client.get("/platform")
    assert page.status_code == 200
    assert 'id="panel-gateway"' in page.text and "not reachable (ConnectError)" in page.text
    assert ">Platform</a>" in page.text  # the menu shows the page once an endpoint is set

"""Assemble and run the console: the Kafka view, the lag sampler, the pages, the Burrow API, on the
shared web stack (``tidelog.web``: Starlette on hypercorn, ``/healthz``, ``/readyz``, ``/metrics``).

``SessionGate`` is the console's login gate, an ASGI middleware in front of every route: it reads the
session cookie (``auth``), puts the ``Session`` in ``scope["state"]["session"]``, and sends a visitor
without one to ``/login`` (HTML) or answers 401 (``/api/...`` and POSTs). Open without a session:
``/login``, ``/static/...``, the probes, ``/metrics`` and the Burrow API ``/v3/...`` (for alerting and
Prometheus, which do not log in; they show lag figures, never records or settings). Without a password
file, a visitor gets a signed ``anonymous`` admin session cookie on first sight.

Start-up order: the lag sampler's first poll and the chart sampler (``charts``, when metrics
endpoints are configured) run in the background (pages answer at once; lag figures
appear after the first poll), then the listener opens. ``/readyz`` reports ``cluster`` (the last
sampler poll succeeded) and ``sampler`` (at least one poll done).
"""

from __future__ import annotations

import asyncio
import logging
from http.cookies import SimpleCookie

import httpx
from starlette.applications import Starlette
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tidelog.console import messages
from tidelog.console.auth import COOKIE, Authenticator
from tidelog.console.burrow import BurrowApi
from tidelog.console.charts import BrokerCharts
from tidelog.console.config import ConsoleConfig
from tidelog.console.kafka import KafkaView
from tidelog.console.pages import Pages
from tidelog.console.platform import PlatformView
from tidelog.console.sampler import LagSampler
from tidelog.console.scrape import Scraper
from tidelog.observability.registry import Registry
from tidelog.web.app import create_app
from tidelog.web.server import serve

log = logging.getLogger(__name__)
OPEN_PREFIXES = ("/login", "/static/", "/healthz", "/readyz", "/metrics", "/v3/")


class SessionGate:
    def __init__(self, app: ASGIApp, auth: Authenticator) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        cookie = _cookie(scope, COOKIE)
        session = self.auth.session(cookie)
        issued = ""
        if session is None and not self.auth.enabled:
            issued = self.auth.issue("anonymous", "admin")
            session = self.auth.session(issued)
        scope.setdefault("state", {})["session"] = session
        path: str = scope["path"]
        if session is None and not path.startswith(OPEN_PREFIXES):
            await _refuse(scope, send)
            return
        if not issued:
            await self.app(scope, receive, send)
            return

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                value = f"{COOKIE}={issued}; HttpOnly; SameSite=Strict; Path=/"
                message["headers"] = [*message.get("headers", []), (b"set-cookie", value.encode())]
            await send(message)

        await self.app(scope, receive, send_with_cookie)


def _cookie(scope: Scope, name: str) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == b"cookie":
            jar: SimpleCookie = SimpleCookie()
            try:
                jar.load(value.decode("latin-1"))
            except Exception:
                return None
            if name in jar:
                return jar[name].value
    return None


async def _refuse(scope: Scope, send: Send) -> None:
    path: str = scope["path"]
    if scope["method"] == "GET" and not path.startswith("/api/"):
        from urllib.parse import quote
        headers = [(b"location", f"/login?next={quote(path)}".encode()), (b"content-length", b"0")]
        await send({"type": "http.response.start", "status": 303, "headers": headers})
        await send({"type": "http.response.body", "body": b""})
        return
    body = b'{"error": {"code": "UNAUTHORIZED", "message": "log in at /login first"}}'
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 401, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def build(config: ConsoleConfig, http: httpx.AsyncClient, *, secret: bytes | None = None
          ) -> tuple[Starlette, LagSampler]:
    registry = Registry()
    view = KafkaView(config)
    # The sampler gets a client (and so a connection) of its own: a broker answers one connection's
    # requests in order, and a poll's thousands of OffsetFetch and a 10,000-partition ListOffsets
    # would otherwise hold every page's small requests behind them.
    sampler = LagSampler(config, KafkaView(config), lambda positions: messages.timestamp_at(config, positions))
    registry.add_collector(sampler.collect)
    auth = Authenticator(config.users_file, secret, config.session_max_age_s)
    scraper = Scraper(config.metrics_urls)
    charts = BrokerCharts(config, scraper)
    platform = PlatformView(config, view)
    pages = Pages(config, view, sampler, auth, scraper, http, charts, platform)
    burrow = BurrowApi(config.cluster_name, sampler, view)

    def cluster_ready() -> tuple[bool, str]:
        return (not sampler.last_error, sampler.last_error[:200])

    def sampler_ready() -> tuple[bool, str]:
        return (sampler.polls > 0, "no lag poll finished yet")

    app = create_app([*burrow.routes(), *pages.routes()], registry=registry,
                     readiness=[("cluster", cluster_ready), ("sampler", sampler_ready)])
    app.add_middleware(SessionGate, auth=auth)
    app.state.charts = charts
    app.state.platform = platform
    app.state.browsers = pages.browsers
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per scrape otherwise
    if not auth.enabled:
        log.warning("console.users.file is not set: every visitor is an admin (use it on loopback only)")
    return app, sampler


def load_secret(config: ConsoleConfig) -> bytes | None:
    if config.session_secret_file is None:
        return None
    secret = config.session_secret_file.read_bytes().strip()
    if len(secret) < 16:
        raise ValueError(f"{config.session_secret_file}: the session secret must be at least 16 bytes")
    return secret


async def run(config: ConsoleConfig, stop: asyncio.Event) -> None:
    async with httpx.AsyncClient() as http:
        app, sampler = build(config, http, secret=load_secret(config))
        sampling = asyncio.create_task(sampler.run(stop))
        charting = asyncio.create_task(app.state.charts.run(stop, http))
        log.info("console for cluster %s (%s) on %s; client settings %s", config.cluster_name,
                 config.bootstrap_servers, config.listener().url, config.redacted())
        try:
            await serve(app, config.listener(), stop)
        finally:
            stop.set()
            await sampling
            await charting
            app.state.platform.close()
            app.state.browsers.close()

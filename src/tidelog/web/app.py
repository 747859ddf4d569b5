"""``create_app``: the application factory every platform HTTP surface calls.

What every application gets, whatever its own routes:

- ``GET /healthz``: 200 ``ok`` while the process serves HTTP (liveness);
- ``GET /readyz``: 200 when every readiness check passes, else 503; the plain-text body lists each
  check as ``ok NAME`` or ``fail NAME: why`` so that a probe's log says what is missing;
- ``GET /metrics``: the process's registry in Prometheus text format 0.0.4, including
  ``http_requests_total{route,method,status}`` and ``http_request_duration_seconds{route}``;
- JSON errors for everything (``errors``), bearer-token auth when tokens are given (``auth``).

A request whose answer is sent before its body was read (401, 413, 400 on a bad query) has the rest of
its body read and dropped first, up to ``DRAIN_LIMIT`` bytes (``DrainRequestBody``): HTTP/1.1 can then
keep the connection, and hypercorn's HTTP/2 code, which fails the whole connection on data for a
stream already answered, never sees that case.

Request metrics are taken by a pure ASGI middleware (no per-request task or body copy); the
route label is the matched route's path template (``/v1/topics/{topic}/write``), never the raw path,
so that label cardinality stays bounded; unmatched paths count as ``other``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tidelog.observability.registry import Counter, Histogram, Registry
from tidelog.web.auth import BearerAuth
from tidelog.web.cert_principal import PrincipalMapper
from tidelog.web.errors import EXCEPTION_HANDLERS

# A readiness check answers (ok, why-not).
ReadinessCheck = tuple[str, Callable[[], tuple[bool, str]]]
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DRAIN_LIMIT = 64 * 1024 * 1024


class DrainRequestBody:
    """Reads what is left of the request body before the final response message goes out."""

    def __init__(self, app: ASGIApp, limit: int = DRAIN_LIMIT) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        ended = False

        async def receive_tracking() -> Message:
            nonlocal ended
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                ended = True
            return message

        async def send_after_drain(message: Message) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body", False) and not ended:
                drained = 0
                while not ended and drained <= self.limit:
                    drained += len((await receive_tracking()).get("body", b""))
            await send(message)

        await self.app(scope, receive_tracking, send_after_drain)


class RequestMetrics:
    """Counts requests by route template, method and status; observes their duration by route."""

    def __init__(self, app: ASGIApp, requests: Counter, duration: Histogram) -> None:
        self.app = app
        self.requests = requests
        self.duration = duration

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_recording(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_recording)
        finally:
            route = scope.get("route")
            label = getattr(route, "path", "other")
            self.requests.inc((label, scope["method"], str(status)))
            self.duration.observe((label,), time.perf_counter() - start)


def create_app(
    routes: Sequence[BaseRoute],
    *,
    registry: Registry,
    readiness: Sequence[ReadinessCheck] = (),
    tokens: dict[str, str] | None = None,
    certificates: PrincipalMapper | None = None,
    lifespan: Callable[[Starlette], AbstractAsyncContextManager[Any]] | None = None,
) -> Starlette:
    """A Starlette app serving ``routes`` plus the common endpoints. ``tokens`` (token -> principal)
    turns bearer authentication on for every path but ``/healthz`` and ``/readyz``; ``certificates``
    maps verified client certificates to principals (``auth``)."""
    requests = registry.counter("http_requests_total", "HTTP requests answered, by route template, method "
                                "and status", ("route", "method", "status"))
    duration = registry.histogram("http_request_duration_seconds", "Time to answer an HTTP request, by "
                                  "route template", ("route",))

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok\n")

    async def readyz(request: Request) -> Response:
        lines, ready = [], True
        for name, check in readiness:
            ok, why = check()
            ready = ready and ok
            lines.append(f"ok {name}" if ok else f"fail {name}: {why}")
        return PlainTextResponse("\n".join(lines) + "\n", status_code=200 if ready else 503)

    async def metrics(request: Request) -> Response:
        return Response(registry.render(), media_type=METRICS_CONTENT_TYPE)

    common = [Route("/healthz", healthz, methods=["GET"]), Route("/readyz", readyz, methods=["GET"]),
              Route("/metrics", metrics, methods=["GET"])]
    middleware = [Middleware(DrainRequestBody), Middleware(RequestMetrics, requests=requests, duration=duration)]
    if tokens is not None or certificates is not None:
        middleware.append(Middleware(BearerAuth, tokens=tokens, certificates=certificates))
    return Starlette(routes=[*common, *routes], middleware=middleware,
                     exception_handlers=dict(EXCEPTION_HANDLERS), lifespan=lifespan)

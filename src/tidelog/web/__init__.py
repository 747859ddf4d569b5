"""The one HTTP stack of tidelog's platform processes (L2; ARCHITECTURE.md, "Platform processes").

Every HTTP surface the platform serves (the gateway's API today; the governor's API and the web
console later) is a Starlette application run by uvicorn or hypercorn, built with the pieces here so that
health, readiness, metrics, JSON errors, authentication and TLS are written once:

- ``errors``: ``ApiError`` and the handlers that turn every failure into one JSON shape,
  ``{"error": {"code": ..., "message": ...}}``, with Kafka's error names where one applies;
- ``app``: ``create_app`` (routes + ``/healthz``, ``/readyz``, ``/metrics`` + error handlers +
  request metrics + optional auth), the application factory each process calls;
- ``auth``: bearer tokens mapped to Kafka principals (``User:alice``), an ASGI middleware;
- ``server``: ``ListenerConfig`` (address, TLS certificate, client-certificate policy) and ``serve``,
  which runs an application on uvicorn (HTTP/1.1, fast) or hypercorn (HTTP/2 too) until a shutdown
  event is set.

Why Starlette, uvicorn and hypercorn (docs/gateway.md says more): Starlette is a small, typed,
actively kept ASGI toolkit with no ORM or template engine to drag along; uvicorn with httptools serves
HTTP/1.1 at about five times hypercorn's requests per second; hypercorn speaks HTTP/2 (h2 over TLS by
ALPN, and h2c) and does TLS and client-certificate checks itself. ``ListenerConfig.server`` picks one
(``auto``: uvicorn without TLS, hypercorn with TLS).

Nothing here knows about Kafka, brokers or the gateway: the package imports only ``observability``.
"""

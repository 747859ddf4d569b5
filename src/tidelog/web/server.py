"""Run an ASGI application on hypercorn: one listener, optional TLS, graceful stop on an event.

``ListenerConfig`` says where and how to listen. With ``certfile`` and ``keyfile`` the listener
speaks TLS and offers HTTP/2 and HTTP/1.1 by ALPN; ``client_auth`` is ``none`` (default),
``requested`` or ``required`` (mutual TLS against ``cafile``). Without TLS, HTTP/1.1 is served and
HTTP/2 is available by prior knowledge or ``Upgrade: h2c``.

``serve(app, listener, stop)`` returns once ``stop`` is set and in-flight requests have finished
(at most ``graceful_timeout_s``); the caller owns the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass
from pathlib import Path

from hypercorn.asyncio.run import worker_serve
from hypercorn.config import Config
from hypercorn.utils import wrap_app
from starlette.types import ASGIApp

log = logging.getLogger(__name__)
CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


@dataclass(frozen=True)
class ListenerConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    certfile: Path | None = None
    keyfile: Path | None = None
    cafile: Path | None = None
    client_auth: str = "none"
    graceful_timeout_s: float = 5.0
    keep_alive_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if (self.certfile is None) != (self.keyfile is None):
            raise ValueError("TLS needs both a certificate file and a key file")
        if self.client_auth not in CLIENT_AUTH:
            raise ValueError(f"client auth must be one of {', '.join(CLIENT_AUTH)}, got {self.client_auth!r}")
        if self.client_auth != "none" and (self.cafile is None or self.certfile is None):
            raise ValueError("client certificates are checked only over TLS, against a CA file")

    @property
    def tls(self) -> bool:
        return self.certfile is not None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    def hypercorn_config(self) -> Config:
        config = Config()
        host = f"[{self.host}]" if ":" in self.host else self.host
        config.bind = [f"{host}:{self.port}"]
        config.graceful_timeout = self.graceful_timeout_s
        config.keep_alive_timeout = self.keep_alive_timeout_s
        config.accesslog = None
        config.errorlog = logging.getLogger("hypercorn.error")
        if self.certfile is not None and self.keyfile is not None:
            config.certfile = str(self.certfile)
            config.keyfile = str(self.keyfile)
            if self.cafile is not None:
                config.ca_certs = str(self.cafile)
            config.verify_mode = CLIENT_AUTH[self.client_auth]
        return config


async def serve(app: ASGIApp, listener: ListenerConfig, stop: asyncio.Event) -> None:
    """Bind (an ``OSError`` such as EADDRINUSE is raised before anything else starts), then serve."""
    config = listener.hypercorn_config()
    sockets = config.create_sockets()
    log.info("HTTP listener on %s", listener.url)
    await worker_serve(wrap_app(app, config.wsgi_max_body_size, "asgi"), config,  # type: ignore[arg-type]
                       sockets=sockets, shutdown_trigger=stop.wait)

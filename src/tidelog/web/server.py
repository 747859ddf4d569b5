"""Run an ASGI application on one listener, optional TLS, graceful stop on an event.

``ListenerConfig`` says where and how to listen. With ``certfile`` and ``keyfile`` the listener
speaks TLS; ``client_auth`` is ``none`` (default), ``requested`` or ``required`` (mutual TLS against
``cafile``).

Two ASGI servers run the same application; ``server`` picks one:

- ``hypercorn``: HTTP/2 and HTTP/1.1 (by ALPN over TLS; without TLS, HTTP/2 by prior knowledge or
  ``Upgrade: h2c``);
- ``uvicorn`` (with httptools, a C parser): HTTP/1.1 only, about four times as many requests per
  second per core (measured: 9,100 against 2,300 requests/s of a Starlette health route on this
  2-core machine), which is what a gateway taking thousands of small writes a second needs;
- ``auto`` (default): uvicorn without TLS (HTTP/2 without TLS is rare), hypercorn with TLS (HTTP/2
  by ALPN is what TLS clients negotiate), uvicorn again when client certificates are asked for:
  hypercorn does not tell the application which certificate a client presented, and the listener
  here adds it to uvicorn's scopes (ASGI's TLS extension, ``client_cert_name``: the subject as
  ``cert_principal.distinguished_name`` writes it), so that ``auth`` can map it to a principal.

``serve(app, listener, stop)`` returns once ``stop`` is set and in-flight requests have finished
(at most ``graceful_timeout_s``); the caller owns the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import uvicorn
from hypercorn.asyncio.run import worker_serve
from hypercorn.config import Config
from hypercorn.utils import wrap_app
from starlette.types import ASGIApp
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from tidelog.web.cert_principal import distinguished_name

log = logging.getLogger(__name__)
CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
SERVERS = ("auto", "uvicorn", "hypercorn")


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
    server: str = "auto"

    def __post_init__(self) -> None:
        if self.server not in SERVERS:
            raise ValueError(f"the HTTP server must be one of {', '.join(SERVERS)}, got {self.server!r}")
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

    @property
    def server_name(self) -> str:
        """The server this listener runs on: ``server``, with ``auto`` decided by TLS."""
        if self.server != "auto":
            return self.server
        return "hypercorn" if self.tls and self.client_auth == "none" else "uvicorn"

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
    if listener.server_name == "uvicorn":
        await _serve_uvicorn(app, listener, stop)
        return
    config = listener.hypercorn_config()
    sockets = config.create_sockets()
    log.info("HTTP listener on %s (hypercorn: HTTP/1.1 and HTTP/2)", listener.url)
    await worker_serve(wrap_app(app, config.wsgi_max_body_size, "asgi"), config,  # type: ignore[arg-type]
                       sockets=sockets, shutdown_trigger=stop.wait)


class _CertificateNamingProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol, adding the verified client certificate's subject to each
    request's scope (ASGI's TLS extension)."""

    _client_cert_name: str | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        ssl_object = transport.get_extra_info("ssl_object")
        certificate = ssl_object.getpeercert() if ssl_object is not None else None
        if certificate:
            self._client_cert_name = distinguished_name(certificate.get("subject", ()))

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._client_cert_name is not None:
            extensions = self.scope.setdefault("extensions", {})
            extensions["tls"] = {"client_cert_name": self._client_cert_name, "client_cert_chain": [],
                                 "client_cert_error": None, "server_cert": None, "tls_version": None,
                                 "cipher_suite": None}


class _Uvicorn(uvicorn.Server):
    """uvicorn's server without its signal handlers: the process owns SIGTERM and SIGINT (they set
    ``stop``), and uvicorn's would replace them and raise the signal again after a graceful stop."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _bound_socket(listener: ListenerConfig) -> socket.socket:
    family = socket.AF_INET6 if ":" in listener.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted connections inherit it (Linux): a response's head and body go out as two writes,
        # and with Nagle's algorithm the body waits for the client's delayed ACK (40 ms) on keep-alive.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((listener.host, listener.port))
        sock.listen(2048)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


async def _serve_uvicorn(app: ASGIApp, listener: ListenerConfig, stop: asyncio.Event) -> None:
    sock = _bound_socket(listener)
    tls: dict[str, object] = {}
    if listener.certfile is not None and listener.keyfile is not None:
        tls = {"ssl_certfile": str(listener.certfile), "ssl_keyfile": str(listener.keyfile),
               "ssl_cert_reqs": CLIENT_AUTH[listener.client_auth]}
        if listener.cafile is not None:
            tls["ssl_ca_certs"] = str(listener.cafile)
    config = uvicorn.Config(app, http=_CertificateNamingProtocol if tls else "httptools", lifespan="off", log_config=None, access_log=False,
                            timeout_keep_alive=max(1, round(listener.keep_alive_timeout_s)),
                            timeout_graceful_shutdown=max(1, round(listener.graceful_timeout_s)),
                            server_header=False, **tls)  # type: ignore[arg-type]
    server = _Uvicorn(config)
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)  # our own line says where it listens

    async def stop_on_event() -> None:
        await stop.wait()
        server.should_exit = True

    log.info("HTTP listener on %s (uvicorn: HTTP/1.1)", listener.url)
    stopper = asyncio.create_task(stop_on_event())
    try:
        await server.serve(sockets=[sock])
    finally:
        stopper.cancel()
        sock.close()

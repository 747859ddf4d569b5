"""The metrics and health endpoint: a tiny asyncio HTTP/1.1 server.

Routes (GET or HEAD):

- ``/metrics``: the registry in Prometheus text format 0.0.4 (gzip when the scraper accepts it);
- ``/healthz``: 200 ``ok`` while the process serves HTTP at all;
- ``/readyz``: 200 when every readiness check passes, else 503; the body lists each check
  (``ok logs-loaded`` / ``fail listeners-open``), so a probe's log says what is missing;
- ``/``: a short index.

Connections are kept alive (Prometheus reuses them) until the client closes, sends
``Connection: close``, or stays idle for ``idle_timeout_s``. A request head larger than 16 KiB, or
one that does not parse, gets 400 and the connection is closed. Only the head is read: request
bodies are not expected and a request announcing one gets 400.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import logging
from collections.abc import Callable
from dataclasses import dataclass

from tidelog.observability.registry import Registry, render

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 16 * 1024
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}
INDEX = "tidelog metrics endpoint\n/metrics  Prometheus text format\n/healthz  liveness\n/readyz   readiness\n"


class BadRequest(Exception):
    """The request head does not parse."""


@dataclass(frozen=True)
class RequestHead:
    method: str
    path: str
    version: str
    headers: dict[str, str]

    @property
    def keep_alive(self) -> bool:
        connection = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return connection == "keep-alive"
        return connection != "close"


def parse_request_head(data: bytes) -> RequestHead:
    """Parse ``METHOD target HTTP/1.x`` and the header lines (``data`` ends with the blank line)."""
    lines = data.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.0", "HTTP/1.1") or not parts[1].startswith("/"):
        raise BadRequest(f"bad request line {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise BadRequest(f"bad header line {line[:80]!r}")
        headers[name.lower()] = value.strip()
    path = parts[1].split("?", 1)[0]
    return RequestHead(parts[0], path, parts[2], headers)


class Readiness:
    """Named checks; the process is ready when every one returns True. No checks: ready."""

    def __init__(self) -> None:
        self._checks: dict[str, Callable[[], bool]] = {}

    def add(self, name: str, check: Callable[[], bool]) -> None:
        self._checks[name] = check

    def status(self) -> tuple[bool, list[tuple[str, bool]]]:
        results = []
        for name, check in list(self._checks.items()):
            try:
                passed = bool(check())
            except Exception:
                log.exception("readiness check %s failed", name)
                passed = False
            results.append((name, passed))
        return all(passed for _name, passed in results), results


def response_bytes(status: int, body: bytes, content_type: str, *, keep_alive: bool, head_only: bool = False,
                   extra: tuple[tuple[str, str], ...] = ()) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}", f"Content-Type: {content_type}",
             f"Content-Length: {len(body)}", f"Connection: {'keep-alive' if keep_alive else 'close'}"]
    lines += [f"{name}: {value}" for name, value in extra]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + body


class MetricsServer:
    """Serves ``registry`` and the health routes on ``host:port`` (port 0 picks a free one: see ``port``)."""

    def __init__(self, registry: Registry, host: str = "0.0.0.0", port: int = 0,
                 readiness: Readiness | None = None, idle_timeout_s: float = 60.0) -> None:
        self.registry = registry
        self.host = host
        self.port = port
        self.readiness = readiness if readiness is not None else Readiness()
        self.idle_timeout_s = idle_timeout_s
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, self.host, self.port, reuse_address=True, limit=MAX_HEAD_BYTES
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        log.info("metrics endpoint listening on http://%s:%d/metrics", self.host or "0.0.0.0", self.port)

    async def close(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=1.0)
        await self._server.wait_closed()
        self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        try:
            while await self._one_request(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError, asyncio.CancelledError):
            pass
        finally:
            if task is not None:
                self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _one_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection should close."""
        try:
            data = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.idle_timeout_s)
        except asyncio.LimitOverrunError:
            writer.write(response_bytes(400, b"request head too large\n", "text/plain", keep_alive=False))
            return False
        except asyncio.IncompleteReadError:
            return False
        try:
            head = parse_request_head(data)
            if head.headers.get("content-length", "0") != "0" or "transfer-encoding" in head.headers:
                raise BadRequest("request bodies are not accepted")
        except BadRequest as exc:
            writer.write(response_bytes(400, f"{exc}\n".encode(), "text/plain", keep_alive=False))
            return False
        writer.write(await self.respond(head))
        await writer.drain()
        return head.keep_alive

    async def respond(self, head: RequestHead) -> bytes:
        keep = head.keep_alive
        if head.method not in ("GET", "HEAD"):
            return response_bytes(405, b"GET or HEAD only\n", "text/plain", keep_alive=keep, extra=(("Allow", "GET, HEAD"),))
        head_only = head.method == "HEAD"
        if head.path == "/metrics":
            body, extra = await self.metrics_body(head.headers.get("accept-encoding", ""))
            return response_bytes(200, body, METRICS_CONTENT_TYPE, keep_alive=keep, head_only=head_only, extra=extra)
        if head.path == "/healthz":
            return response_bytes(200, b"ok\n", "text/plain", keep_alive=keep, head_only=head_only)
        if head.path == "/readyz":
            ready, checks = self.readiness.status()
            report = "".join(f"{'ok' if passed else 'fail'} {name}\n" for name, passed in checks) or "ok\n"
            return response_bytes(200 if ready else 503, report.encode(), "text/plain", keep_alive=keep, head_only=head_only)
        if head.path == "/":
            return response_bytes(200, INDEX.encode(), "text/plain", keep_alive=keep, head_only=head_only)
        return response_bytes(404, b"not found\n", "text/plain", keep_alive=keep, head_only=head_only)

    async def metrics_body(self, accept_encoding: str) -> tuple[bytes, tuple[tuple[str, str], ...]]:
        # Owned metrics are snapshotted here, on the loop that updates them; collectors may block
        # (they read logs and disks), so they and the encoding run in a worker thread.
        owned = self.registry.collect_owned()
        gzipped = "gzip" in accept_encoding.lower()

        def build() -> bytes:
            data = render(owned + self.registry.collect_external()).encode()
            return gzip.compress(data, compresslevel=1) if gzipped else data

        body = await asyncio.get_running_loop().run_in_executor(None, build)
        return body, ((("Content-Encoding", "gzip"),) if gzipped else ())

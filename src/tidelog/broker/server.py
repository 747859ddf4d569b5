"""The network shell: accept connections, read frames, dispatch, write responses. Nothing else.

Each connection is one task that handles its requests one at a time, in order, as Kafka does (a
client that pipelines gets its responses in request order; a long-polling fetch holds back the
requests queued behind it on the same connection only). All decisions live in the handlers; this
module only maps codec failures to Kafka's reaction:

- framing error, unknown key, unsupported version (except ApiVersions), malformed body → log once
  (rate limited per client address) and close the connection;
- ApiVersions at a version we do not know → the v0-format error response, keep serving.

Security (``security/listeners.py``): SSL and SASL_SSL listeners speak TLS (asyncio's ssl support);
an SSL connection takes its principal from the client certificate. A TLS listener is accepted by
``broker/tls_acceptor.py``, which applies the connection limits below to the bare TCP connection and
runs the handshake only for those admitted, so a refused connection costs no TLS work. On SASL listeners a connection
may send only ApiVersions, SaslHandshake and SaslAuthenticate (or, after a v0 handshake, bare SASL
tokens) until it has authenticated; anything else closes it, and its frames are limited to
``sasl.server.max.receive.size`` meanwhile. A handler that sets ``conn.close_after_response`` (a
failed authentication) has its response written and the connection closed.

What one client may take (docs/security.md, "Hostile and broken clients"):

- a new connection past ``max.connections``, ``max.connections.per.ip`` (and its overrides) or
  ``max.connection.creation.rate`` (``security/connection_limits.py``) is closed at once (on a TLS
  listener before the handshake: no ServerHello is sent), counted in
  ``tidelog_connections_refused_total`` and logged once per address and minute;
- a new connection from an address over its ``connection_creation_rate`` quota (an ``ip`` entity,
  KIP-612; ``quotas/connection_rate.py``) is held unread and closed after the throttle time, as
  Kafka delays closing it, counted in the same metric (limit ``connection_creation_rate``);
- requests being received, queued and served are charged to the broker-wide receive budget
  (``queued.max.request.bytes``, ``broker/receive_budget.py``): a request larger than the receive
  area is read only while the budget can hold it, and while the budget is full a connection that
  holds requests reads no more;
- a client over its quota (``broker/quota_runtime.py``) gets the throttle time in its response, and
  the connection is then muted for that long: nothing read, nothing served (Kafka's KIP-219);
- a connection whose request takes longer than ``socket.request.read.timeout.ms`` to arrive is
  closed by the sweeper (``tidelog_request_read_timeouts_total``), whatever the pace of its bytes:
  the idle timeout alone restarts on every byte, so a client trickling one byte a second kept a
  half-received request, and its share of the receive budget, for ever.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import struct
import time
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from tidelog.broker.connection import KafkaProtocol
from tidelog.broker.context import BrokerContext, ConnectionInfo, Endpoint
from tidelog.broker.dispatch import handler_for
from tidelog.broker.handlers.security import sasl_raw_token, session_expired
from tidelog.broker.quota_runtime import with_throttle
from tidelog.broker.receive_budget import ReceiveBudget
from tidelog.broker.response_writer import ResponseWriter
from tidelog.broker.tls_acceptor import TlsAcceptor, listening_sockets
from tidelog.observability.broker_metrics import RequestTimer, api_name
from tidelog.observability.logs import OncePerInterval, context
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import decode_request, encode_api_versions_unsupported, encode_response
from tidelog.protocol.errors import Hint, ProtocolError, UnknownApiKey
from tidelog.protocol.framing import FrameDecoder
from tidelog.protocol.headers import parse_request_header
from tidelog.security.authenticator import SaslAuthenticator
from tidelog.security.connection_limits import UNLIMITED, ConnectionLimits, Limits, parse_overrides
from tidelog.security.listeners import ListenerSecurity
from tidelog.security.principal import NoMatchingRule

log = logging.getLogger(__name__)

WRITE_HIGH_WATER = 4 * 1024 * 1024
SCORED_APIS = frozenset({ApiKey.PRODUCE, ApiKey.FETCH})  # what slow-connection marking scores (slow_connections.py)


class RateLimitedLog:
    """At most ``burst`` messages per client host per ``window_s``; then one 'suppressed' note."""

    def __init__(self, burst: int = 10, window_s: float = 60.0) -> None:
        self.burst = burst
        self.window_s = window_s
        self._seen: defaultdict[str, list[float]] = defaultdict(list)

    def warning(self, host: str, message: str, *args: object, extra: dict[str, object] | None = None) -> None:
        now = time.monotonic()
        recent = [t for t in self._seen[host] if now - t < self.window_s]
        recent.append(now)
        self._seen[host] = recent
        if len(recent) <= self.burst:
            log.warning(message, *args, extra=extra)
        elif len(recent) == self.burst + 1:
            log.warning("further protocol errors from %s suppressed for %.0f s", host, self.window_s)
        if len(self._seen) > 10_000:
            self._seen.clear()


class Server:
    def __init__(
        self, ctx: BrokerContext, max_frame_bytes: int, send_buffer: int = -1, receive_buffer: int = -1,
        idle_timeout_ms: int = 600_000, security: Mapping[str, ListenerSecurity] | None = None,
        sasl_max_receive_bytes: int = 524288, receive_budget: ReceiveBudget | None = None,
        request_read_timeout_ms: int = 0, inter_broker_listener: str | None = None,
    ) -> None:
        self.ctx = ctx
        self.receive_budget = receive_budget
        self.request_read_timeout_s = request_read_timeout_ms / 1000
        self.inter_broker_listener = inter_broker_listener
        self.limits = ConnectionLimits()
        self.refusal_log = OncePerInterval(60.0)
        self.read_timeout_log = OncePerInterval(60.0)
        self._overrides: tuple[str, dict[str, int]] = ("", {})
        self.security = dict(security or {})
        self.sasl_max_receive_bytes = sasl_max_receive_bytes
        self.max_frame_bytes = max_frame_bytes
        self.send_buffer = send_buffer
        self.receive_buffer = receive_buffer
        self.protocol_log = RateLimitedLog()
        self._servers: list[asyncio.Server] = []
        self._acceptors: list[TlsAcceptor] = []
        self._connections: set[asyncio.Task[None]] = set()
        self._busy: set[asyncio.Task[None]] = set()
        self.bound: list[Endpoint] = []
        self.idle_timeout_s = idle_timeout_ms / 1000
        # Each connection's protocol (which knows when it last received bytes) and writer, for the idle sweeper.
        self._last_active: dict[asyncio.Task[None], tuple[KafkaProtocol, asyncio.StreamWriter, str]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self.responses = ResponseWriter()

    async def listen(self, listeners: list[Endpoint]) -> None:
        for listener in listeners:
            host = listener.host or "0.0.0.0"
            security = self.security.get(listener.name)
            tls = security.tls if security is not None else None
            if tls is None:
                server = await asyncio.get_running_loop().create_server(
                    functools.partial(self._protocol, listener, security), host, listener.port, reuse_address=True,
                )
                port = server.sockets[0].getsockname()[1]
                self._servers.append(server)
            else:  # the limits are applied before the handshake
                acceptor = TlsAcceptor(
                    listener.name, listening_sockets(host, listener.port), tls,
                    decide=functools.partial(self._decide, listener=listener.name),
                    protocol=functools.partial(self._protocol, listener, security),
                    forget=functools.partial(self.limits.closed, listener.name),
                )
                acceptor.start()
                port = acceptor.sockets[0].getsockname()[1]
                self._acceptors.append(acceptor)
            self.bound.append(Endpoint(listener.name, listener.host, port, listener.security_protocol))
        if self._sweeper is None and (self.idle_timeout_s > 0 or self.request_read_timeout_s > 0):
            self._sweeper = asyncio.create_task(self._sweep_idle())

    def _protocol(self, listener: Endpoint, security: ListenerSecurity | None, admitted: str | None = None) -> KafkaProtocol:
        """The protocol of a new connection; ``admitted``: its address, when it has passed the limits
        already (a TLS listener's, decided before its handshake)."""
        limit = self.max_frame_bytes
        if security is not None and security.sasl is not None:
            limit = min(limit, self.sasl_max_receive_bytes)  # until the connection has authenticated
        on_connect = functools.partial(self._accept, listener=listener, admitted=admitted)
        return KafkaProtocol(FrameDecoder(limit), on_connect, over_tls=security is not None and security.tls is not None,
                             budget=self.receive_budget)

    async def _sweep_idle(self) -> None:
        """Close connections that sent nothing for connections.max.idle.ms (and are not mid-request),
        and those whose request has been arriving for longer than socket.request.read.timeout.ms."""
        timeouts = [t for t in (self.idle_timeout_s, self.request_read_timeout_s) if t > 0]
        interval = min(max(min(timeouts) / 10, 0.05), 30.0)
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            cutoff = now - self.idle_timeout_s
            for task, (proto, writer, listener) in list(self._last_active.items()):
                started = proto.request_started
                if self.request_read_timeout_s > 0 and started is not None and now - started > self.request_read_timeout_s:
                    self._read_timed_out(proto, writer, listener, now - started)
                elif self.idle_timeout_s > 0 and proto.last_received < cutoff and task not in self._busy:
                    log.debug("closing idle connection %s", writer.get_extra_info("peername"))
                    writer.close()

    def _read_timed_out(self, proto: KafkaProtocol, writer: asyncio.StreamWriter, listener: str, took: float) -> None:
        self.ctx.metrics.request_read_timed_out(listener)
        peername = writer.get_extra_info("peername")
        host = peername[0] if peername else "?"
        logged, held = self.read_timeout_log.should_log(host)
        if logged:
            log.warning("closing connection from %s on %s: %d bytes of a request in %.1f s, not complete within "
                        "socket.request.read.timeout.ms (%d ms)%s", host, listener, proto.decoder.buffered_bytes, took,
                        self.request_read_timeout_s * 1000, f"; {held} more since the last message" if held else "")
        proto.request_started = None
        writer.transport.abort()  # nothing to flush: no answer is owed for a request never received

    def _limits(self, listener: str) -> Limits:
        config = self.ctx.config
        raw = str(config.get("max.connections.per.ip.overrides") or "")
        if raw != self._overrides[0]:
            try:
                self._overrides = (raw, parse_overrides(raw))
            except ValueError as exc:  # the catalogue validated it; a name that no longer resolves lands here
                log.warning("max.connections.per.ip.overrides ignored: %s", exc)
                self._overrides = (raw, {})
        return Limits(
            max_connections=config.get_int("max.connections"),
            listener_max=_int(config.get_for_listener(listener, "max.connections")),
            per_ip=config.get_int("max.connections.per.ip"),
            per_ip_overrides=self._overrides[1],
            creation_rate=config.get_int("max.connection.creation.rate"),
            listener_creation_rate=_int(config.get_for_listener(listener, "max.connection.creation.rate")),
            inter_broker=listener == self.inter_broker_listener,
        )

    def _decide(self, host: str, listener: str) -> int | None:
        """A new connection from ``host``: 0 when admitted (and counted against the limits), the
        milliseconds to hold it unread before closing it (its address over its
        ``connection_creation_rate``), or None when refused (to be closed at once)."""
        throttle_ms = self._ip_throttle_ms(host, listener)
        if throttle_ms > 0:
            return throttle_ms
        return 0 if self._admit(host, listener) else None

    def _admit(self, host: str, listener: str) -> bool:
        """Count a new connection against the limits; False (counted and logged as refused) if refused."""
        refused = self.limits.admit(listener, host, self._limits(listener), time.monotonic())
        if refused is None:
            return True
        self.ctx.metrics.connection_refused(listener, refused)
        logged, held = self.refusal_log.should_log(host)
        if logged:
            log.warning("refused a connection from %s on %s: %s reached%s (further refusals of this address are "
                        "logged once a minute)", host, listener, refused, f"; {held} refused since" if held else "")
        return False

    def _ip_throttle_ms(self, host: str, listener: str) -> int:
        """How long to hold the new connection before closing it, its address being over its
        ``connection_creation_rate``; 0 to go on. Checked before the connection limits, which a
        throttled connection does not count against (Kafka records the address's rate first)."""
        quotas = self.ctx.quotas
        if quotas is None:
            return 0
        throttle_ms = quotas.connection_created(self.ctx.image, host)
        if throttle_ms <= 0:
            return 0
        self.ctx.metrics.connection_refused(listener, "connection_creation_rate")
        logged, held = self.refusal_log.should_log(host)
        if logged:
            log.warning("throttled a connection from %s on %s: connection_creation_rate reached, closing it after "
                        "%d ms (further throttles of this address are logged once a minute)%s", host, listener,
                        throttle_ms, f"; {held} throttled since" if held else "")
        return throttle_ms

    @staticmethod
    async def _close_after(proto: KafkaProtocol, writer: asyncio.StreamWriter, throttle_ms: int) -> None:
        """Kafka's delayed close of a throttled connection: nothing read or answered, closed after
        ``throttle_ms`` (so a client reconnecting at once is held to its rate)."""
        proto.mute()
        proto.release_budget()
        try:
            await asyncio.sleep(throttle_ms / 1000)
        finally:
            writer.transport.abort()

    async def _accept(
        self, proto: KafkaProtocol, writer: asyncio.StreamWriter, listener: Endpoint, admitted: str | None = None,
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        if admitted is not None:
            host = admitted
        else:
            peername = writer.get_extra_info("peername")
            host = str(peername[0]) if peername else "?"
            verdict = self._decide(host, listener.name)
            if verdict is None:
                writer.transport.abort()
                proto.release_budget()
                return
            if verdict > 0:
                self._connections.add(task)
                try:
                    await self._close_after(proto, writer, verdict)
                finally:
                    self._connections.discard(task)
                return
        self._connections.add(task)
        try:
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self.send_buffer > 0:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer)
                if self.receive_buffer > 0:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer)
            writer.transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
            self.ctx.metrics.connection_opened(listener.name)
            try:
                await self._serve(proto, writer, listener, task)
            finally:
                self.ctx.metrics.connection_closed(listener.name)
        finally:
            self._connections.discard(task)
            self._last_active.pop(task, None)
            self.limits.closed(listener.name, host)
            proto.release_budget()

    async def _serve(
        self, proto: KafkaProtocol, writer: asyncio.StreamWriter, listener: Endpoint, task: asyncio.Task[None]
    ) -> None:
        peername = writer.get_extra_info("peername")
        peer = f"{peername[0]}:{peername[1]}" if peername else "?"
        conn = ConnectionInfo(peer=peer, listener=self.bound_endpoint(listener), host=peername[0] if peername else "")
        decoder = proto.decoder
        security = self.security.get(listener.name)
        plain_tcp = security is None or security.tls is None  # file ranges may go out with sendfile
        if security is not None and not self._secure(conn, security, writer):
            writer.close()
            return
        self._last_active[task] = (proto, writer, listener.name)
        try:
            while True:
                received_frame = await proto.next_frame()
                if received_frame is None:
                    return
                frame, received = received_frame
                self._busy.add(task)
                try:
                    if not await self._handle(conn, frame, writer, received, plain_tcp):
                        return
                    if conn.throttle_ms > 0:
                        await self._mute(proto, conn.throttle_ms)
                    if conn.auth is None and decoder.max_frame_bytes < self.max_frame_bytes:
                        decoder.max_frame_bytes = self.max_frame_bytes  # authenticated: the full limit
                    if writer.transport.get_write_buffer_size() > WRITE_HIGH_WATER:
                        await writer.drain()
                finally:
                    self._busy.discard(task)
        except ProtocolError as exc:
            self.ctx.metrics.protocol_error(listener.name, type(exc).__name__)
            self.protocol_log.warning(
                peername[0] if peername else "?", "closing connection from %s (client %s): %s", peer, conn.client_id, exc,
                extra=context(peer=peer, client_id=conn.client_id, listener=listener.name),
            )
        except ConnectionError:
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("connection from %s (client %s) failed", peer, conn.client_id)
        finally:
            writer.close()
            if self.ctx.disk is not None:
                self.ctx.disk.marker.forget(conn.score)

    @staticmethod
    async def _mute(proto: KafkaProtocol, throttle_ms: int) -> None:
        """A quota's throttle: nothing more is read from the connection, nor served, for that long."""
        proto.mute()
        try:
            await asyncio.sleep(throttle_ms / 1000)
        finally:
            proto.unmute()

    def _secure(self, conn: ConnectionInfo, security: ListenerSecurity, writer: asyncio.StreamWriter) -> bool:
        """Principal from the client certificate, or SASL authentication pending; False to close."""
        if security.principal_mapper is not None:
            try:
                conn.principal = security.principal_mapper.principal(writer.get_extra_info("peercert"))
            except NoMatchingRule as exc:
                self.protocol_log.warning(conn.host, "closing TLS connection from %s: %s", conn.peer, exc)
                return False
        if security.sasl is not None:
            conn.sasl = security.sasl
            conn.auth = SaslAuthenticator(security.sasl)  # its frame limit was set when the connection was made
        return True

    def bound_endpoint(self, listener: Endpoint) -> Endpoint:
        for endpoint in self.bound:
            if endpoint.name == listener.name:
                return endpoint
        return listener

    async def _handle(
        self, conn: ConnectionInfo, frame: bytes | memoryview, writer: asyncio.StreamWriter, received: float,
        plain_tcp: bool = True,
    ) -> bool:
        """Serve one request; False when the connection must close."""
        auth = conn.auth
        if auth is not None and auth.raw_tokens:
            challenge = await sasl_raw_token(self.ctx, conn, bytes(frame))
            if challenge is None:
                return False
            writer.write(struct.pack(">i", len(challenge)) + challenge)
            return True
        try:
            header = parse_request_header(frame)
            handler = handler_for(header.api_key)
            if handler is None:
                raise UnknownApiKey(header.api_key, header.correlation_id)
            if auth is not None and not auth.allows(header.api_key):
                self.protocol_log.warning(
                    conn.host, "closing connection from %s (client %s): request %d before SASL authentication",
                    conn.peer, header.client_id, header.api_key,
                )
                return False
            if conn.session_expires_ms and session_expired(conn, header.api_key):
                log.info("closing connection from %s (client %s, %s): its SASL session expired without "
                         "re-authentication (connections.max.reauth.ms)", conn.peer, header.client_id, conn.principal)
                return False
            conn.client_id = header.client_id
            request = decode_request(header, frame)
        except ProtocolError as exc:
            if exc.hint is Hint.API_VERSIONS_FALLBACK:
                self.ctx.metrics.protocol_error(conn.listener.name, "UnsupportedApiVersions")
                writer.writelines(encode_api_versions_unsupported(getattr(exc, "correlation_id", 0)))
                return True
            if log.isEnabledFor(logging.DEBUG):
                log.debug("undecodable frame from %s: %s", conn.peer, bytes(frame[:256]).hex())
            raise
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "request %s v%d", api_name(header.api_key), header.api_version,
                extra=context(peer=conn.peer, client_id=conn.client_id, listener=conn.listener.name,
                              api=api_name(header.api_key), api_version=header.api_version,
                              correlation_id=header.correlation_id),
            )
        timer = self.ctx.metrics.request_received(conn.listener.name, received)
        timer.decoded(header.api_key, header.api_version, len(frame))
        conn.request_timer = timer
        conn.throttle_ms = 0
        response = await handler(self.ctx, conn, header, request)
        timer.handled()
        if header.api_key in SCORED_APIS and self.ctx.disk is not None and conn.listener.name != self.inter_broker_listener:
            self.ctx.disk.marker.observe(conn.score, timer.handled_at - timer.decoded_at - timer.remote_s, conn.peer, conn.client_id)
        response = self._throttled(conn, header.api_key, timer, response)
        if response is not None:
            parts = encode_response(header, response)
            await self.responses.write(writer, parts, plain_tcp)
            timer.sent(sum(map(len, parts)))
        else:
            timer.sent(0)
        return not conn.close_after_response

    def _throttled(self, conn: ConnectionInfo, api_key: int, timer: RequestTimer, response: Any) -> Any:
        """Add the request_percentage throttle to the byte-rate one; write it into the response."""
        quotas = self.ctx.quotas
        if quotas is None or conn.listener.name == self.inter_broker_listener:
            return response
        handler_s = max(0.0, timer.handled_at - timer.decoded_at - timer.remote_s)
        throttle = max(conn.throttle_ms, quotas.handled(self.ctx.image, api_key, conn.principal, conn.client_id, handler_s))
        conn.throttle_ms = throttle
        if throttle <= 0:
            return response
        timer.add_throttle(throttle / 1000)
        return response if response is None else with_throttle(response, throttle)

    async def close(self, grace_s: float = 5.0) -> None:
        """Stop accepting, let in-flight requests finish (up to ``grace_s``), then drop connections."""
        for server in self._servers:
            server.close()
        for acceptor in self._acceptors:
            acceptor.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        self.ctx.purgatory.close()
        deadline = time.monotonic() + grace_s
        while self._busy and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=1.0)
        # Bounded: a listener's wait_closed waits for every transport it made to be closed, and one the
        # cancelled tasks did not close (a connection accepted as the listener closed) would keep a
        # SIGTERMed broker running forever (ci3: "broker did not exit within 15 s of signal 15").
        waits = [server.wait_closed() for server in self._servers] + [a.wait_closed() for a in self._acceptors]
        for closing in waits:
            try:
                await asyncio.wait_for(closing, 2.0)
            except TimeoutError:
                log.warning("a listener still had connections 2 s after closing; stopping without them")


def _int(value: object) -> int:
    return value if isinstance(value, int) else UNLIMITED

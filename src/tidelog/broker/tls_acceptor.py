"""TLS listeners that apply the connection limits before the TLS handshake.

An asyncio server started with ``ssl=`` runs the handshake (the broker's share of the key exchange
and its certificate signature) before its protocol hears of the connection, so a connection past
``max.connections.per.ip`` used to be refused only after the broker had paid for a handshake with it.
Here a TLS listener's sockets are plain listening sockets accepted by a task of our own
(``loop.sock_accept``), and each new connection is decided on its bare TCP socket, before a byte of
it is read:

- refused (``max.connections``, ``max.connections.per.ip`` and its overrides,
  ``max.connection.creation.rate``): the socket is closed at once; the client's ClientHello is never
  read and no ServerHello is sent;
- over its address's ``connection_creation_rate`` quota: the socket is held, unread, for the throttle
  time and then closed (Kafka's delayed close), still without a handshake;
- admitted (and counted against the limits): ``loop.connect_accepted_socket(..., ssl=context)`` runs
  the handshake with the same ``SSLProtocol`` and the same 60 s handshake timeout as an ``ssl=``
  server, and the connection is then served exactly as before. A failed handshake gives the
  connection's place in the limits back (``forget``); a completed one hands it to the connection's
  own task, which gives it back when the connection ends.

The decision itself is the server's (``decide``), shared with the plain listeners, so both count
against the same limits. A connection holds its place in the limits from its accept (its handshake
included, as in Kafka, whose acceptor counts it); it shows in ``tidelog_connections`` once its
handshake is done. Bound like ``create_server``: every address the host name resolves to,
``SO_REUSEADDR``, IPv6 sockets IPv6-only, a backlog of 100.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
from collections.abc import Callable

from tidelog.broker.connection import KafkaProtocol

log = logging.getLogger(__name__)

BACKLOG = 100  # asyncio's create_server default
ACCEPT_RETRY_DELAY_S = 1.0  # out of descriptors or memory: stop accepting this long, as asyncio's servers do
_RESOURCE_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

Decide = Callable[[str], int | None]  # address -> 0 admitted, > 0 hold this many ms then close, None refused


def listening_sockets(host: str | None, port: int) -> list[socket.socket]:
    """Non-blocking listening TCP sockets on every address ``host`` resolves to (all when None)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:  # asyncio's create_server words it so; the node reports it at start
                raise OSError(exc.errno, f"error while attempting to bind on address {address!r}: "
                                         f"{(exc.strerror or str(exc)).lower()}") from None
            sock.listen(BACKLOG)
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class TlsAcceptor:
    """Accepts one TLS listener's connections, decides them before the handshake, then hands them on."""

    def __init__(
        self, name: str, sockets: list[socket.socket], context: ssl.SSLContext, decide: Decide,
        protocol: Callable[[str], KafkaProtocol], forget: Callable[[str], None],
    ) -> None:
        self.name = name
        self.sockets = sockets
        self._context = context
        self._decide = decide
        self._protocol = protocol  # for an admitted address
        self._forget = forget
        self._loops: list[asyncio.Task[None]] = []
        self._handshakes: set[asyncio.Task[None]] = set()
        self._held: dict[socket.socket, asyncio.TimerHandle] = {}

    def start(self) -> None:
        self._loops = [asyncio.create_task(self._accept_loop(sock)) for sock in self.sockets]

    async def _accept_loop(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        accepted = 0
        while True:
            try:
                sock, address = await loop.sock_accept(listening)
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                continue
            except OSError as exc:  # never end the loop: a listener that stops accepting is worse than any error
                delay = ACCEPT_RETRY_DELAY_S if exc.errno in _RESOURCE_ERRORS else 0.1
                log.error("listener %s could not accept a connection (%s); retrying in %.1f s", self.name, exc, delay)
                await asyncio.sleep(delay)
                continue
            self._admit(sock, str(address[0]))
            accepted += 1
            if accepted % 64 == 0:
                await asyncio.sleep(0)  # a flood of connections must not hold the event loop

    def _admit(self, sock: socket.socket, host: str) -> None:
        sock.setblocking(False)
        verdict = self._decide(host)
        if verdict is None:
            sock.close()  # refused: its ClientHello is never read
        elif verdict > 0:
            handle = asyncio.get_running_loop().call_later(verdict / 1000, self._close_held, sock)
            self._held[sock] = handle
        else:
            task = asyncio.create_task(self._handshake(sock, host))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    def _close_held(self, sock: socket.socket) -> None:
        self._held.pop(sock, None)
        sock.close()

    async def _handshake(self, sock: socket.socket, host: str) -> None:
        made: list[KafkaProtocol] = []

        def protocol() -> KafkaProtocol:
            made.append(self._protocol(host))
            return made[0]

        try:
            await asyncio.get_running_loop().connect_accepted_socket(protocol, sock, ssl=self._context)
        except BaseException as exc:
            if not made or made[0].transport is None:  # its task never started: the place in the limits is ours
                self._forget(host)
            if not made:
                sock.close()  # else the transport owned it and has closed it (under uvloop its number may be reused)
            if isinstance(exc, (OSError, TimeoutError)):  # a failed handshake: dropped quietly, as an ssl= server does
                if log.isEnabledFor(logging.DEBUG):
                    log.debug("TLS handshake with %s on %s failed: %r", host, self.name, exc)
                return
            raise

    def close(self) -> None:
        """Stop accepting; drop connections held or still in their handshake. The listening sockets
        are closed by ``wait_closed``, once the accept loops no longer wait on them."""
        for task in self._loops:
            task.cancel()
        for sock, handle in list(self._held.items()):
            handle.cancel()
            sock.close()
        self._held.clear()
        for task in list(self._handshakes):
            task.cancel()

    async def wait_closed(self) -> None:
        pending = [*self._loops, *self._handshakes]
        if pending:
            await asyncio.wait(pending, timeout=1.0)
        for sock in self.sockets:
            sock.close()

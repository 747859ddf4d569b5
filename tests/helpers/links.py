"""A relay in front of one broker's inter-broker listener that can cut chosen peers off, silently.

Each broker of a fault-test cluster has a second listener, ``REPLICATION``, named in
``inter.broker.listener.name`` and advertised at this relay's port, so every replica fetch another
broker sends to it passes here (clients keep using ``PLAINTEXT`` directly). The relay tells the
peers apart by the client id of a connection's first request: the follower fetcher of broker N says
``tidelog-replica-fetcher-N``.

``cut(peer)`` stops carrying bytes, in both directions, on every connection from that peer, present
and future, without closing anything: requests and answers wait in the relay and the kernel buffers,
nothing arrives, as when a network loses packets. ``heal(peer)`` lets the held bytes through, so no
stream is corrupted and an in-flight fetch is answered late instead of failing.
"""

from __future__ import annotations

import socket
import struct
import threading

HOST = "127.0.0.1"
FETCHER_CLIENT_ID = "tidelog-replica-fetcher-"


def peer_of(first_frame: bytes) -> int | None:
    """The node id of the replica fetcher that sent ``first_frame`` (a request without its length
    prefix: api key, version, correlation id, then the client id as an int16-prefixed string)."""
    if len(first_frame) < 10:
        return None
    (length,) = struct.unpack_from(">h", first_frame, 8)
    client_id = first_frame[10:10 + max(0, length)].decode(errors="replace")
    suffix = client_id.removeprefix(FETCHER_CLIENT_ID)
    return int(suffix) if suffix != client_id and suffix.isdigit() else None


class ReplicationLink:
    """The relay for one broker's inter-broker listener; start it before the broker registers."""

    def __init__(self, target_port: int) -> None:
        self.target = (HOST, target_port)
        self._listener = socket.create_server((HOST, 0))
        self.port = int(self._listener.getsockname()[1])
        self._cut: set[int] = set()
        self._changed = threading.Condition()
        self._closed = False
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept_loop, daemon=True, name=f"link-{self.port}").start()

    def cut(self, peer: int) -> None:
        with self._changed:
            self._cut.add(peer)

    def heal(self, peer: int | None = None) -> None:
        """Carry ``peer``'s bytes again (every peer's when None)."""
        with self._changed:
            if peer is None:
                self._cut.clear()
            else:
                self._cut.discard(peer)
            self._changed.notify_all()

    @property
    def cut_peers(self) -> frozenset[int]:
        return frozenset(self._cut)

    def _wait_flowing(self, peer: int | None) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self._closed or peer not in self._cut)

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            first = _read_frame(client)
            if first is None:
                client.close()
                return
            peer = peer_of(first)
            self._wait_flowing(peer)
            upstream = socket.create_connection(self.target, timeout=5)
            upstream.settimeout(None)
            upstream.sendall(struct.pack(">i", len(first)) + first)
        except OSError:
            client.close()
            return
        with self._changed:
            self._sockets += [client, upstream]
        threading.Thread(target=self._pump, args=(client, upstream, peer), daemon=True).start()
        self._pump(upstream, client, peer)

    def _pump(self, source: socket.socket, sink: socket.socket, peer: int | None) -> None:
        try:
            while data := source.recv(65536):
                self._wait_flowing(peer)
                if self._closed:
                    break
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()
            sockets, self._sockets = self._sockets, []
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        for sock in sockets:
            sock.close()


def _read_frame(sock: socket.socket) -> bytes | None:
    data = b""
    while len(data) < 4:
        chunk = sock.recv(4 - len(data))
        if not chunk:
            return None
        data += chunk
    (size,) = struct.unpack(">i", data)
    body = bytearray()
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            return None
        body += chunk
    return bytes(body)

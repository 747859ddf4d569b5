"""A TCP proxy in front of a broker that loses Produce responses, to make real clients retry.

The broker is started with ``advertised.listeners`` pointing at the proxy, so clients send every
request through it. The proxy forwards frames both ways, remembers the correlation ids of Produce
requests, and while ``drop_produce_responses`` is above zero it cuts the connection instead of
forwarding a Produce response: the broker has appended the batch, the client never hears of it,
reconnects and sends the same batch again. An idempotent producer must end up with each record
in the log exactly once.
"""

from __future__ import annotations

import socket
import struct
import threading


class DroppingProxy:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self._listener = socket.create_server((host, 0))
        self.port = int(self._listener.getsockname()[1])
        self.target: tuple[str, int] | None = None
        self.drop_produce_responses = 0
        self.dropped = 0
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._closed = False
        self._threads: list[threading.Thread] = []

    def start(self, target_host: str, target_port: int) -> DroppingProxy:
        self.target = (target_host, target_port)
        self._spawn(self._accept_loop)
        return self

    def close(self) -> None:
        self._closed = True
        _shutdown(self._listener)  # shutdown, not just close, wakes the thread blocked in accept()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            _shutdown(sock)
        for thread in self._threads:
            thread.join(5)

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        assert self.target is not None
        while not self._closed:
            try:
                client, _ = self._listener.accept()
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                if self._closed:
                    return
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets.update((client, upstream))
            pending: set[int] = set()
            self._spawn(self._requests, client, upstream, pending)
            self._spawn(self._responses, upstream, client, pending)

    def _requests(self, client: socket.socket, upstream: socket.socket, pending: set[int]) -> None:
        try:
            while (frame := _read_frame(client)) is not None:
                api_key, _version, correlation_id = struct.unpack_from(">hhi", frame, 0)
                if api_key == 0:
                    pending.add(correlation_id)
                upstream.sendall(struct.pack(">i", len(frame)) + frame)
        except OSError:
            pass
        finally:
            self._drop(client, upstream)

    def _responses(self, upstream: socket.socket, client: socket.socket, pending: set[int]) -> None:
        try:
            while (frame := _read_frame(upstream)) is not None:
                (correlation_id,) = struct.unpack_from(">i", frame, 0)
                if correlation_id in pending:
                    pending.discard(correlation_id)
                    with self._lock:
                        drop = self.drop_produce_responses > 0
                        if drop:
                            self.drop_produce_responses -= 1
                            self.dropped += 1
                    if drop:
                        return
                client.sendall(struct.pack(">i", len(frame)) + frame)
        except OSError:
            pass
        finally:
            self._drop(client, upstream)

    def _drop(self, *sockets: socket.socket) -> None:
        for sock in sockets:
            _shutdown(sock)
            with self._lock:
                self._sockets.discard(sock)


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def _read_frame(sock: socket.socket) -> bytes | None:
    prefix = _read_exactly(sock, 4)
    if prefix is None:
        return None
    return _read_exactly(sock, struct.unpack(">i", prefix)[0])

"""A TCP proxy whose link can be cut and healed, to put a network partition between a client and a broker.

Start the broker with ``advertised.listeners`` naming the proxy's port, so clients reach it only
through the proxy (bootstrap and every later connection). ``cut()`` closes every open connection;
while cut, new connections are accepted and then either closed at once (``refuse``) or left
silent, their bytes read and thrown away (``blackhole``, the harder case: requests just time out).
``heal()`` lets connections through again.
"""

from __future__ import annotations

import socket
import threading


class LinkProxy:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self._listener = socket.create_server((host, 0))
        self.port = int(self._listener.getsockname()[1])
        self.target: tuple[str, int] | None = None
        self.mode = "open"  # open | refuse | blackhole
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._closed = False

    def start(self, target_host: str, target_port: int) -> LinkProxy:
        self.target = (target_host, target_port)
        threading.Thread(target=self._accept_loop, daemon=True).start()
        return self

    def cut(self, mode: str = "blackhole") -> None:
        assert mode in ("refuse", "blackhole")
        self.mode = mode
        self._close_all()

    def heal(self) -> None:
        self.mode = "open"

    def close(self) -> None:
        self._closed = True
        _shutdown(self._listener)
        self._close_all()

    def _close_all(self) -> None:
        with self._lock:
            sockets = list(self._sockets)
            self._sockets.clear()
        for sock in sockets:
            _shutdown(sock)

    def _track(self, *sockets: socket.socket) -> None:
        with self._lock:
            self._sockets.update(sockets)

    def _accept_loop(self) -> None:
        assert self.target is not None
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.mode == "refuse":
                _shutdown(client)
                continue
            if self.mode == "blackhole":
                self._track(client)
                threading.Thread(target=_discard, args=(client,), daemon=True).start()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _shutdown(client)
                continue
            upstream.settimeout(None)
            self._track(client, upstream)
            threading.Thread(target=_pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        _shutdown(source)
        _shutdown(sink)


def _discard(sock: socket.socket) -> None:
    try:
        while sock.recv(65536):
            pass
    except OSError:
        pass
    finally:
        _shutdown(sock)


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()

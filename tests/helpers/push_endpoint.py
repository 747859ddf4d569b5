"""Webhook endpoints for the gateway's push tests (integration and compat): one that takes every
other batch and answers the others with a 500 or not in time, one that answers as scripted."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FlakyEndpoint:
    """An HTTP endpoint that takes every other batch: the others get a 500 or no answer in time."""

    def __init__(self, partitions: int, timeout_ms: int) -> None:
        """``timeout_ms``: the subscription's; a request left unanswered waits twice that."""
        self.partitions = partitions
        self.lock = threading.Lock()
        self.requests = 0
        self.taken: list[list[dict[str, Any]]] = []  # batches answered 204, in the order answered
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                with endpoint.lock:
                    endpoint.requests += 1
                    n = endpoint.requests
                    if n % 2 == 0:
                        endpoint.taken.append(body["records"])
                if n % 2 == 0:
                    self.send_response(204)
                elif n % 4 == 1:
                    self.send_response(500)
                else:
                    time.sleep(timeout_ms / 1000 * 2)  # the gateway gave up meanwhile
                    self.send_response(503)
                self.send_header("content-length", "0")
                try:
                    self.end_headers()
                except OSError:
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def batches(self) -> list[list[dict[str, Any]]]:
        with self.lock:
            return list(self.taken)

    def delivered_through(self) -> dict[int, int]:
        """Per partition, the offset after the contiguous run of records taken from offset 0."""
        seen: dict[int, set[int]] = {p: set() for p in range(self.partitions)}
        for batch in self.batches():
            for record in batch:
                seen[record["partition"]].add(record["offset"])
        through = {}
        for p, offsets in seen.items():
            end = 0
            while end in offsets:
                end += 1
            through[p] = end
        return through

    def __enter__(self) -> FlakyEndpoint:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class ScriptedEndpoint:
    """Answers each POST with the next status of ``statuses`` (then ``default``), after calling
    ``on_post`` with the number of POSTs so far; keeps every body."""

    def __init__(self, default: int = 204) -> None:
        self.default = default
        self.statuses: list[int] = []
        self.bodies: list[dict[str, Any]] = []
        self.on_post: Callable[[int], None] = lambda n: None
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                endpoint.bodies.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
                endpoint.on_post(len(endpoint.bodies))
                self.send_response(endpoint.statuses.pop(0) if endpoint.statuses else endpoint.default)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def __enter__(self) -> ScriptedEndpoint:
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

"""One connection to one broker, as the scenarios see it.

Built on ``helpers.raw_client.RawClient`` (kio entities with the request header their schema names;
responses read with kio after the response header their schema names, refusing leftover bytes).
What a scenario gets back is always a value, never an exception, so that both brokers' behaviour
can be recorded and compared even when one of them misbehaves:

- the decoded kio response;
- ``Closed``: the broker closed the connection instead of answering (the next call reconnects);
- ``Undecodable``: bytes came back but do not parse as the expected response;
- ``Unanswered``: nothing came back within the timeout.

``send_version`` sends a request's body under another version number in the header, for the
unsupported-version probes; the answer, if any, is kept as raw bytes after the correlation id.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from kio.index import load_response_schema

from helpers.raw_client import ConnectionClosed, RawClient, decode_response, encode_request, raw_request


@dataclass(frozen=True)
class Closed:
    """The broker closed the connection without an answer."""


@dataclass(frozen=True)
class Unanswered:
    """No answer and no close within the timeout."""


@dataclass(frozen=True)
class Undecodable:
    """An answer that does not decode as the response schema of the request's version."""

    reason: str


@dataclass(frozen=True)
class RawAnswer:
    """An answer kept as bytes: the correlation id matched, ``body`` is everything after it."""

    body: bytes


Outcome = Any  # a kio response, or one of the classes above


class Wire:
    """A lazily opened, automatically reopened connection to ``host:port``."""

    def __init__(self, host: str, port: int, timeout: float = 15.0) -> None:
        self.host = host
        self.port = port
        self.timeout = timeout
        self._client: RawClient | None = None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _connection(self) -> RawClient:
        if self._client is None:
            self._client = RawClient(self.host, self.port, timeout=self.timeout)
        return self._client

    def call(self, request: Any) -> Outcome:
        """Send a kio request and decode the answer with the response schema of the same version."""
        response_type = load_response_schema(request.__api_key__, request.__version__)
        frame = self._exchange(request)
        if not isinstance(frame, bytes):
            return frame
        try:
            correlation_id, response = decode_response(response_type, frame)
        except Exception as exc:  # any parse failure is an observation, not a crash
            self.close()
            return Undecodable(f"{type(exc).__name__}: {exc}")
        if correlation_id != self._last_correlation_id:
            self.close()
            return Undecodable(f"correlation id {correlation_id}, expected {self._last_correlation_id}")
        return response

    def start(self, request: Any) -> tuple[Any, int]:
        """Send a request whose answer comes later (a JoinGroup held back by a rebalance); pass what
        this returns to ``finish``. Other requests must go through other connections meanwhile."""
        client = self._connection()
        correlation_id = client.next_correlation_id()
        client.send_frame(encode_request(request, correlation_id=correlation_id))
        return request, correlation_id

    def finish(self, pending: tuple[Any, int]) -> Outcome:
        """The answer to a request sent with ``start``."""
        request, correlation_id = pending
        self._last_correlation_id = correlation_id
        response_type = load_response_schema(request.__api_key__, request.__version__)
        try:
            frame = self._connection().receive_frame()
        except (ConnectionClosed, ConnectionResetError):
            self.close()
            return Closed()
        except TimeoutError:
            self.close()
            return Unanswered()
        try:
            received, response = decode_response(response_type, frame)
        except Exception as exc:  # any parse failure is an observation
            self.close()
            return Undecodable(f"{type(exc).__name__}: {exc}")
        if received != correlation_id:
            return Undecodable(f"correlation id {received}, expected {correlation_id}")
        return response

    def send_only(self, request: Any) -> None:
        """Send without reading an answer (Produce with acks=0 gets none)."""
        client = self._connection()
        client.send_frame(encode_request(request, correlation_id=client.next_correlation_id()))

    def send_version(self, request: Any, version: int, api_key: int | None = None) -> Outcome:
        """Send ``request``'s body with ``version`` (and ``api_key``) in the header; a ``RawAnswer``,
        ``Closed`` or ``Unanswered`` comes back. The connection is not reused afterwards."""
        try:
            frame = self._exchange(request, api_key=api_key, api_version=version)
            if not isinstance(frame, bytes):
                return frame
            (correlation_id,) = struct.unpack_from(">i", frame)
            if correlation_id != self._last_correlation_id:
                return Undecodable(f"correlation id {correlation_id}, expected {self._last_correlation_id}")
            return RawAnswer(frame[4:])
        finally:
            self.close()

    def send_raw(self, api_key: int, version: int, body: bytes) -> Outcome:
        """Send a hand-made body under request header v1; ``RawAnswer``, ``Closed`` or ``Unanswered``.
        The connection is not reused afterwards."""
        try:
            client = self._connection()
            self._last_correlation_id = client.next_correlation_id()
            frame = self._send_payload(client, raw_request(api_key, version, self._last_correlation_id, body))
            if not isinstance(frame, bytes):
                return frame
            return RawAnswer(frame[4:])
        finally:
            self.close()

    def _exchange(self, request: Any, **header: Any) -> bytes | Closed | Unanswered:
        client = self._connection()
        self._last_correlation_id = client.next_correlation_id()
        payload = encode_request(request, correlation_id=self._last_correlation_id, **header)
        return self._send_payload(client, payload)

    def _send_payload(self, client: RawClient, payload: bytes) -> bytes | Closed | Unanswered:
        try:
            client.send_frame(payload)
            return client.receive_frame()
        except (ConnectionClosed, BrokenPipeError, ConnectionResetError):
            self.close()
            return Closed()
        except TimeoutError:
            self.close()
            return Unanswered()

"""One outbound Kafka-protocol connection, for broker-to-broker requests (replica fetches).

Requests and responses are kio entities: a request is encoded with the header its schema names, sent
with its length prefix, and the answer with the same correlation id is decoded with the response
schema of the same API version. One request at a time per connection (the replica fetcher sends a
fetch and waits for it), so no correlation table is needed; a mismatched correlation id means the
stream is out of step and the connection is dropped.

Errors: anything that breaks the stream (connect failure, EOF, timeout, a frame that does not decode)
raises ``BrokerUnreachable``; the caller backs off (``replica.fetch.backoff.ms``) and reconnects.
Brokers reach each other over plain TCP (the inter-broker listener must be PLAINTEXT, docs/cluster.md);
a caller that talks to a secured listener (the governor, ``tidelog.clients.security``) gives an
``ssl.SSLContext`` and an ``authenticate`` step, run once right after each connect and before the
connection counts as made: a failed authentication closes it and raises what the step raised.
"""

from __future__ import annotations

import asyncio
import io
import ssl
import struct
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from kio.serial import entity_reader, entity_writer

from tidelog.protocol.apis import response_schema

T = TypeVar("T")
_SIZE = struct.Struct(">i")
MAX_RESPONSE_BYTES = 256 * 1024 * 1024


class BrokerUnreachable(Exception):
    """The connection to another broker failed or went out of step; reconnect after a back-off."""


class KafkaConnection:
    def __init__(self, host: str, port: int, client_id: str, *, timeout_s: float = 30.0,
                 tls: ssl.SSLContext | None = None,
                 authenticate: Callable[[KafkaConnection], Awaitable[None]] | None = None) -> None:
        self.host, self.port = host, port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.tls = tls
        self.authenticate = authenticate
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation_id = 0

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def connect(self) -> None:
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, ssl=self.tls,
                                        server_hostname=self.host if self.tls is not None else None),
                self.timeout_s,
            )
        except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError: a refused certificate lands here
            over = " over TLS" if self.tls is not None else ""
            why = str(exc) or type(exc).__name__
            if self.tls is not None and isinstance(exc, (ConnectionResetError, ssl.SSLEOFError)):
                why += " (the broker hung up on the TLS handshake: a PLAINTEXT or SASL_PLAINTEXT listener?)"
            raise BrokerUnreachable(f"cannot connect to broker at {self.host}:{self.port}{over}: {why}") from None
        if self.authenticate is not None:
            try:
                await self.authenticate(self)
            except BaseException:
                await self.aclose()
                raise

    async def call(self, request: Any, *, timeout_s: float | None = None) -> Any:
        """Send ``request`` (a kio request entity) and return the decoded response."""
        if not self.connected:
            await self.connect()
        assert self._reader is not None and self._writer is not None
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        payload = self._encode(request, self._correlation_id)
        try:
            self._writer.write(_SIZE.pack(len(payload)) + payload)
            await self._writer.drain()
            frame = await asyncio.wait_for(self._read_frame(), timeout_s or self.timeout_s)
        except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            self.close()
            raise BrokerUnreachable(f"broker at {self.host}:{self.port}: {str(exc) or type(exc).__name__}") from None
        response_type = response_schema(request.__api_key__, request.__version__)
        try:
            header, offset = entity_reader(response_type.__header_schema__)(frame, 0)
            body, _size = entity_reader(response_type)(frame, offset)
        except Exception as exc:
            self.close()
            raise BrokerUnreachable(f"broker at {self.host}:{self.port} sent an undecodable answer: {exc}") from None
        if header.correlation_id != self._correlation_id:
            self.close()
            raise BrokerUnreachable(f"broker at {self.host}:{self.port} answered out of order")
        return body

    def _encode(self, request: Any, correlation_id: int) -> bytes:
        header_type = type(request).__header_schema__
        header = header_type(
            request_api_key=request.__api_key__, request_api_version=request.__version__,
            correlation_id=correlation_id, client_id=self.client_id,
        )
        buffer = io.BytesIO()
        entity_writer(header_type)(buffer, header)
        entity_writer(type(request))(buffer, request)
        return buffer.getvalue()

    async def _read_frame(self) -> bytes:
        assert self._reader is not None
        (size,) = _SIZE.unpack(await self._reader.readexactly(4))
        if not 0 < size <= MAX_RESPONSE_BYTES:
            raise OSError(f"response frame of {size} bytes")
        return await self._reader.readexactly(size)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def aclose(self, timeout_s: float = 1.0) -> None:
        """``close``, then wait for the transport to be gone (a TLS one exchanges close_notify first):
        for callers whose event loop may end right after, which would find the transport still open."""
        writer = self._writer
        self.close()
        if writer is None:
            return
        try:
            await asyncio.wait_for(writer.wait_closed(), timeout_s)
        except (OSError, TimeoutError):
            writer.transport.abort()

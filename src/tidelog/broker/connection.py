"""One client connection at the transport level: frames in, received in place; responses out.

``KafkaProtocol`` is an asyncio ``BufferedProtocol``: the event loop reads from the socket straight
into the buffers of the connection's ``FrameDecoder`` (``get_buffer``/``buffer_updated``), so the
body of a large request is written by the kernel where it is decoded, with no copy through a
``StreamReader``. Complete frames queue up for the connection's task, which takes them one at a time
with ``next_frame()`` and writes responses through an ordinary ``asyncio.StreamWriter``.

Flow control both ways:

- in: while more than ``MAX_QUEUED_BYTES`` of frames wait for the task, reading is paused, so a
  client that pipelines cannot make the broker buffer without bound (Kafka mutes a channel while it
  serves a request from it);
- out: ``FlowControlMixin`` pauses and resumes the writer for ``drain()``.

A framing error (bad size) stops reading; ``next_frame()`` raises it once the frames received before
it have been taken, so their responses are written first. End of stream likewise: the frames before
it are served, then ``next_frame()`` returns None. On TLS, asyncio cannot keep a half-closed
connection open, so there the end of stream closes the transport at once (as asyncio's streams do).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, cast

from tidelog.protocol.errors import ProtocolError
from tidelog.protocol.framing import Frame, FrameDecoder

MAX_QUEUED_BYTES = 4 * 1024 * 1024  # frames waiting for the task beyond this pause reading

OnConnect = Callable[["KafkaProtocol", asyncio.StreamWriter], Coroutine[Any, Any, None]]


class KafkaProtocol(asyncio.BufferedProtocol):
    """Frames of one connection, read in place; the task that serves them starts on connect.

    Not a subclass of asyncio's ``FlowControlMixin`` (a ``Protocol``): uvloop would then call
    ``data_received`` instead of reading in place. The few lines of write flow control that
    ``StreamWriter.drain()`` needs are here instead.
    """

    def __init__(self, decoder: FrameDecoder, on_connect: OnConnect, over_tls: bool) -> None:
        self.loop = asyncio.get_running_loop()  # protocols are made by the loop's server, inside the loop
        self._writing_paused = False
        self._drain_waiters: deque[asyncio.Future[None]] = deque()
        self._connection_lost = False
        self.decoder = decoder
        self._on_connect = on_connect
        self._over_tls = over_tls
        self._frames: deque[tuple[Frame, float]] = deque()  # (frame, perf_counter when it completed)
        self._queued_bytes = 0
        self._reading_paused = False
        self._error: ProtocolError | None = None
        self._eof = False
        self._waiter: asyncio.Future[None] | None = None
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None  # held here: the loop keeps only weak references to tasks
        self.last_received = time.monotonic()

    # -- asyncio callbacks ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's
        writer = asyncio.StreamWriter(self.transport, self, None, self.loop)
        self.task = self.loop.create_task(self._on_connect(self, writer))

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self._received(self.decoder.buffer_updated, nbytes)

    def data_received(self, data: bytes) -> None:
        """For a transport that does not read in place: the bytes are copied into the decoder."""
        self._received(self.decoder.feed, data)

    def _received(self, decode: Callable[[Any], list[Frame]], data: Any) -> None:
        now = time.perf_counter()
        self.last_received = time.monotonic()
        try:
            frames = decode(data)
        except ProtocolError as exc:
            self._error = exc
            self._pause_reading()
            frames = []
        for frame in frames:
            self._frames.append((frame, now))
            self._queued_bytes += len(frame)
        if self._queued_bytes > MAX_QUEUED_BYTES:
            self._pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return not self._over_tls  # keep the transport until the queued frames are answered

    def connection_lost(self, exc: Exception | None) -> None:
        self._connection_lost = True
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_exception(exc or ConnectionResetError("connection lost"))
        self._eof = True
        self._wake()

    # -- write flow control, as StreamWriter.drain() expects of its protocol ---------------------

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def _drain_helper(self) -> None:
        if self._connection_lost:
            raise ConnectionResetError("connection lost")
        if not self._writing_paused:
            return
        waiter = self.loop.create_future()
        self._drain_waiters.append(waiter)
        try:
            await waiter
        finally:
            self._drain_waiters.remove(waiter)

    # -- the connection's task ------------------------------------------------------------------

    async def next_frame(self) -> tuple[Frame, float] | None:
        """The next complete frame and when it arrived; None at end of stream. Raises framing errors."""
        while not self._frames:
            if self._error is not None:
                raise self._error
            if self._eof:
                return None
            self._waiter = self.loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        frame, received = self._frames.popleft()
        self._queued_bytes -= len(frame)
        if self._reading_paused and self._error is None and self._queued_bytes <= MAX_QUEUED_BYTES // 2:
            self._reading_paused = False
            if self.transport is not None and not self.transport.is_closing():
                self.transport.resume_reading()
        return frame, received

    def _pause_reading(self) -> None:
        if not self._reading_paused and self.transport is not None and not self.transport.is_closing():
            self._reading_paused = True
            self.transport.pause_reading()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

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
- in, across connections: every frame taken off the socket is charged to the broker-wide
  ``ReceiveBudget`` (``queued.max.request.bytes``), in one addition per read, and a connection that
  holds frames stops reading while the budget is full (one that holds none reads on, so every client
  gets a request at a time through). A request larger than the receive area is read past it only
  once the budget has reserved its declared size; until then reading is paused. A frame's charge
  travels with it and is given back when the task asks for the next frame (the previous one has
  been served) or the connection ends;
- out: ``FlowControlMixin`` pauses and resumes the writer for ``drain()``.

``request_started`` is when the request being received began arriving (None between requests, and
while the broker itself keeps reading paused): the server closes a connection whose request takes
longer than ``socket.request.read.timeout.ms`` to arrive, however often its bytes trickle in.

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

from tidelog.broker.receive_budget import ReceiveBudget, Waiter
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

    def __init__(
        self, decoder: FrameDecoder, on_connect: OnConnect, over_tls: bool, budget: ReceiveBudget | None = None,
    ) -> None:
        self.loop = asyncio.get_running_loop()  # protocols are made by the loop's server, inside the loop
        self._writing_paused = False
        self._drain_waiters: deque[asyncio.Future[None]] = deque()
        self._connection_lost = False
        self.decoder = decoder
        self._on_connect = on_connect
        self._over_tls = over_tls
        # (frame, perf_counter when it completed, bytes of the receive budget it holds)
        self._frames: deque[tuple[Frame, float, int]] = deque()
        self._queued_bytes = 0
        self._paused_for: set[str] = set()  # why: "queue", "budget", "full", "error", "throttle"
        self._budget = budget
        self._receiving_reserved = 0  # budget held by the frame being received
        self._serving_reserved = 0  # budget held by the frame the task is serving
        self._budget_waiter: Waiter | None = None
        self._error: ProtocolError | None = None
        self._eof = False
        self._waiter: asyncio.Future[None] | None = None
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None  # held here: the loop keeps only weak references to tasks
        self.last_received = time.monotonic()
        self.request_started: float | None = None

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
            self._pause("error")
            frames = []
        budget = self._budget
        if frames:
            received = 0
            for frame in frames:
                size = len(frame)
                self._frames.append((frame, now, size if budget is not None else 0))
                received += size
            self._queued_bytes += received
            if budget is not None:
                # The first frame may be the large one a reservation was made for; the rest are charged here.
                settled, self._receiving_reserved = self._receiving_reserved, 0
                budget.received(received - settled)
                if settled:
                    budget.settle(settled)
            if self._queued_bytes > MAX_QUEUED_BYTES:
                self._pause("queue")
        if self._error is None and budget is not None:
            self._reserve_for_pending_frame()
            if (not self._receiving_reserved and self._budget_waiter is None and "full" not in self._paused_for
                    and not budget.may_read(self._holding())):
                self._pause("full")
                budget.pause_reading(self, self._budget_has_room)
        self._track_request_start()
        self._wake()

    def _holding(self) -> bool:
        """Does this connection hold received frames (queued, or the one being served)?"""
        return self._queued_bytes > 0 or self._serving_reserved > 0

    def _budget_has_room(self) -> None:
        self._unpause("full")

    def _reserve_for_pending_frame(self) -> None:
        """Before a frame larger than the receive area is read past it, reserve its size or pause."""
        budget = self._budget
        size = self.decoder.pending_frame_size
        if budget is None or size is None or self._receiving_reserved or self._budget_waiter is not None:
            return
        if size + 4 <= self.decoder.receive_area:
            return
        if budget.try_reserve(size):
            self._receiving_reserved = size
            return
        self._pause("budget")
        self._budget_waiter = budget.wait(size, self._budget_granted)

    def _budget_granted(self) -> None:
        waiter = self._budget_waiter
        assert waiter is not None
        self._budget_waiter = None
        self._receiving_reserved = waiter.size
        self._unpause("budget")

    def _track_request_start(self) -> None:
        if self.decoder.buffered_bytes == 0 or self._paused_for:
            self.request_started = None
        elif self.request_started is None:
            self.request_started = time.monotonic()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return not self._over_tls  # keep the transport until the queued frames are answered

    def connection_lost(self, exc: Exception | None) -> None:
        self._connection_lost = True
        self.request_started = None
        if self._budget is not None:
            self._budget.forget_reader(self)
            if self._budget_waiter is not None:
                self._budget.cancel(self._budget_waiter)
                self._budget_waiter = None
            if self._receiving_reserved:
                self._budget.release(self._receiving_reserved)  # the partial frame will never be served
                self._receiving_reserved = 0
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
        self._release_served()
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
        frame, received, reserved = self._frames.popleft()
        self._queued_bytes -= len(frame)
        self._serving_reserved = reserved
        if "queue" in self._paused_for and self._queued_bytes <= MAX_QUEUED_BYTES // 2:
            self._unpause("queue")
        return frame, received

    def _release_served(self) -> None:
        budget = self._budget
        if self._serving_reserved and budget is not None:
            budget.discharge(self._serving_reserved)
            self._serving_reserved = 0
            if "full" in self._paused_for and not self._queued_bytes:  # holds nothing: may read its next request
                budget.forget_reader(self)
                self._unpause("full")

    def release_budget(self) -> None:
        """The task is done with this connection: give back every reservation it still holds."""
        self._release_served()
        budget = self._budget
        if budget is None:
            return
        budget.forget_reader(self)
        for index, (frame, received, reserved) in enumerate(self._frames):
            if reserved:
                budget.discharge(reserved)
                self._frames[index] = (frame, received, 0)
        if self._budget_waiter is not None:
            budget.cancel(self._budget_waiter)
            self._budget_waiter = None
        if self._receiving_reserved:
            budget.release(self._receiving_reserved)
            self._receiving_reserved = 0

    def mute(self) -> None:
        """Read nothing more until ``unmute`` (a quota's throttle time)."""
        self._pause("throttle")

    def unmute(self) -> None:
        self._unpause("throttle")

    def _pause(self, reason: str) -> None:
        if not self._paused_for and self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()
        self._paused_for.add(reason)
        self.request_started = None  # the broker holds this request back: its sender is not late

    def _unpause(self, reason: str) -> None:
        self._paused_for.discard(reason)
        if not self._paused_for:
            if self.transport is not None and not self.transport.is_closing():
                self.transport.resume_reading()
            self._track_request_start()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

"""Kafka framing: every request is a big-endian int32 size followed by that many bytes.

``FrameDecoder`` turns a byte stream into complete frames (without the size prefix), whatever the
chunking: half a frame, many frames, a frame and a half. It owns the receive buffers, so a network
layer can have the kernel write straight into them (asyncio's ``BufferedProtocol``):

    view = decoder.get_buffer()        # where the next received bytes go
    n = sock.recv_into(view)           # (the event loop does this)
    frames = decoder.buffer_updated(n) # the frames now complete, in order

``feed(data)`` does the same for bytes received elsewhere (it copies them in).

Buffers:

- **The receive area**, a 64 KiB ``bytearray``, holds small frames and the start of large ones. A
  complete frame is copied out of it (``bytes``); the area is compacted (the unparsed tail moved to
  the front) only when it is full, so each byte is moved at most once more. Areas come from a small
  pool shared by the connections when bytes arrive and go back to it as soon as everything received
  has been returned as frames, so an idle connection holds no receive memory (1,000 idle connections
  once cost 256 MiB of RSS with an area each).
- **A frame of its own**: when an incomplete frame fills the whole area, it moves to a
  ``bytearray`` of exactly its size, and from then on ``get_buffer`` returns the rest of that
  buffer: the kernel writes the remaining body in place and the frame is handed out as a
  read-only ``memoryview`` of it, never copied again. A 1 MiB Produce request is copied once (the first
  64 KiB); before this design every byte was copied four times between the socket and here.
  A frame declared larger than ``IN_PLACE_MAX`` grows as its bytes arrive instead (memory follows
  what was received, not what a length prefix claims).

The size is checked as soon as its 4 bytes arrive, before any of the body is kept, so a hostile
length never makes the broker allocate more than it received plus the receive area.
"""

from __future__ import annotations

import struct

from tidelog.protocol.errors import FrameError

_SIZE = struct.Struct(">i")

RECEIVE_AREA = 64 * 1024
POOLED_AREAS = 64  # free receive areas kept for reuse (per size)
_free_areas: dict[int, list[bytearray]] = {}  # used from the event loop's thread only
IN_PLACE_MAX = 16 * 1024 * 1024  # larger declared frames grow as they arrive instead of being allocated whole

Frame = bytes | memoryview


class FrameDecoder:
    """Splits a byte stream into Kafka frames; sans-IO, one per connection."""

    def __init__(self, max_frame_bytes: int, receive_area: int = RECEIVE_AREA) -> None:
        if max_frame_bytes < 0:
            raise ValueError("max_frame_bytes must be >= 0")
        if receive_area < 8:
            raise ValueError("receive_area must be >= 8")
        self.max_frame_bytes = max_frame_bytes
        self._area_size = receive_area
        self._area: bytearray | None = None  # taken from the pool while it holds unreturned bytes
        self._start = 0  # first byte of the area not yet returned as (part of) a frame
        self._end = 0  # one past the last byte received into the area
        self._frame: bytearray | None = None  # a large frame being received into its own buffer
        self._size = 0  # the declared size of ``_frame``
        self._filled = 0  # bytes of ``_frame`` received so far
        self._in_place = True  # ``_frame`` has its final size (else it grows from the area)
        self._failed: FrameError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet returned as a frame (part of the next frame)."""
        return self._end - self._start + (self._filled if self._frame is not None else 0)

    @property
    def pending_frame_size(self) -> int | None:
        """The declared size of the frame being received, once its 4 size bytes are in; else None.

        A frame larger than ``receive_area - 4`` gets a buffer of its own when the area fills: a
        network layer that budgets memory reserves this size before reading further (and pauses
        reading until it may)."""
        if self._frame is not None:
            return self._size
        if self._area is None or self._end - self._start < 4:
            return None
        return int(_SIZE.unpack_from(self._area, self._start)[0])

    @property
    def receive_area(self) -> int:
        return self._area_size

    # -- receiving in place -----------------------------------------------------------------

    def get_buffer(self) -> memoryview:
        """Where the next received bytes should be written (never empty)."""
        if self._failed is not None:
            raise self._failed
        if self._frame is not None and self._in_place:
            return memoryview(self._frame)[self._filled :]
        if self._area is None:
            pool = _free_areas.get(self._area_size)
            self._area = pool.pop() if pool else bytearray(self._area_size)
        if self._end == len(self._area):
            if self._start:
                self._compact()
            else:
                self._own_buffer()  # an incomplete frame fills the whole area
                return self.get_buffer()
        return memoryview(self._area)[self._end :]

    def buffer_updated(self, count: int) -> list[Frame]:
        """``count`` bytes were written into the last ``get_buffer()``; return the frames now complete.

        Raises ``FrameError`` on a negative or over-limit size; the decoder then stays failed,
        since the stream cannot be resynchronised.
        """
        if self._failed is not None:
            raise self._failed
        frames: list[Frame] = []
        self._receive(count, frames)
        if self._start == self._end and self._area is not None:  # nothing pending in the area: give it back
            pool = _free_areas.setdefault(len(self._area), [])
            if len(pool) < POOLED_AREAS:
                pool.append(self._area)
            self._area = None
        return frames

    def _receive(self, count: int, frames: list[Frame]) -> None:
        frame = self._frame
        if frame is None:
            self._end += count
            self._parse(frames)
            return
        if self._in_place:
            self._filled += count
            if self._filled == self._size:
                frames.append(memoryview(frame).toreadonly())
                self._frame = None
            return
        # Growing: the bytes landed at the front of the (otherwise empty) area; move the frame's share.
        assert self._area is not None
        take = min(count, self._size - self._filled)
        with memoryview(self._area) as view:
            frame += view[:take]
        self._filled += take
        if self._filled < self._size:
            return
        frames.append(memoryview(frame).toreadonly())
        self._frame = None
        self._start, self._end = take, count  # what follows belongs to the next frames
        self._parse(frames)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Add bytes received elsewhere; return every frame now complete, in order."""
        if self._failed is not None:
            raise self._failed
        frames: list[Frame] = []
        source = memoryview(data).cast("B")
        offset, total = 0, len(source)
        while offset < total:
            target = self.get_buffer()
            count = min(len(target), total - offset)
            target[:count] = source[offset : offset + count]
            target.release()
            offset += count
            frames += self.buffer_updated(count)
        return frames

    # -- internals ----------------------------------------------------------------------------

    def _check(self, size: int) -> None:
        if size < 0:
            self._failed = FrameError(f"negative frame size {size}", size=size)
        elif size > self.max_frame_bytes:
            self._failed = FrameError(
                f"frame of {size} bytes is larger than the limit of {self.max_frame_bytes}", size=size
            )
        else:
            return
        raise self._failed

    def _parse(self, frames: list[Frame]) -> None:
        area = self._area
        assert area is not None
        start, end = self._start, self._end
        with memoryview(area) as view:
            while end - start >= 4:
                (size,) = _SIZE.unpack_from(area, start)
                self._check(size)
                if end - start - 4 < size:
                    break
                frames.append(bytes(view[start + 4 : start + 4 + size]))
                start += 4 + size
        self._start, self._end = start, end
        if start == end:
            self._start = self._end = 0

    def _compact(self) -> None:
        """Move the unparsed tail of the area to its front (same length: no reallocation)."""
        start, end = self._start, self._end
        assert self._area is not None
        self._area[: end - start] = self._area[start:end]
        self._start, self._end = 0, end - start

    def _own_buffer(self) -> None:
        """Move the incomplete frame that fills the area into a buffer of its own."""
        assert self._area is not None
        (size,) = _SIZE.unpack_from(self._area, 0)  # checked when its 4 bytes arrived
        received = memoryview(self._area)[4 : self._end]
        if size <= IN_PLACE_MAX:
            frame = bytearray(size)
            frame[: len(received)] = received
            self._in_place = True
        else:
            frame = bytearray(received)
            self._in_place = False
        received.release()
        self._frame, self._size, self._filled = frame, size, self._end - 4
        self._start = self._end = 0

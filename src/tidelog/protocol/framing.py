"""Kafka framing: every request is a big-endian int32 size followed by that many bytes.

``FrameDecoder`` is fed whatever the socket produced (half a frame, many frames, a frame and a
half) and hands back complete frames, without the size prefix.

Buffering: received bytes go into one ``bytearray`` read from an offset; consumed bytes are
dropped by compaction only when the dead prefix is at least half the buffer, so each byte is moved
a bounded number of times (no quadratic copying on many small frames). When nothing is buffered
and the chunk is an immutable ``bytes`` object, whole frames are returned as ``memoryview`` slices
of that chunk with no copy at all.

The size is checked as soon as its 4 bytes arrive, before any of the body is buffered, so a
hostile length never makes the broker allocate.
"""

from __future__ import annotations

import struct

from tidelog.protocol.errors import FrameError

_SIZE = struct.Struct(">i")

Frame = bytes | memoryview


class FrameDecoder:
    """Splits a byte stream into Kafka frames; sans-IO, one per connection."""

    def __init__(self, max_frame_bytes: int) -> None:
        if max_frame_bytes < 0:
            raise ValueError("max_frame_bytes must be >= 0")
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()
        self._start = 0
        self._failed: FrameError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet returned as a frame (part of the next frame)."""
        return len(self._buffer) - self._start

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Add received bytes; return every frame now complete, in order.

        Raises ``FrameError`` on a negative or over-limit size; the decoder then stays failed,
        since the stream cannot be resynchronised.
        """
        if self._failed is not None:
            raise self._failed
        frames: list[Frame] = []
        if self._start == len(self._buffer) and isinstance(data, bytes):
            offset = self._split_immutable(data, frames)
            if offset == len(data):
                return frames
            data = memoryview(data)[offset:]
        self._buffer += data
        self._drain(frames)
        return frames

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

    def _split_immutable(self, data: bytes, frames: list[Frame]) -> int:
        view = memoryview(data)
        offset = 0
        end = len(data)
        while end - offset >= 4:
            (size,) = _SIZE.unpack_from(data, offset)
            self._check(size)
            if end - offset - 4 < size:
                break
            frames.append(view[offset + 4 : offset + 4 + size])
            offset += 4 + size
        return offset

    def _drain(self, frames: list[Frame]) -> None:
        buf = self._buffer
        start = self._start
        end = len(buf)
        with memoryview(buf) as view:
            while end - start >= 4:
                (size,) = _SIZE.unpack_from(buf, start)
                self._check(size)
                if end - start - 4 < size:
                    break
                frames.append(bytes(view[start + 4 : start + 4 + size]))
                start += 4 + size
        if start == end:
            buf.clear()
            start = 0
        elif start * 2 >= end:
            del buf[:start]
            start = 0
        self._start = start

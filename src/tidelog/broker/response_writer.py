"""Writing a response to its connection: small parts joined, large ones uncopied, file ranges by sendfile.

A response is a list of parts (``protocol.codec.encode_response``). Most are ``bytes``; a Fetch
response also carries each partition's records as a ``FileSlices``: the (fd, position, length)
ranges of the segment files that hold them, kept open by their segments for as long as the object
lives. The encoder only needs their length; this module puts the bytes on the wire.

Two ways, chosen per response:

- **Direct** (plain-TCP listeners, at least ``SENDFILE_MIN_BYTES`` of file bytes, nothing buffered in
  the transport): the frame goes to the socket's descriptor, the memory parts with ``writev`` and
  the file ranges with ``sendfile(2)`` (page cache to socket, no copy through Python, no ``pread``).
  All of it on the event loop's thread, never blocking: first as much as the socket takes now (the
  kernel bounds it by the socket's buffer), then, with the loop watching a duplicate of the
  descriptor for writability, the next piece each time the client has drained some. The loop
  serves every other connection in between; this connection's task waits for the end, so its
  responses stay in request order and nothing else writes to the socket meanwhile. Until session 5
  a worker thread sent the rest; without its hand-offs ConsumerPerformance went 294 → 357 MB/s with
  a quarter less broker CPU (bench/RESULTS.md, "Change 14"). When the socket does not drain for
  ``STALL_S`` (a slow or stopped client) what is left is handed to the transport the buffered way,
  so a stopped client does not pin segment files for longer than that.
- **Buffered** (TLS, small responses, the remainder after a stall): file ranges are read with one
  ``pread`` each and the parts handed to the transport: parts under ``COALESCE_BYTES`` joined into
  one write, larger ones as memoryviews (asyncio's ``writelines`` would copy them three times).

Measurements behind the thresholds are in bench/RESULTS.md ("sendfile for Fetch").
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Any

from tidelog.storage.log import read_ranges

COALESCE_BYTES = 64 * 1024  # memory parts below this are joined before writing; larger ones are not copied
SENDFILE_MIN_BYTES = 128 * 1024  # file bytes in a response from which it is sent directly (sendfile)
STALL_S = 0.1  # a direct send whose socket does not drain for this long hands the rest to the transport
_IOV_MAX = 1024

Part = Any  # bytes | memoryview | FileSlices
Chunk = memoryview | tuple[int, int, int]  # memory, or (fd, position, length) of a file


class FileSlices:
    """Record bytes that stay in their files: ranges of (fd, position, length).

    ``owner`` keeps the descriptors open (storage's ``FetchData``, which holds the segments).
    """

    __slots__ = ("length", "owner", "ranges")

    def __init__(self, ranges: Sequence[tuple[int, int, int]], owner: object) -> None:
        self.ranges = list(ranges)
        self.owner = owner
        self.length = sum(length for _, _, length in self.ranges)

    def __len__(self) -> int:
        return self.length

    def read(self) -> bytes:
        """The bytes, one ``pread`` per range."""
        return read_ranges(self.ranges)


def write_buffered(writer: asyncio.StreamWriter, parts: Sequence[Part]) -> None:
    """Queue a response on the transport: file ranges read, small parts joined, large ones uncopied."""
    buffers: list[bytes | memoryview] = [part.read() if type(part) is FileSlices else part for part in parts]
    if len(buffers) == 1 or sum(map(len, buffers)) <= COALESCE_BYTES:
        writer.writelines(buffers)
        return
    small: list[bytes | memoryview] = []
    for part in buffers:
        if len(part) < COALESCE_BYTES:
            small.append(part)
            continue
        if small:
            writer.write(b"".join(small))
            small.clear()
        writer.write(memoryview(part))
    if small:
        writer.write(b"".join(small))


class ResponseWriter:
    """Writes responses for every connection of a server."""

    def __init__(self, min_direct_bytes: int = SENDFILE_MIN_BYTES) -> None:
        self.min_direct_bytes = min_direct_bytes

    async def write(self, writer: asyncio.StreamWriter, parts: Sequence[Part], direct_allowed: bool) -> None:
        """Write one response; returns once it is on the socket (direct) or queued (buffered)."""
        if not direct_allowed or not self._worth_direct(parts) or writer.transport.get_write_buffer_size():
            write_buffered(writer, parts)
            return
        sock = writer.get_extra_info("socket")
        if sock is None or writer.transport.is_closing():
            write_buffered(writer, parts)
            return
        chunks = _chunks(parts)
        # First as much as the socket takes now: a response that fits in the socket's buffer (the
        # common case for a consumer that keeps up) is done here, without a writability watch.
        index, offset = _send_chunks(sock.fileno(), chunks, 0, 0)
        if index == len(chunks):
            return
        index, offset = await _send_rest_on_loop(sock.fileno(), chunks, index, offset)
        if index < len(chunks):
            write_buffered(writer, _remainder(chunks, index, offset))

    def _worth_direct(self, parts: Sequence[Part]) -> bool:
        file_bytes = 0
        for part in parts:
            if type(part) is FileSlices:
                file_bytes += part.length
        return file_bytes >= self.min_direct_bytes


def _chunks(parts: Sequence[Part]) -> list[Chunk]:
    chunks: list[Chunk] = []
    for part in parts:
        if type(part) is FileSlices:
            chunks.extend(r for r in part.ranges if r[2])
        elif len(part):
            chunks.append(memoryview(part))
    return chunks


def _remainder(chunks: list[Chunk], index: int, offset: int) -> list[bytes | memoryview]:
    out: list[bytes | memoryview] = []
    for i in range(index, len(chunks)):
        chunk = chunks[i]
        skip = offset if i == index else 0
        if isinstance(chunk, tuple):
            fd, position, length = chunk
            out.append(read_ranges([(fd, position + skip, length - skip)]))
        else:
            out.append(chunk[skip:])
    return out


async def _send_rest_on_loop(sock_fd: int, chunks: list[Chunk], index: int, offset: int) -> tuple[int, int]:
    """Send ``chunks`` from (index, offset) on as the socket drains, from the event loop's own thread.

    The loop watches a duplicate of the socket's descriptor for writability (the transport's own
    registration is on the original number, and an event loop refuses a second watcher on a
    transport's descriptor); each time it becomes writable, as much is sent as the socket takes.
    Returns the (index, offset) of the first unsent byte: the end, or where the socket stopped
    draining for ``STALL_S``. Connection errors propagate. The caller keeps the file descriptors in
    ``chunks`` open until this returns.
    """
    send = _LoopSend(chunks, index, offset)
    fd = os.dup(sock_fd)
    send.loop.add_writer(fd, send.on_writable, fd)
    try:
        await send.done
    finally:
        send.loop.remove_writer(fd)
        send.timer.cancel()
        os.close(fd)
    return send.index, send.offset


class _LoopSend:
    """The state of one response being sent by ``_send_rest_on_loop``."""

    def __init__(self, chunks: list[Chunk], index: int, offset: int) -> None:
        self.loop = asyncio.get_running_loop()
        self.done: asyncio.Future[None] = self.loop.create_future()
        self.chunks = chunks
        self.index = index
        self.offset = offset
        self.last_progress = self.loop.time()
        self.timer = self.loop.call_later(STALL_S, self.check_stall)

    def on_writable(self, fd: int) -> None:
        if self.done.done():
            return
        try:
            index, offset = _send_chunks(fd, self.chunks, self.index, self.offset)
        except OSError as exc:
            self.done.set_exception(exc)
            return
        if (index, offset) != (self.index, self.offset):
            self.index, self.offset = index, offset
            self.last_progress = self.loop.time()
        if index == len(self.chunks):
            self.done.set_result(None)

    def check_stall(self) -> None:
        """Give up when the socket has taken nothing for ``STALL_S``; else look again when it would be."""
        if self.done.done():
            return
        idle = self.loop.time() - self.last_progress
        if idle >= STALL_S:
            self.done.set_result(None)
        else:
            self.timer = self.loop.call_later(STALL_S - idle, self.check_stall)


def _send_chunks(fd: int, chunks: list[Chunk], index: int, offset: int) -> tuple[int, int]:
    """Write ``chunks`` from (index, offset) to the non-blocking socket ``fd`` until it is full;
    return the (index, offset) of the first unsent byte."""
    count = len(chunks)
    while index < count:
        chunk = chunks[index]
        try:
            if isinstance(chunk, tuple):
                source, position, length = chunk
                sent = os.sendfile(fd, source, position + offset, length - offset)
                if sent == 0:
                    raise OSError(f"file range shorter than its index says: ended {length - offset} bytes early")
            else:
                sent = os.writev(fd, _memory_run(chunks, index, offset))
        except BlockingIOError:
            return index, offset
        # Advance past what was sent: it may end inside a chunk or span several memory chunks.
        while sent and index < count:
            left = _chunk_len(chunks[index]) - offset
            if sent < left:
                offset += sent
                break
            sent -= left
            index += 1
            offset = 0
    return index, offset


def _memory_run(chunks: list[Chunk], index: int, offset: int) -> list[memoryview]:
    """The memory chunks from ``index`` up to the next file range (at most IOV_MAX of them)."""
    first = chunks[index]
    assert isinstance(first, memoryview)
    run = [first[offset:]]
    for chunk in chunks[index + 1 : index + _IOV_MAX]:
        if isinstance(chunk, tuple):
            break
        run.append(chunk)
    return run


def _chunk_len(chunk: Chunk) -> int:
    return chunk[2] if isinstance(chunk, tuple) else len(chunk)

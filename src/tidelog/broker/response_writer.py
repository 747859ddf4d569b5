"""Writing a response to its connection: small parts joined, large ones uncopied, file ranges by sendfile.

A response is a list of parts (``protocol.codec.encode_response``). Most are ``bytes``; a Fetch
response also carries each partition's records as a ``FileSlices``: the (fd, position, length)
ranges of the segment files that hold them, kept open by their segments for as long as the object
lives. The encoder only needs their length; this module puts the bytes on the wire.

Two ways, chosen per response:

- **Direct** (plain-TCP listeners, at least ``SENDFILE_MIN_BYTES`` of file bytes, nothing buffered in
  the transport): the frame goes to the socket's descriptor, the memory parts with ``writev`` and
  the file ranges with ``sendfile(2)`` (page cache to socket, no copy through Python, no ``pread``).
  First on the event loop's thread, as much as the socket takes without blocking (the kernel bounds
  it by the socket's buffer): a consumer that keeps up gets its whole response so, with no thread
  hand-off (session 4: 64-partition consume 633 → 764 MB/s, others within the noise). What the
  socket does not take goes to a worker thread, which writes it to a duplicate of the descriptor
  and waits for the socket to drain. The event loop keeps serving every other connection; this
  connection's task waits for the thread, so its responses stay in request order and nothing else
  writes to the socket meanwhile. The thread owns the duplicate descriptor (closes it itself), so a
  transport that closes the socket under it cannot make it write into a reused descriptor number.
  When the socket does not drain for ``STALL_S`` (a slow or stopped client) the thread stops and
  hands back what is left, which the loop then writes the buffered way: a slow client holds a thread
  for at most ``STALL_S`` per response.
- **Buffered** (TLS, small responses, the remainder after a stall): file ranges are read with one
  ``pread`` each and the parts handed to the transport: parts under ``COALESCE_BYTES`` joined into
  one write, larger ones as memoryviews (asyncio's ``writelines`` would copy them three times).

Measurements behind the thresholds are in bench/RESULTS.md ("sendfile for Fetch").
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import select
import threading
from collections.abc import Callable, Sequence
from typing import Any

from tidelog.storage.log import read_ranges

COALESCE_BYTES = 64 * 1024  # memory parts below this are joined before writing; larger ones are not copied
SENDFILE_MIN_BYTES = 128 * 1024  # file bytes in a response from which a worker thread sends it directly
STALL_S = 0.1  # a socket that does not drain for this long is handed back to the event loop
SEND_THREADS = 4
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
    """Writes responses for every connection of a server; owns the sendfile worker threads."""

    def __init__(self, threads: int = SEND_THREADS, min_direct_bytes: int = SENDFILE_MIN_BYTES) -> None:
        self.min_direct_bytes = min_direct_bytes
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tidelog-send")

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
        # First as much as the socket takes now, on this thread: a response that fits in the socket's
        # buffer (the common case for a consumer that keeps up) needs no worker thread at all.
        index, offset = _send_chunks(sock.fileno(), chunks, 0, 0, _stop_when_full)
        if index == len(chunks):
            return
        chunks = _rest(chunks, index, offset)
        stop = threading.Event()
        fd = os.dup(sock.fileno())
        # ``parts`` goes to the thread too: it keeps the file descriptors open until the thread is done,
        # even if this task is cancelled and forgets them first.
        sending = asyncio.get_running_loop().run_in_executor(self._pool, _send_direct, fd, chunks, parts, stop)
        try:
            index, offset = await asyncio.shield(sending)
        except asyncio.CancelledError:
            if sending.cancelled():  # never ran (the pool was shut down): the descriptor is still ours
                os.close(fd)
            stop.set()  # otherwise the thread gives up at its next wait and closes its own descriptor
            raise
        if index < len(chunks):
            write_buffered(writer, _remainder(chunks, index, offset))

    def _worth_direct(self, parts: Sequence[Part]) -> bool:
        file_bytes = 0
        for part in parts:
            if type(part) is FileSlices:
                file_bytes += part.length
        return file_bytes >= self.min_direct_bytes

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


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


def _send_direct(fd: int, chunks: list[Chunk], keep_alive: object, stop: threading.Event) -> tuple[int, int]:
    """Write ``chunks`` to socket ``fd`` (non-blocking); (index, offset) of the first unsent byte.

    Runs on a worker thread and closes ``fd`` before returning. Returns early (with what is left)
    when the socket stays full for ``STALL_S`` or ``stop`` is set. Connection errors propagate.
    """
    poller = select.poll()
    poller.register(fd, select.POLLOUT)

    def drained() -> bool:
        return not stop.is_set() and bool(poller.poll(STALL_S * 1000))

    try:
        return _send_chunks(fd, chunks, 0, 0, drained)
    finally:
        os.close(fd)
        del keep_alive  # released only now: the ranges were in use until here


def _stop_when_full() -> bool:
    return False


def _send_chunks(
    fd: int, chunks: list[Chunk], index: int, offset: int, wait_writable: Callable[[], bool]
) -> tuple[int, int]:
    """Write ``chunks`` from (index, offset) to the non-blocking socket ``fd``; return the (index,
    offset) of the first unsent byte. When the socket is full, ``wait_writable()`` says whether to go
    on (it returns once the socket drains) or to stop there."""
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
            if not wait_writable():
                return index, offset
            continue
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


def _rest(chunks: list[Chunk], index: int, offset: int) -> list[Chunk]:
    """The chunks from the first unsent byte on, without reading any file."""
    first = chunks[index]
    if offset:
        first = (first[0], first[1] + offset, first[2] - offset) if isinstance(first, tuple) else first[offset:]
    return [first, *chunks[index + 1 :]]


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

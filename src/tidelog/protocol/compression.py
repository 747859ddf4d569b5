"""Record batch compression codecs, as Kafka clients write and read them.

The codec is named by bits 0-2 of a batch's ``attributes``; only the records section (everything after
the 61-byte header) is compressed, as one buffer.

Formats on the wire, per codec, and what tidelog writes (it compresses when a topic's
``compression.type`` names a codec other than the producer's, when the cleaner rebuilds a compressed
batch, and for the coordinators' own batches):

- ``GZIP`` (1): a standard gzip stream (RFC 1952). Several concatenated members are accepted.
- ``SNAPPY`` (2): two forms exist. The Java client (snappy-java's ``SnappyOutputStream``) and
  kafka-python write the *xerial* framing: a 16-byte header (``\\x82SNAPPY\\x00``, then two big-endian
  int32 versions, both 1 in practice), then blocks of ``int32 length`` + raw snappy block, each block
  compressing at most 32 KiB of input. librdkafka writes one raw snappy block. Both readers accept both
  forms (snappy-java falls back to raw when the magic is absent; librdkafka checks the magic), so tidelog
  decodes both and writes the xerial form, which is what the Java client itself sends.
- ``LZ4`` (3): the LZ4 *frame* format. Kafka's Java reader does not support linked blocks, so tidelog
  writes independent 64 KiB blocks (with block checksums, no content checksum, no content size).
- ``ZSTD`` (4): a standard zstd frame; the Java client streams, so the content size may be absent.

Unknown codec numbers (5-7) raise ``KafkaError(UNSUPPORTED_COMPRESSION_TYPE)``; undecodable data raises
``KafkaError(CORRUPT_MESSAGE)``.

Decompression is bounded: :func:`decompress` takes ``max_size``, the most bytes the records section may
inflate to, and streams each codec in chunks of at most 1 MiB, so a batch that inflates past the cap (a
*decompression bomb*: 48 KB of zstd can declare a gigabyte) raises :class:`InflatedTooLarge`
(``MESSAGE_TOO_LARGE``) after at most ``max_size`` + one chunk of output, whatever the frame declares
about its content size. Per codec: gzip through zlib's ``max_length``; zstd through a stream reader
(frames with or without a content size, across concatenated frames); lz4 through the frame
decompressor's ``max_length``; snappy by reading each raw block's declared length (its varint
preamble) before inflating it, the block decoder then refusing data that does not match it. The C
decoders release the GIL, so decompression on a worker thread leaves the event loop free.
"""

from __future__ import annotations

import enum
import io
import struct
import zlib
from collections.abc import Callable

import cramjam
import lz4.frame
import zstandard

from tidelog.common.errors import ErrorCode, KafkaError

__all__ = [
    "DEFAULT_MAX_INFLATED", "XERIAL_MAGIC", "Compression", "InflatedTooLarge", "compress", "decompress",
    "inflate_into", "inflated_size",
]

Buffer = bytes | bytearray | memoryview

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_I32 = struct.Struct(">i")
_CHUNK = 1024 * 1024  # output produced per step of a streaming decoder
# The cap when a caller names none: socket.request.max.bytes' default, the largest request Kafka reads.
DEFAULT_MAX_INFLATED = 104_857_600


class InflatedTooLarge(KafkaError):
    """A records section inflates past the cap it was decompressed under (MESSAGE_TOO_LARGE)."""

    def __init__(self, codec: str, max_size: int) -> None:
        super().__init__(ErrorCode.MESSAGE_TOO_LARGE,
                         f"{codec} records inflate past {max_size} bytes")
        self.max_size = max_size


class Compression(enum.IntEnum):
    """Codec ids as stored in bits 0-2 of a record batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_attributes(cls, attributes: int) -> Compression:
        """The codec named by ``attributes``; raises UNSUPPORTED_COMPRESSION_TYPE for ids 5-7."""
        codec = attributes & 0x07
        if codec < len(_BY_ID):
            return _BY_ID[codec]  # not cls(codec): the enum's constructor costs a microsecond per batch
        raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"compression codec {codec}")


_BY_ID: tuple[Compression, ...] = tuple(sorted(Compression, key=lambda c: c.value))


def compress(codec: Compression, data: Buffer, level: int | None = None) -> bytes:
    """Compress ``data`` the way the Java client would for ``codec``.

    ``level`` is Kafka's ``compression.<codec>.level`` (KIP-390): gzip -1 (zlib's default) or 1-9, lz4
    1-17, zstd -131072..22; None means Kafka's default (gzip zlib's 6, lz4 9, zstd 3). snappy has no
    level.
    """
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.compress(data, level=None if level is None or level < 0 else level))
    if codec == Compression.SNAPPY:
        return _xerial_encode(data)
    if codec == Compression.LZ4:
        compressor = cramjam.lz4.Compressor(level=9 if level is None else level, block_linked=False,
                                            content_checksum=False)
        compressor.compress(data if isinstance(data, bytes) else bytes(data))
        return bytes(compressor.finish())
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data, level=3 if level is None else level))
    raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"compression codec {int(codec)}")


def decompress(codec: Compression, data: Buffer, max_size: int = DEFAULT_MAX_INFLATED) -> bytes:
    """Decompress a records section written by any Kafka client with ``codec``.

    Raises :class:`InflatedTooLarge` as soon as the output would pass ``max_size`` bytes (before
    inflating more than one further chunk), CORRUPT_MESSAGE when the data does not decode.
    """
    if codec == Compression.NONE:
        return bytes(data)
    return _run(codec, data, _Sink(codec.name, max_size)).result()


def inflated_size(codec: Compression, data: Buffer, max_size: int = DEFAULT_MAX_INFLATED) -> int:
    """How many bytes ``data`` inflates to, counted chunk by chunk and never held (one chunk at a time);
    the same errors as :func:`decompress`."""
    if codec == Compression.NONE:
        return len(data)
    return _run(codec, data, _Counter(codec.name, max_size)).size


def inflate_into(
    codec: Compression, data: Buffer, consume: Callable[[bytes], None], max_size: int = DEFAULT_MAX_INFLATED
) -> int:
    """Inflate ``data`` a chunk at a time (at most 1 MiB each), handing each chunk to ``consume`` and
    holding none; return the inflated size. The same errors as :func:`decompress`."""
    if codec == Compression.NONE:
        consume(bytes(data))
        return len(data)
    return _run(codec, data, _Feed(codec.name, max_size, consume)).size


def _run(codec: Compression, data: Buffer, sink: _Sink) -> _Sink:
    try:
        if codec == Compression.GZIP:
            return _gzip_decode(data, sink)
        if codec == Compression.SNAPPY:
            return _snappy_decode(data, sink)
        if codec == Compression.LZ4:
            return _lz4_decode(data, sink)
        if codec == Compression.ZSTD:
            return _zstd_decode(data, sink)
    except (cramjam.DecompressionError, zlib.error, RuntimeError, zstandard.ZstdError, EOFError) as exc:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{codec.name} data does not decompress: {exc}") from exc
    raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"compression codec {int(codec)}")


class _Sink:
    """Output of a streaming decoder, refusing to grow past ``max_size``."""

    def __init__(self, codec: str, max_size: int) -> None:
        self.parts: list[bytes] = []
        self.size = 0
        self.codec = codec
        self.max_size = max_size

    def room(self) -> int:
        """How much the next step may produce: one byte past the cap is enough to know it is passed."""
        return min(_CHUNK, self.max_size - self.size + 1)

    def add(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.max_size:
            self.parts.clear()  # drop what was inflated at once: the caller only needs the error
            raise InflatedTooLarge(self.codec, self.max_size)
        if chunk:
            self.parts.append(chunk)

    def result(self) -> bytes:
        return self.parts[0] if len(self.parts) == 1 else b"".join(self.parts)


class _Counter(_Sink):
    """A sink that only counts: each chunk is dropped once measured."""

    def add(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.max_size:
            raise InflatedTooLarge(self.codec, self.max_size)


class _Feed(_Sink):
    """A sink that hands each chunk on once measured, keeping none."""

    def __init__(self, codec: str, max_size: int, consume: Callable[[bytes], None]) -> None:
        super().__init__(codec, max_size)
        self.consume = consume

    def add(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.max_size:
            raise InflatedTooLarge(self.codec, self.max_size)
        if chunk:
            self.consume(chunk)


def _gzip_decode(data: Buffer, sink: _Sink) -> _Sink:
    pending: Buffer = data
    while True:  # one turn per gzip member (RFC 1952 allows several)
        inflater = zlib.decompressobj(wbits=31)
        sink.add(inflater.decompress(pending, sink.room()))
        while not inflater.eof:
            if not inflater.unconsumed_tail:
                raise zlib.error("gzip stream cut short")
            sink.add(inflater.decompress(inflater.unconsumed_tail, sink.room()))
        pending = inflater.unused_data
        if not pending:
            return sink


def _zstd_decode(data: Buffer, sink: _Sink) -> _Sink:
    # A stream reader never trusts the frame's declared content size: it inflates what the blocks
    # hold, chunk by chunk, so a frame that declares none or lies about it is cut at the cap all the same.
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
    with reader:
        while chunk := reader.read(sink.room()):
            sink.add(chunk)
    return sink


def _lz4_decode(data: Buffer, sink: _Sink) -> _Sink:
    pending = bytes(data)
    while pending:  # one turn per frame
        inflater = lz4.frame.LZ4FrameDecompressor()
        sink.add(inflater.decompress(pending, max_length=sink.room()))
        while not inflater.eof:
            if inflater.needs_input:
                raise RuntimeError("lz4 frame cut short")
            sink.add(inflater.decompress(b"", max_length=sink.room()))
        pending = inflater.unused_data or b""
    return sink


def _xerial_encode(data: Buffer) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    # An empty input still gets one (empty) block: some readers take a bare header for raw snappy.
    for start in range(0, max(len(view), 1), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
        parts.append(_I32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decode(data: Buffer, sink: _Sink) -> _Sink:
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC or len(view) < 16:
        sink.add(_snappy_block(view, sink))
        return sink
    pos = 16
    end = len(view)
    while pos < end:
        if pos + 4 > end:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "xerial snappy block length cut short")
        (length,) = _I32.unpack_from(view, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "xerial snappy block overruns the data")
        sink.add(_snappy_block(view[pos : pos + length], sink))
        pos += length
    return sink


def _snappy_block(block: memoryview, sink: _Sink) -> bytes:
    """One raw snappy block, refused before inflating when its preamble declares more than the room left."""
    declared, shift = 0, 0
    for byte in block[:5]:
        declared |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            break
    if sink.size + declared > sink.max_size:
        sink.parts.clear()
        raise InflatedTooLarge(sink.codec, sink.max_size)
    return bytes(cramjam.snappy.decompress_raw(block))

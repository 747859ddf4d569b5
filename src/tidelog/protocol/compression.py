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
"""

from __future__ import annotations

import enum
import struct

import cramjam

from tidelog.common.errors import ErrorCode, KafkaError

__all__ = ["XERIAL_MAGIC", "Compression", "compress", "decompress"]

Buffer = bytes | bytearray | memoryview

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_I32 = struct.Struct(">i")


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


def decompress(codec: Compression, data: Buffer) -> bytes:
    """Decompress a records section written by any Kafka client with ``codec``."""
    if codec == Compression.NONE:
        return bytes(data)
    try:
        if codec == Compression.GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == Compression.SNAPPY:
            return _snappy_decode(data)
        if codec == Compression.LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == Compression.ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as exc:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{codec.name} data does not decompress: {exc}") from exc
    raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"compression codec {int(codec)}")


def _xerial_encode(data: Buffer) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    # An empty input still gets one (empty) block: some readers take a bare header for raw snappy.
    for start in range(0, max(len(view), 1), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
        parts.append(_I32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decode(data: Buffer) -> bytes:
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC or len(view) < 16:
        return bytes(cramjam.snappy.decompress_raw(view))
    parts: list[bytes] = []
    pos = 16
    end = len(view)
    while pos < end:
        if pos + 4 > end:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "xerial snappy block length cut short")
        (length,) = _I32.unpack_from(view, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "xerial snappy block overruns the data")
        parts.append(bytes(cramjam.snappy.decompress_raw(view[pos : pos + length])))
        pos += length
    return b"".join(parts)

"""Decompression bombs: small record batches whose records section inflates to a chosen size.

Each is built in bounded memory (the zeros are fed to a streaming compressor a chunk at a time), so a
test can make a gigabyte bomb without holding a gigabyte itself.
"""

from __future__ import annotations

import struct
import zlib

import cramjam
import crc32c
import lz4.frame
import zstandard

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
_CHUNK = b"\0" * (1 << 22)
NOW_MS = 1_700_000_000_000


def _chunks(size: int) -> list[int]:
    full, rest = divmod(size, len(_CHUNK))
    return [len(_CHUNK)] * full + ([rest] if rest else [])


def zstd_section(size: int, *, declare_size: int | None = None, level: int = 3) -> bytes:
    """A zstd frame of ``size`` zeros; ``declare_size`` writes that content size into the frame header
    instead of the truth (None: no content size at all, as the Java client's streams write)."""
    cctx = zstandard.ZstdCompressor(level=level, write_content_size=declare_size is not None)
    obj = cctx.compressobj(size=size if declare_size is not None else -1)
    out = [obj.compress(_CHUNK[:n]) for n in _chunks(size)]
    out.append(obj.flush())
    frame = b"".join(out)
    return frame if declare_size in (None, size) else _declare(frame, declare_size)


def zstd_record_section(size: int) -> bytes:
    """A zstd frame of one well-formed record (no key, no header) whose value is ``size`` zeros: a bomb
    the broker stores where its max.message.bytes allows (a section of bare zeros is no record)."""
    body_tail = _varint(-1) + _varint(size)  # key length (null), value length
    length = 3 + len(body_tail) + size + 1  # attributes, timestamp delta, offset delta ... headers count
    head = _varint(length) + b"\x00\x00\x00" + body_tail
    obj = zstandard.ZstdCompressor(level=3, write_content_size=False).compressobj()
    out = [obj.compress(head)] + [obj.compress(_CHUNK[:n]) for n in _chunks(size + 1)]  # the value, then 0 headers
    out.append(obj.flush())
    return b"".join(out)


def _varint(value: int) -> bytes:
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def _declare(frame: bytes, content_size: int) -> bytes:
    """``frame`` with its Frame_Content_Size field (RFC 8878 3.1.1.1) overwritten by ``content_size``."""
    descriptor = frame[4]
    field_size = {0: 0, 1: 2, 2: 4, 3: 8}[descriptor >> 6]
    single_segment = bool(descriptor & 0x20)
    dict_id_size = {0: 0, 1: 1, 2: 2, 3: 4}[descriptor & 0x03]
    at = 5 + (0 if single_segment else 1) + dict_id_size
    if field_size not in (4, 8):
        raise ValueError("frame too small to carry a 4- or 8-byte content size")
    fmt = "<I" if field_size == 4 else "<Q"
    return frame[:at] + struct.pack(fmt, content_size) + frame[at + field_size :]


def gzip_section(size: int) -> bytes:
    obj = zlib.compressobj(9, zlib.DEFLATED, 31)
    out = [obj.compress(_CHUNK[:n]) for n in _chunks(size)]
    out.append(obj.flush())
    return b"".join(out)


def lz4_section(size: int) -> bytes:
    comp = lz4.frame.LZ4FrameCompressor(block_linked=False)
    out = [comp.begin()] + [comp.compress(_CHUNK[:n]) for n in _chunks(size)]
    out.append(comp.flush())
    return b"".join(out)


def snappy_xerial_section(size: int) -> bytes:
    """The Java client's framing: 32 KiB blocks, each ~1.5 KB of zeros (snappy inflates ~21x at most)."""
    block = bytes(cramjam.snappy.compress_raw(b"\0" * 32768))
    count = size // 32768
    return b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + (struct.pack(">i", len(block)) + block) * count


def snappy_raw_lying_section(declared: int) -> bytes:
    """One raw snappy block (librdkafka's form) whose preamble declares ``declared`` bytes."""
    varint = bytearray()
    value = declared
    while value >= 0x80:
        varint.append((value & 0x7F) | 0x80)
        value >>= 7
    varint.append(value)
    return bytes(varint) + b"\x00" * 64


def batch(section: bytes, codec: int, *, records: int = 1, base_offset: int = 0) -> bytes:
    """A v2 batch (no producer id) carrying ``section`` as its records, compressed with ``codec``."""
    after_crc = struct.pack(">hiqqqhii", codec, records - 1, NOW_MS, NOW_MS, -1, -1, -1, records) + section
    length = 49 + len(section)
    return struct.pack(">qiibI", base_offset, length, -1, 2, crc32c.crc32c(after_crc)) + after_crc


SECTIONS = {
    "gzip": lambda size: (gzip_section(size), GZIP),
    "snappy": lambda size: (snappy_xerial_section(size), SNAPPY),
    "lz4": lambda size: (lz4_section(size), LZ4),
    "zstd": lambda size: (zstd_section(size), ZSTD),
    "zstd-lying": lambda size: (zstd_section(size, declare_size=1000), ZSTD),
    "zstd-sized": lambda size: (zstd_section(size, declare_size=size), ZSTD),
    "zstd-record": lambda size: (zstd_record_section(size), ZSTD),
}

"""Reading the big-endian fields of Kafka's internal-topic records (``__consumer_offsets``,
``__transaction_state``): one reader shared by the record modules, each raising its own error."""

from __future__ import annotations

import struct
from typing import ClassVar

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class ByteReader:
    """A cursor over ``buf``; a read past the end raises ``error`` (set by each subclass)."""

    __slots__ = ("buf", "pos")
    error: ClassVar[type[ValueError]] = ValueError

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, size: int) -> bytes:
        end = self.pos + size
        if size < 0 or end > len(self.buf):
            raise self.error(f"truncated: need {size} bytes at {self.pos} of {len(self.buf)}")
        data = self.buf[self.pos : end]
        self.pos = end
        return data

    def fixed(self, fmt: struct.Struct) -> int:
        value: int = fmt.unpack(self.take(fmt.size))[0]
        return value

    def i16(self) -> int:
        return self.fixed(_I16)

    def i32(self) -> int:
        return self.fixed(_I32)

    def i64(self) -> int:
        return self.fixed(_I64)

    def uvarint(self) -> int:
        """An unsigned varint of at most 5 bytes (Kafka's compact lengths and tag counts)."""
        value, shift = 0, 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise self.error("varint longer than 5 bytes")

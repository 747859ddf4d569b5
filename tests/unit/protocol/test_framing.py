"""FrameDecoder: frames come out whole and in order however the bytes are chunked."""

from __future__ import annotations

import struct

import pytest

from tidelog.protocol.errors import FrameError, Hint
from tidelog.protocol.framing import FrameDecoder


def framed(*bodies: bytes) -> bytes:
    return b"".join(struct.pack(">i", len(body)) + body for body in bodies)


BODIES = [b"first", b"", b"x" * 1000, b"last frame"]


@pytest.mark.parametrize("chunk", [1, 2, 3, 4, 5, 7, 64, 4096])
def test_frames_survive_any_chunking(chunk: int) -> None:
    stream = framed(*BODIES)
    decoder = FrameDecoder(1 << 20)
    got: list[bytes] = []
    for start in range(0, len(stream), chunk):
        got.extend(bytes(frame) for frame in decoder.feed(stream[start : start + chunk]))
    assert got == BODIES
    assert decoder.buffered_bytes == 0


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_many_frames_in_one_chunk_of_any_buffer_type(kind: type) -> None:
    decoder = FrameDecoder(1 << 20)
    assert [bytes(frame) for frame in decoder.feed(kind(framed(*BODIES)))] == BODIES


def test_partial_frame_is_held_until_complete() -> None:
    decoder = FrameDecoder(100)
    stream = framed(b"hello", b"world")
    assert [bytes(f) for f in decoder.feed(stream[:12])] == [b"hello"]
    assert decoder.buffered_bytes == 3
    assert [bytes(f) for f in decoder.feed(stream[12:])] == [b"world"]


def test_frames_from_the_buffer_stay_valid_after_more_data_arrives() -> None:
    decoder = FrameDecoder(100)
    first = decoder.feed(b"\x00\x00")
    first = decoder.feed(b"\x00\x03abc\x00\x00\x00\x02d")
    assert [bytes(f) for f in first] == [b"abc"]
    later = decoder.feed(b"e" + framed(b"z" * 50))
    assert [bytes(f) for f in first] == [b"abc"]
    assert [bytes(f) for f in later] == [b"de", b"z" * 50]


@pytest.mark.parametrize(
    ("prefix", "size"),
    [(struct.pack(">i", -1), -1), (struct.pack(">i", -(2**31)), -(2**31)), (struct.pack(">i", 101), 101)],
)
def test_bad_size_is_refused_before_the_body_arrives(prefix: bytes, size: int) -> None:
    decoder = FrameDecoder(100)
    with pytest.raises(FrameError) as caught:
        decoder.feed(prefix)
    assert caught.value.size == size
    assert caught.value.hint is Hint.CLOSE
    with pytest.raises(FrameError):
        decoder.feed(b"more")


def test_frame_exactly_at_the_limit_is_accepted() -> None:
    decoder = FrameDecoder(10)
    assert [bytes(f) for f in decoder.feed(framed(b"0123456789"))] == [b"0123456789"]


def test_bad_size_after_good_frames_in_the_same_chunk_is_refused() -> None:
    decoder = FrameDecoder(10)
    with pytest.raises(FrameError):
        decoder.feed(framed(b"ok") + struct.pack(">i", 11))


def test_buffer_is_compacted_when_streaming_many_small_frames() -> None:
    decoder = FrameDecoder(1 << 20)
    stream = framed(*[b"m" * 13] * 10_000)
    total = 0
    for start in range(0, len(stream), 1000):
        total += len(decoder.feed(stream[start : start + 1000]))
        assert len(decoder._buffer) < 2100
    assert total == 10_000

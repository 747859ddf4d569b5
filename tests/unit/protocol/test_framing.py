"""FrameDecoder: frames come out whole and in order however the bytes are chunked, fed or received in place."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.protocol import framing
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


def test_streaming_many_small_frames_keeps_to_the_receive_area() -> None:
    decoder = FrameDecoder(1 << 20, receive_area=4096)
    stream = framed(*[b"m" * 13] * 10_000)
    total = 0
    for start in range(0, len(stream), 1000):
        total += len(decoder.feed(stream[start : start + 1000]))
        assert decoder._area is None or len(decoder._area) == 4096
        assert decoder._frame is None
    assert total == 10_000


def test_an_idle_connection_holds_no_receive_area() -> None:
    """The area goes back to the pool once everything received was returned, and is reused from there."""
    decoder = FrameDecoder(1 << 20, receive_area=2048)
    assert decoder._area is None
    assert [bytes(f) for f in decoder.feed(framed(b"whole"))] == [b"whole"]
    assert decoder._area is None
    pooled = framing._free_areas[2048][-1]
    decoder.feed(framed(b"half")[:5])  # a partial frame keeps its area
    assert decoder._area is pooled
    assert [bytes(f) for f in decoder.feed(framed(b"half")[5:])] == [b"half"]
    assert decoder._area is None


def receive(decoder: FrameDecoder, stream: bytes, chunk: int) -> list[bytes]:
    """Drive the in-place API as an event loop would: recv_into(get_buffer()) of at most ``chunk``."""
    got: list[bytes] = []
    offset = 0
    while offset < len(stream):
        view = decoder.get_buffer()
        assert len(view) > 0
        count = min(len(view), chunk, len(stream) - offset)
        view[:count] = stream[offset : offset + count]
        offset += count
        got.extend(bytes(frame) for frame in decoder.buffer_updated(count))
    return got


@pytest.mark.parametrize("chunk", [1, 3, 1000, 70_000, 1 << 20])
def test_large_frames_between_small_ones_in_place(chunk: int) -> None:
    bodies = [b"a", bytes(range(256)) * 2000, b"", b"b" * 5, bytes(300_000), b"c" * 3]
    decoder = FrameDecoder(1 << 20, receive_area=64 * 1024)
    assert receive(decoder, framed(*bodies), chunk) == bodies
    assert decoder.buffered_bytes == 0


def test_a_large_frame_is_received_into_its_own_buffer_and_not_copied_again() -> None:
    body = bytes(range(256)) * 4096  # 1 MiB
    stream = framed(body)
    decoder = FrameDecoder(2 << 20, receive_area=4096)
    first = decoder.get_buffer()
    first[:4096] = stream[:4096]
    assert decoder.buffer_updated(4096) == []
    view = decoder.get_buffer()  # the area was full of one incomplete frame: now the frame's own buffer
    own = decoder._frame
    assert own is not None and len(own) == len(body) and len(view) == len(body) - 4092
    view[:] = stream[4096:]
    [frame] = decoder.buffer_updated(len(view))
    assert isinstance(frame, memoryview) and frame.obj is own
    assert bytes(frame) == body


def test_a_frame_declared_above_the_in_place_limit_grows_with_what_arrives(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(framing, "IN_PLACE_MAX", 10_000)
    bodies = [b"x" * 50_000, b"after"]
    decoder = FrameDecoder(1 << 20, receive_area=1024)
    stream = framed(*bodies)
    got = []
    for start in range(0, 20_000, 1000):
        got += decoder.feed(stream[start : start + 1000])
        assert decoder._frame is None or len(decoder._frame) <= start + 1000  # never the declared 50,000 up front
    got += decoder.feed(stream[20_000:])
    assert [bytes(f) for f in got] == bodies


def test_a_hostile_length_allocates_nothing_before_the_area_fills() -> None:
    decoder = FrameDecoder(100 << 20, receive_area=4096)
    decoder.feed(struct.pack(">i", 100 << 20) + b"tiny")
    assert decoder._frame is None
    assert decoder.buffered_bytes == 8


@settings(max_examples=200, deadline=None)
@given(
    bodies=st.lists(st.binary(max_size=300) | st.integers(0, 20_000).map(bytes), max_size=12),
    chunks=st.lists(st.integers(1, 9_000), min_size=1, max_size=8),
    area=st.sampled_from([8, 64, 1024, 16_384]),
    in_place_max=st.sampled_from([0, 5_000, 1 << 20]),
)
def test_any_frames_any_chunking_any_area(
    bodies: list[bytes], chunks: list[int], area: int, in_place_max: int
) -> None:
    """In place or fed, small, large or growing: the frames come out as they went in."""
    stream = framed(*bodies)
    original = framing.IN_PLACE_MAX
    framing.IN_PLACE_MAX = in_place_max
    try:
        in_place, fed = FrameDecoder(1 << 20, receive_area=area), FrameDecoder(1 << 20, receive_area=area)
        got_in_place: list[bytes] = []
        offset, i = 0, 0
        while offset < len(stream):
            view = in_place.get_buffer()
            count = min(len(view), chunks[i % len(chunks)], len(stream) - offset)
            view[:count] = stream[offset : offset + count]
            got_in_place.extend(bytes(f) for f in in_place.buffer_updated(count))
            offset += count
            i += 1
        got_fed: list[bytes] = []
        offset, i = 0, 0
        while offset < len(stream):
            size = chunks[i % len(chunks)]
            got_fed.extend(bytes(f) for f in fed.feed(stream[offset : offset + size]))
            offset += size
            i += 1
    finally:
        framing.IN_PLACE_MAX = original
    assert got_in_place == bodies
    assert got_fed == bodies
    assert in_place.buffered_bytes == fed.buffered_bytes == 0

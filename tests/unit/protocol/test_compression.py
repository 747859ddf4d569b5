"""Codecs must read what real clients write, and clients must read what tidelog writes."""

from __future__ import annotations

import gzip
import os
import random
import struct
import tracemalloc
import warnings

import cramjam
import lz4.frame
import pytest
import zstandard

with warnings.catch_warnings():  # kafka-python 3 imports importlib.resources' deprecated helpers
    warnings.simplefilter("ignore", DeprecationWarning)
    import aiokafka.codec as aiocodec
    import kafka.codec as kcodec

from tidelog.common.errors import ErrorCode, KafkaError
from tidelog.protocol.compression import (
    XERIAL_MAGIC,
    Compression,
    InflatedTooLarge,
    compress,
    decompress,
    inflated_size,
)

PAYLOADS = [
    b"",
    b"x",
    b"hello kafka " * 1000,
    os.urandom(100_000),  # incompressible, several xerial and lz4 blocks
    bytes(range(256)) * 600,
]

# (codec, client encoder, client decoder) for kafka-python and aiokafka
CLIENTS = [
    (Compression.GZIP, kcodec.gzip_encode, kcodec.gzip_decode),
    (Compression.SNAPPY, kcodec.snappy_encode, kcodec.snappy_decode),
    (Compression.LZ4, kcodec.lz4_encode, kcodec.lz4_decode),
    (Compression.ZSTD, kcodec.zstd_encode, kcodec.zstd_decode),
    (Compression.GZIP, aiocodec.gzip_encode, aiocodec.gzip_decode),
    (Compression.SNAPPY, aiocodec.snappy_encode, aiocodec.snappy_decode),
    (Compression.LZ4, aiocodec.lz4_encode, aiocodec.lz4_decode),
    (Compression.ZSTD, aiocodec.zstd_encode, aiocodec.zstd_decode),
]


@pytest.mark.parametrize("codec,encode,decode", CLIENTS)
@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: f"{len(p)}B")
def test_client_output_decompresses_and_ours_decompresses_in_client(
    codec: Compression, encode: object, decode: object, payload: bytes
) -> None:
    assert callable(encode) and callable(decode)
    assert decompress(codec, encode(payload)) == payload
    assert decode(compress(codec, payload)) == payload


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: f"{len(p)}B")
def test_raw_snappy_as_librdkafka_sends_it_is_accepted(payload: bytes) -> None:
    raw = bytes(cramjam.snappy.compress_raw(payload))
    assert decompress(Compression.SNAPPY, raw) == payload


def test_snappy_is_written_with_xerial_framing_like_the_java_client() -> None:
    out = compress(Compression.SNAPPY, b"a" * 100_000)
    assert out.startswith(XERIAL_MAGIC + struct.pack(">ii", 1, 1))
    # 100 000 bytes in 32 KiB blocks: four length-prefixed blocks
    pos, blocks = 16, 0
    while pos < len(out):
        (length,) = struct.unpack_from(">i", out, pos)
        pos += 4 + length
        blocks += 1
    assert pos == len(out) and blocks == 4


def test_lz4_frames_use_independent_blocks_that_the_java_reader_supports() -> None:
    out = compress(Compression.LZ4, b"abc" * 50_000)
    assert out[:4] == b"\x04\x22\x4d\x18"
    flg = out[4]
    assert flg >> 6 == 1  # frame version 01
    assert flg & 0x20  # block independence
    assert not flg & 0x01  # no dictionary id
    assert lz4.frame.decompress(out) == b"abc" * 50_000


def test_streamed_zstd_without_content_size_is_accepted() -> None:
    payload = b"streaming " * 10_000
    compressor = zstandard.ZstdCompressor()
    chunker = compressor.compressobj()
    data = chunker.compress(payload) + chunker.flush()
    assert decompress(Compression.ZSTD, data) == payload


def test_concatenated_gzip_members_are_read_whole() -> None:
    data = gzip.compress(b"first ") + gzip.compress(b"second")
    assert decompress(Compression.GZIP, data) == b"first second"


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_garbage_is_corrupt_message(codec: Compression) -> None:
    with pytest.raises(KafkaError) as err:
        decompress(codec, b"\x00garbage that is no compressed stream at all")
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE


def test_xerial_block_running_past_the_data_is_corrupt_message() -> None:
    good = compress(Compression.SNAPPY, b"z" * 1000)
    with pytest.raises(KafkaError) as err:
        decompress(Compression.SNAPPY, good[:-3])
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("attributes", [5, 6, 7, 0x15])
def test_unknown_codec_ids_are_unsupported_compression_type(attributes: int) -> None:
    with pytest.raises(KafkaError) as err:
        Compression.from_attributes(attributes)
    assert err.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def test_codec_id_comes_from_the_low_three_bits() -> None:
    assert Compression.from_attributes(0x10 | 4) == Compression.ZSTD
    assert Compression.from_attributes(0x28) == Compression.NONE


# Text that compresses, but differently at each level: seeded random words from a small vocabulary.
_RNG = random.Random(7)
_TEXT = b" ".join(b"%s-%d" % (_RNG.choice([b"alpha", b"beta", b"gamma", b"delta"]), _RNG.randrange(500))
                  for _ in range(20_000))


@pytest.mark.parametrize(
    "codec,low,high,decode",
    [
        (Compression.GZIP, 1, 9, gzip.decompress),
        (Compression.LZ4, 1, 17, lz4.frame.decompress),
        (Compression.ZSTD, 1, 19, lambda data: zstandard.ZstdDecompressor().decompressobj().decompress(data)),
    ],
)
def test_levels_are_applied_and_every_level_reads_back_in_the_clients_libraries(
    codec: Compression, low: int, high: int, decode: object
) -> None:
    assert callable(decode)
    fast, small = compress(codec, _TEXT, low), compress(codec, _TEXT, high)
    assert len(small) < len(fast)
    assert decode(fast) == decode(small) == _TEXT


def test_gzip_level_minus_one_is_zlibs_default_and_none_is_kafkas_default() -> None:
    assert compress(Compression.GZIP, _TEXT, -1) == compress(Compression.GZIP, _TEXT, 6)
    assert compress(Compression.LZ4, _TEXT) == compress(Compression.LZ4, _TEXT, 9)
    assert compress(Compression.ZSTD, _TEXT) == compress(Compression.ZSTD, _TEXT, 3)


# -------------------------------------------------------------------------- decompression bombs

BOMB_SIZE = 64 << 20  # 64 MiB of zeros: a few kilobytes to a megabyte once compressed
CAP = 1 << 20


@pytest.mark.parametrize("kind", ["gzip", "snappy", "lz4", "zstd", "zstd-lying", "zstd-sized"])
def test_a_section_inflating_past_the_cap_is_refused_without_inflating_it_whole(kind: str) -> None:
    from helpers.bombs import SECTIONS

    section, codec = SECTIONS[kind](BOMB_SIZE)
    tracemalloc.start()
    try:
        with pytest.raises(KafkaError) as err:
            decompress(Compression(codec), section, CAP)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # A lying zstd frame (declares 1000 bytes) is refused as corrupt by the decoder itself.
    assert err.value.code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.CORRUPT_MESSAGE)
    if kind != "zstd-lying":
        assert isinstance(err.value, InflatedTooLarge)
    assert peak < 4 * CAP, f"{peak} bytes allocated to refuse a {BOMB_SIZE}-byte bomb under a {CAP}-byte cap"


def test_a_raw_snappy_block_declaring_more_than_the_cap_is_refused_before_inflating() -> None:
    from helpers.bombs import snappy_raw_lying_section

    with pytest.raises(InflatedTooLarge):
        decompress(Compression.SNAPPY, snappy_raw_lying_section(1 << 31), CAP)


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_a_section_inflating_to_exactly_the_cap_is_accepted(codec: Compression) -> None:
    data = os.urandom(1000) * (CAP // 1000) + b"x" * (CAP % 1000)
    assert decompress(codec, compress(codec, data), CAP) == data
    with pytest.raises(InflatedTooLarge):
        decompress(codec, compress(codec, data + b"y"), CAP)


def test_a_zstd_frame_without_content_size_and_concatenated_frames_decode_under_the_cap() -> None:
    data = b"hello kafka " * 50_000
    unsized = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert decompress(Compression.ZSTD, unsized + unsized, 4 * len(data)) == data + data
    with pytest.raises(InflatedTooLarge):
        decompress(Compression.ZSTD, unsized + unsized, len(data) + 1)


def test_concatenated_gzip_members_count_together_against_the_cap() -> None:
    member = gzip.compress(b"a" * 600_000)
    assert decompress(Compression.GZIP, member + member, 1_200_000) == b"a" * 1_200_000
    with pytest.raises(InflatedTooLarge):
        decompress(Compression.GZIP, member + member, 1_199_999)


@pytest.mark.parametrize("kind", ["gzip", "snappy", "lz4", "zstd"])
def test_the_inflated_size_is_counted_without_holding_the_output(kind: str) -> None:
    from helpers.bombs import SECTIONS

    section, codec = SECTIONS[kind](BOMB_SIZE)
    tracemalloc.start()
    try:
        size = inflated_size(Compression(codec), section, 2 * BOMB_SIZE)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    expected = BOMB_SIZE - BOMB_SIZE % 32768 if kind == "snappy" else BOMB_SIZE
    assert size == expected
    assert peak < 4 * CAP

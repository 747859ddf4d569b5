"""Record batch v2: validation codes, in-place rewrites, decode/build, and cross-checks with kafka-python."""

from __future__ import annotations

import struct
import warnings

import crc32c
import pytest

from tidelog.common.errors import ErrorCode, KafkaError
from tidelog.protocol import compression as compression_module
from tidelog.protocol.compression import Compression
from tidelog.protocol.records import (
    HEADER_SIZE,
    BatchHeader,
    ControlType,
    Record,
    batch_has_null_key,
    batch_views,
    build_batch,
    build_control_batch,
    decode_records,
    inner_offset_errors,
    iter_batches,
    null_key_indices,
    parse_control_record,
    recompress_batch,
    record_stamps,
    scan_valid_prefix,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)

with warnings.catch_warnings():  # kafka-python 3 imports importlib.resources' deprecated helpers
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

CODECS = list(Compression)


def records(n: int, *, start: int = 0, ts: int = 1_700_000_000_000) -> list[Record]:
    return [
        Record(start + i, ts + i, b"key-%d" % i, b"value-%d" % i if i % 4 else None, (("h", b"v"),))
        for i in range(n)
    ]


def expect_code(code: ErrorCode, buf: bytes | bytearray, **kwargs: bool) -> None:
    with pytest.raises(KafkaError) as err:
        list(iter_batches(buf, **kwargs))
    assert err.value.code == code, err.value


# ------------------------------------------------------------------------------------ header fields


def test_header_fields_read_back_as_built() -> None:
    batch = build_batch(
        records(5, start=100),
        base_offset=100,
        producer_id=42,
        producer_epoch=3,
        base_sequence=7,
        partition_leader_epoch=9,
        transactional=True,
        compression=Compression.LZ4,
    )
    [(header, pos)] = list(iter_batches(batch))
    assert pos == 0
    assert header.size == len(batch)
    assert (header.base_offset, header.last_offset, header.next_offset) == (100, 104, 105)
    assert header.records_count == 5
    assert header.compression == Compression.LZ4
    assert header.is_transactional and not header.is_control
    assert header.has_producer_id and header.producer_epoch == 3
    assert (header.base_sequence, header.last_sequence) == (7, 11)
    assert header.partition_leader_epoch == 9
    assert header.base_timestamp == 1_700_000_000_000
    assert header.max_timestamp == 1_700_000_000_004
    assert header.timestamp_type == 0
    assert BatchHeader.parse(header.pack()) == header


def test_last_sequence_wraps_like_kafka() -> None:
    batch = build_batch(records(3), producer_id=1, producer_epoch=0, base_sequence=2**31 - 2)
    header = BatchHeader.parse(batch)
    assert header.last_sequence == 0


def test_no_producer_means_no_sequence() -> None:
    header = BatchHeader.parse(build_batch(records(3)))
    assert not header.has_producer_id and header.last_sequence == -1


# ------------------------------------------------------------------------------------------ validation


def test_concatenated_batches_are_walked_in_order() -> None:
    buf = b"".join(build_batch(records(3, start=o), base_offset=o) for o in (0, 3, 6))
    found = list(iter_batches(buf))
    assert [h.base_offset for h, _ in found] == [0, 3, 6]
    assert [p for _, p in found] == [0, found[1][0].size, 2 * found[1][0].size]
    views = list(batch_views(bytearray(buf)))
    assert [bytes(v) for _, v in views] == [buf[p : p + h.size] for h, p in found]


def test_crc_mismatch_is_corrupt_message() -> None:
    buf = bytearray(build_batch(records(4)))
    buf[-1] ^= 0x01
    expect_code(ErrorCode.CORRUPT_MESSAGE, buf)
    assert len(list(iter_batches(buf, validate=False))) == 1


@pytest.mark.parametrize("magic", [0, 1, 3])
def test_old_or_unknown_magic_is_invalid_record(magic: int) -> None:
    buf = bytearray(build_batch(records(2)))
    buf[16] = magic
    expect_code(ErrorCode.INVALID_RECORD, buf)


def test_batch_length_below_header_is_corrupt_message() -> None:
    buf = bytearray(build_batch(records(1)))
    struct.pack_into(">i", buf, 8, 10)
    expect_code(ErrorCode.CORRUPT_MESSAGE, buf)


def test_batch_running_past_the_buffer_is_corrupt_message() -> None:
    batch = build_batch(records(3))
    expect_code(ErrorCode.CORRUPT_MESSAGE, batch[:-1])
    expect_code(ErrorCode.CORRUPT_MESSAGE, batch + batch[:7])


def _recrc(buf: bytearray) -> bytearray:
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return buf


def test_negative_record_count_is_invalid_record() -> None:
    buf = bytearray(build_batch(records(2)))
    struct.pack_into(">i", buf, 57, -1)
    expect_code(ErrorCode.INVALID_RECORD, _recrc(buf))


def test_more_records_than_offsets_is_invalid_record() -> None:
    buf = bytearray(build_batch(records(2)))
    struct.pack_into(">i", buf, 57, 3)
    expect_code(ErrorCode.INVALID_RECORD, _recrc(buf))


def test_producer_batch_with_offset_gap_is_refused_but_compacted_batch_is_not() -> None:
    gappy = build_batch([records(4)[0], records(4)[3]])
    assert BatchHeader.parse(gappy).last_offset_delta == 3
    assert len(list(iter_batches(gappy))) == 1
    expect_code(ErrorCode.INVALID_RECORD, gappy, from_producer=True)


def test_unknown_codec_is_unsupported_compression_type() -> None:
    buf = bytearray(build_batch(records(2)))
    struct.pack_into(">h", buf, 21, 6)
    expect_code(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, _recrc(buf))


def test_recovery_scan_stops_at_first_bad_batch() -> None:
    one = build_batch(records(2))
    two = bytearray(build_batch(records(2, start=2), base_offset=2))
    two[HEADER_SIZE + 2] ^= 0xFF
    result = scan_valid_prefix(one + one + bytes(two) + one)
    assert result.valid_bytes == 2 * len(one)
    assert [p for _, p in result.batches] == [0, len(one)]
    assert result.error is not None and result.error.code == ErrorCode.CORRUPT_MESSAGE
    clean = scan_valid_prefix(one + one)
    assert clean.valid_bytes == 2 * len(one) and clean.error is None


# ---------------------------------------------------------------------------------- in-place rewrites


def test_base_offset_and_leader_epoch_rewrite_keeps_crc_valid() -> None:
    buf = bytearray(build_batch(records(3)) * 2)
    size = BatchHeader.parse(buf).size
    set_base_offset(buf, size, 1000)
    set_partition_leader_epoch(memoryview(buf), size, 17)
    headers = [h for h, _ in iter_batches(buf)]
    assert headers[1].base_offset == 1000 and headers[1].partition_leader_epoch == 17
    assert [r.offset for r in decode_records(buf[size:])] == [1000, 1001, 1002]
    assert headers[0].base_offset == 0


def test_log_append_time_sets_type_and_every_record_timestamp() -> None:
    buf = bytearray(build_batch(records(3), compression=Compression.GZIP))
    set_log_append_time(buf, 0, 5_000)
    [(header, _)] = list(iter_batches(buf))  # CRC recomputed
    assert header.timestamp_type == 1 and header.max_timestamp == 5_000
    assert header.compression == Compression.GZIP
    assert {r.timestamp for r in decode_records(buf)} == {5_000}


# ------------------------------------------------------------------------------------------- records


@pytest.mark.parametrize("codec", CODECS)
def test_records_round_trip_with_offsets_keys_values_and_headers(codec: Compression) -> None:
    original = [
        *records(6, start=10),
        Record(20, 5, None, b"", (("a", None), ("\u00e9", b"\x00"))),
        Record(21, -1, b"", None),
    ]
    batch = build_batch(original, base_offset=10, compression=codec)
    assert decode_records(batch) == original


def test_rebuilt_batch_keeps_its_last_offset_even_when_empty() -> None:
    batch = build_batch([], base_offset=50, last_offset_delta=9, producer_id=3, producer_epoch=1)
    [(header, _)] = list(iter_batches(batch))
    assert header.records_count == 0 and header.last_offset == 59
    assert decode_records(batch) == []


def test_delete_horizon_is_stored_without_changing_record_timestamps() -> None:
    original = records(3)
    batch = build_batch(original, delete_horizon_ms=2_000_000_000_000)
    header = BatchHeader.parse(batch)
    assert header.has_delete_horizon and header.delete_horizon_ms == 2_000_000_000_000
    assert decode_records(batch) == original
    assert BatchHeader.parse(build_batch(original)).delete_horizon_ms is None


def test_truncated_record_body_is_invalid_record() -> None:
    batch = bytearray(build_batch(records(3)))
    struct.pack_into(">i", batch, 57, 4)
    struct.pack_into(">i", batch, 23, 3)
    with pytest.raises(KafkaError) as err:
        decode_records(batch)
    assert err.value.code == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("codec", CODECS)
def test_null_key_detection(codec: Compression) -> None:
    keyed = build_batch(records(5), compression=codec)
    assert not batch_has_null_key(keyed)
    mixed = build_batch([*records(3), Record(3, 0, None, b"v")], compression=codec)
    assert batch_has_null_key(mixed)
    assert null_key_indices(mixed) == [3]


@pytest.mark.parametrize("codec", CODECS)
def test_record_stamps_give_each_records_timestamp_and_keylessness(codec: Compression) -> None:
    batch = build_batch([Record(0, 5_000, b"k", b"v"), Record(1, 4_000, None, b"v"), Record(2, 9_000, b"k", None)],
                        compression=codec)
    assert record_stamps(batch) == [(5_000, False), (4_000, True), (9_000, False)]


@pytest.mark.parametrize("kind", list(ControlType))
def test_control_batch_round_trip(kind: ControlType) -> None:
    batch = build_control_batch(kind, 77, 4, 12, 123_456, base_offset=30)
    [(header, _)] = list(iter_batches(batch))
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_offset) == (77, 4, 30)
    [record] = decode_records(batch)
    assert record.offset == 30 and record.timestamp == 123_456
    assert parse_control_record(record) == (kind, 12)
    assert not batch_has_null_key(batch)


def test_malformed_control_key_is_invalid_record() -> None:
    with pytest.raises(KafkaError) as err:
        parse_control_record(Record(0, 0, b"\x00\x00\x00\x07", None))
    assert err.value.code == ErrorCode.INVALID_RECORD


# ----------------------------------------------------------------------- cross-check with kafka-python


def _kafka_python_batch(codec: int, n: int, *, transactional: bool = False) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=transactional,
        producer_id=123 if transactional else -1,
        producer_epoch=2 if transactional else -1,
        base_sequence=40 if transactional else -1,
        batch_size=1 << 22,
    )
    for i in range(n):
        value = None if i % 5 == 0 else b"payload-%d-" % i * 20
        builder.append(i, timestamp=1_000 + i, key=b"k%d" % (i % 7), value=value, headers=[("n", b"%d" % i)])
    return bytes(builder.build())


@pytest.mark.parametrize("codec", CODECS)
def test_we_read_kafka_python_batches(codec: Compression) -> None:
    batch = _kafka_python_batch(int(codec), 200, transactional=True)
    [(header, _)] = list(iter_batches(batch, from_producer=True))
    assert header.compression == codec and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (123, 2, 40)
    decoded = decode_records(batch)
    assert [r.offset for r in decoded] == list(range(200))
    assert decoded[5].value is None and decoded[6].value == b"payload-6-" * 20
    assert decoded[6].key == b"k6" and decoded[6].timestamp == 1_006
    assert decoded[6].headers == (("n", b"6"),)


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_reads_our_batches(codec: Compression) -> None:
    original = records(300, start=1000)
    batch = DefaultRecordBatch(build_batch(original, base_offset=1000, compression=codec))
    assert batch.validate_crc()
    theirs = list(batch)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in theirs] == [
        (r.offset, r.timestamp, r.key, r.value) for r in original
    ]
    assert [list(r.headers) for r in theirs] == [list(r.headers) for r in original]


# ------------------------------------------------------------------------ recompression (compression.type)


@pytest.mark.parametrize("source", CODECS)
@pytest.mark.parametrize("target", CODECS)
def test_recompressed_batch_keeps_every_field_and_record_and_reads_in_kafka_python(
    source: Compression, target: Compression
) -> None:
    original = _kafka_python_batch(int(source), 200, transactional=True)
    rebuilt = recompress_batch(original, target)
    [(before, _)] = list(iter_batches(original, from_producer=True))
    [(after, _)] = list(iter_batches(rebuilt, from_producer=True))  # CRC and counts checked
    assert after.compression == target
    unchanged = ("base_offset", "partition_leader_epoch", "last_offset_delta", "base_timestamp", "max_timestamp",
                 "producer_id", "producer_epoch", "base_sequence", "records_count")
    assert [getattr(after, f) for f in unchanged] == [getattr(before, f) for f in unchanged]
    assert after.attributes & ~0x07 == before.attributes & ~0x07  # transactional, timestamp type
    assert decode_records(rebuilt) == decode_records(original)
    theirs = DefaultRecordBatch(rebuilt)
    assert theirs.validate_crc() and theirs.compression_type == int(target)
    assert [(r.offset, r.key, r.value) for r in theirs] == [(r.offset, r.key, r.value) for r in decode_records(original)]


@pytest.mark.parametrize("source", CODECS)
def test_recompression_renumbers_records_whose_offset_deltas_do_not_run_in_order(source: Compression) -> None:
    sent = [Record(d, 1_000 + i, b"k%d" % i, b"v" * (i * 70), (("h", b"%d" % i),)) for i, d in enumerate([3, 1, 1, 0])]
    rebuilt = recompress_batch(build_batch(sent, compression=source, last_offset_delta=3), Compression.GZIP)
    [(header, _)] = list(iter_batches(rebuilt, from_producer=True))
    assert header.last_offset_delta == 3 and header.records_count == 4
    assert decode_records(rebuilt) == [Record(i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(sent)]
    assert [r.offset for r in DefaultRecordBatch(rebuilt)] == [0, 1, 2, 3]


@pytest.mark.parametrize("codec", CODECS)
def test_inner_offset_errors_name_every_record_out_of_place(codec: Compression) -> None:
    def batch(deltas: list[int]) -> bytes:
        # values long enough that records past the first need two-byte length varints
        return build_batch([Record(d, 5_000 - 300 * i, b"k", b"v" * 80) for i, d in enumerate(deltas)],
                           compression=codec, last_offset_delta=len(deltas) - 1)

    assert inner_offset_errors(batch(list(range(300)))) == []
    assert inner_offset_errors(batch([0, 2, 1, 3])) == [(1, 2), (2, 1)]
    assert inner_offset_errors(batch([1, 1, 5, 2])) == [(0, 1), (2, 5), (3, 2)]
    assert inner_offset_errors(batch([*range(100), 9_000, *range(101, 200)])) == [(100, 9_000)]
    assert inner_offset_errors(build_control_batch(ControlType.COMMIT, 1, 0, 0, 0)) == []


def test_a_producer_batch_must_start_at_offset_0() -> None:
    # Kafka 4 refuses it before the CRC: a wrong CRC does not change the answer.
    shifted = bytearray(build_batch(records(2)))
    set_base_offset(shifted, 0, 5)
    expect_code(ErrorCode.INVALID_RECORD, shifted, from_producer=True)
    shifted[-1] ^= 0xFF
    expect_code(ErrorCode.INVALID_RECORD, shifted, from_producer=True)
    expect_code(ErrorCode.CORRUPT_MESSAGE, shifted)  # a follower's or the broker's own batch
    assert [h.base_offset for h, _ in iter_batches(build_batch(records(2)), from_producer=True)] == [0]


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_inner_offset_errors_read_records_cut_anywhere_by_the_inflated_chunks(
    codec: Compression, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tiny chunks cut record heads and bodies at every position: the walk carries and skips across them.
    monkeypatch.setattr(compression_module, "_CHUNK", chunk)
    deltas = [*range(70), 71, 70, *range(72, 90), 200, 3_000_000]
    sent = [Record(d, 7_000 + 5 * i, b"k" * (i % 5), b"v" * ((i * 37) % 300), (("h", b"x"),) * (i % 3))
            for i, d in enumerate(deltas)]
    batch = build_batch(sent, compression=codec, last_offset_delta=len(deltas) - 1)
    assert inner_offset_errors(batch) == [(i, d) for i, d in enumerate(deltas) if d != i]


@pytest.mark.parametrize("declared", [2, 4])
def test_inner_offset_errors_refuse_a_section_that_does_not_hold_the_declared_records(declared: int) -> None:
    batch = bytearray(build_batch(records(3), compression=Compression.LZ4))
    struct.pack_into(">i", batch, 57, declared)  # recordsCount
    with pytest.raises(KafkaError) as err:
        inner_offset_errors(batch)
    assert err.value.code == ErrorCode.INVALID_RECORD


def test_recompression_of_data_that_does_not_decompress_is_corrupt_message() -> None:
    batch = bytearray(build_batch(records(50), compression=Compression.ZSTD))
    batch[HEADER_SIZE + 4 : HEADER_SIZE + 12] = b"\xff" * 8
    with pytest.raises(KafkaError) as err:
        recompress_batch(batch, Compression.GZIP)
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE

import errno
import itertools
import os
import struct
import threading
from pathlib import Path

import pytest
from storage_helpers import NOW, LogFactory, make_batch

from tidelog.common.errors import ErrorCode, KafkaError, RecordValidationError, StorageError
from tidelog.protocol.compression import Compression
from tidelog.protocol.records import (
    ControlType,
    Record,
    build_batch,
    build_control_batch,
    decode_records,
    iter_batches,
)
from tidelog.storage import log_config as log_config_module
from tidelog.storage import segment as segment_module
from tidelog.storage.log import PartitionLog
from tidelog.storage.log_config import LogConfig


def offsets_of(data: bytes) -> list[tuple[int, int]]:
    return [(h.base_offset, h.last_offset) for h, _ in iter_batches(data)]


def test_appends_get_dense_offsets_and_reads_return_the_stored_bytes(open_log: LogFactory) -> None:
    log = open_log()
    infos = [log.append_as_leader(make_batch(n), leader_epoch=2, now_ms=NOW) for n in (1, 3, 2)]
    assert [(i.first_offset, i.last_offset, i.record_count) for i in infos] == [(0, 0, 1), (1, 3, 3), (4, 5, 2)]
    assert log.log_end_offset == log.high_watermark == 6
    data = log.read(0, 1 << 20).read_bytes()
    assert offsets_of(data) == [(0, 0), (1, 3), (4, 5)]
    headers = [h for h, _ in iter_batches(data)]
    assert {h.partition_leader_epoch for h in headers} == {2}
    assert [r.value for r in decode_records(data[headers[0].size :][: headers[1].size])] == [b"v" * 20 + b"%d" % i for i in range(3)]


def test_read_starts_at_the_batch_holding_the_offset(open_log: LogFactory) -> None:
    log = open_log()
    for n in (1, 3, 2):
        log.append_as_leader(make_batch(n), leader_epoch=0, now_ms=NOW)
    fetch = log.read(2, 1 << 20)
    assert offsets_of(fetch.read_bytes()) == [(1, 3), (4, 5)]
    assert (fetch.high_watermark, fetch.log_start_offset, fetch.log_end_offset, fetch.end_offset) == (6, 0, 6, 6)


def test_read_limits(open_log: LogFactory) -> None:
    log = open_log()
    sizes = [len(make_batch(n)) for n in (1, 3, 2)]
    for n in (1, 3, 2):
        log.append_as_leader(make_batch(n), leader_epoch=0, now_ms=NOW)
    cases = [
        # (offset, max_bytes, max_offset, min_one_batch) -> batches returned
        ((0, 1, None, True), [(0, 0)]),
        ((0, 1, None, False), []),
        ((0, sizes[0] + sizes[1], None, True), [(0, 0), (1, 3)]),
        ((0, sizes[0] + sizes[1] - 1, None, True), [(0, 0)]),
        ((0, 1 << 20, 4, True), [(0, 0), (1, 3)]),
        ((0, 1 << 20, 3, True), [(0, 0)]),
        ((0, 1 << 20, 0, True), []),
        ((6, 1 << 20, None, True), []),
    ]
    for (offset, max_bytes, max_offset, min_one), expected in cases:
        got = log.read(offset, max_bytes, max_offset=max_offset, min_one_batch=min_one)
        assert offsets_of(got.read_bytes() if got.ranges else b"") == expected, (offset, max_bytes, max_offset)


def test_a_batch_too_big_for_the_fetch_is_never_skipped(open_log: LogFactory) -> None:
    log = open_log(LogConfig(segment_bytes=600))
    big, small = make_batch(1, value=b"x" * 400), make_batch(1)
    for records in (small, big, small):
        log.append_as_leader(records, leader_epoch=0, now_ms=NOW)
    assert [s.base_offset for s in log.segments] == [0, 2]  # the big batch ends the first segment
    got = log.read(1, len(small), min_one_batch=False)
    assert got.ranges == [] and got.end_offset == 1


def test_reads_find_every_offset_when_batches_straddle_the_header_scan_window(open_log: LogFactory) -> None:
    # A sparse index (one entry per 64 KiB) makes each read walk many batch headers through the
    # segment's 16 KiB scan window; batch sizes vary so that headers and bodies straddle its edges.
    log = open_log(LogConfig(index_interval_bytes=64 * 1024))
    bounds = []
    for i in range(300):
        info = log.append_as_leader(make_batch(1 + i % 3, value=b"v" * (37 * (i % 11))), leader_epoch=0, now_ms=NOW)
        bounds.append((info.first_offset, info.last_offset))
    everything = log.read(0, 1 << 24).read_bytes()
    assert offsets_of(everything) == bounds
    for first, last in bounds[::7] + bounds[-3:]:
        got = log.read(last, 1 << 24)
        assert offsets_of(got.read_bytes())[0] == (first, last)
        assert got.end_offset == bounds[-1][1] + 1
    # And a byte limit that ends mid-walk: whole batches only, the next offset where they stop.
    limited = log.read(bounds[100][0], 5000, min_one_batch=False)
    returned = offsets_of(limited.read_bytes())
    assert returned[0] == bounds[100] and limited.end_offset == returned[-1][1] + 1
    assert limited.size <= 5000


def test_a_read_at_the_log_end_or_the_bound_is_empty(open_log: LogFactory) -> None:
    log = open_log()
    for n in (1, 3):
        log.append_as_leader(make_batch(n), leader_epoch=0, now_ms=NOW)
    for offset, max_offset in ((4, None), (1, 1), (3, 2)):
        got = log.read(offset, 1 << 20, max_offset=max_offset)
        assert (got.ranges, got.end_offset, got.high_watermark) == ([], offset, 4)


@pytest.mark.parametrize("offset", [-1, 7])
def test_read_outside_the_log_is_out_of_range(open_log: LogFactory, offset: int) -> None:
    log = open_log()
    log.append_as_leader(make_batch(6), leader_epoch=0, now_ms=NOW)
    with pytest.raises(KafkaError) as err:
        log.read(offset, 100)
    assert err.value.code is ErrorCode.OFFSET_OUT_OF_RANGE


def corrupt_crc(b: bytes) -> bytes:
    return b[:-1] + bytes([b[-1] ^ 0xFF])


def bad_magic(b: bytes) -> bytes:
    return b[:16] + b"\x01" + b[17:]


def overrun(b: bytes) -> bytes:
    return b[:8] + struct.pack(">i", len(b)) + b[12:]


def lying_count(b: bytes) -> bytes:
    from tidelog.protocol.records import BatchHeader, _rewrite_crc

    buf = bytearray(b)
    header = BatchHeader.parse(buf)
    struct.pack_into(">i", buf, 57, header.records_count + 1)
    _rewrite_crc(buf, 0)
    return bytes(buf)


BAD_INPUT = [
    (corrupt_crc(make_batch(2)), LogConfig(), ErrorCode.CORRUPT_MESSAGE),
    (bad_magic(make_batch(2)), LogConfig(), ErrorCode.INVALID_RECORD),
    (overrun(make_batch(2)), LogConfig(), ErrorCode.CORRUPT_MESSAGE),
    (make_batch(2)[:-3], LogConfig(), ErrorCode.CORRUPT_MESSAGE),
    (lying_count(make_batch(2)), LogConfig(), ErrorCode.INVALID_RECORD),
    (make_batch(50), LogConfig(max_message_bytes=500), ErrorCode.MESSAGE_TOO_LARGE),
    (make_batch(2, key=None), LogConfig(cleanup_policy=("compact",)), ErrorCode.INVALID_RECORD),
    (make_batch(1, ts=NOW + 3_600_001), LogConfig(), ErrorCode.INVALID_TIMESTAMP),
    (make_batch(1, ts=NOW - 1001), LogConfig(message_timestamp_before_max_ms=1000), ErrorCode.INVALID_TIMESTAMP),
    (build_control_batch(ControlType.COMMIT, 5, 0, 0, NOW), LogConfig(), ErrorCode.INVALID_RECORD),
]


@pytest.mark.parametrize(("records", "config", "code"), BAD_INPUT)
def test_bad_batches_are_refused_and_nothing_is_written(
    open_log: LogFactory, records: bytes, config: LogConfig, code: ErrorCode
) -> None:
    log = open_log(config)
    log.append_as_leader(make_batch(2), leader_epoch=0, now_ms=NOW)
    before = log.read(0, 1 << 20).read_bytes()
    with pytest.raises(KafkaError) as err:
        log.append_as_leader(make_batch(1) + records, leader_epoch=0, now_ms=NOW)
    assert err.value.code is code
    assert log.log_end_offset == 2
    assert log.read(0, 1 << 20).read_bytes() == before


RECORD_ERRORS = [
    # (key, timestamp) per record, config, the partition's error, the indexes named in record_errors
    ([(b"k", NOW), (None, NOW), (b"k", NOW), (None, NOW)], LogConfig(cleanup_policy=("compact",)),
     ErrorCode.INVALID_RECORD, [1, 3]),
    ([(b"k", NOW), (b"k", NOW + 3_600_001), (b"k", NOW - 5000)], LogConfig(message_timestamp_before_max_ms=1000),
     ErrorCode.INVALID_TIMESTAMP, [1, 2]),
    # the first record's timestamp is in range, a later one (negative delta) is not
    ([(b"k", NOW), (b"k", NOW - 5000)], LogConfig(message_timestamp_before_max_ms=1000),
     ErrorCode.INVALID_TIMESTAMP, [1]),
    # one error per record, the key first; a timestamp error decides the partition's error
    ([(None, NOW + 3_600_001), (None, NOW), (b"k", NOW + 3_600_001)], LogConfig(cleanup_policy=("compact",)),
     ErrorCode.INVALID_TIMESTAMP, [0, 1, 2]),
]


@pytest.mark.parametrize(("stamps", "config", "code", "indexes"), RECORD_ERRORS)
def test_every_failing_record_is_named_in_the_error(
    open_log: LogFactory, stamps: list[tuple[bytes | None, int]], config: LogConfig, code: ErrorCode,
    indexes: list[int],
) -> None:
    log = open_log(config)
    batch = build_batch([Record(i, ts, key, b"v") for i, (key, ts) in enumerate(stamps)])
    with pytest.raises(RecordValidationError) as err:
        log.append_as_leader(batch, leader_epoch=0, now_ms=NOW)
    assert err.value.code is code
    assert [index for index, _ in err.value.record_errors] == indexes
    assert log.log_end_offset == 0


COMPRESSED = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
# offset deltas as sent, then the indexes of the records out of place
MISPLACED = [([0, 2, 1, 3], [1, 2]), ([1, 1, 5, 2], [0, 2, 3])]


def batch_with_offset_deltas(deltas: list[int], codec: Compression, keys: list[bytes | None] | None = None) -> bytes:
    """A producer batch whose records carry ``deltas`` as offset deltas, its header saying
    ``len(deltas)`` records and a last offset delta of ``len(deltas) - 1``."""
    keys = keys or [b"k%d" % i for i in range(len(deltas))]
    return build_batch([Record(delta, NOW + i, keys[i], b"v%d" % i) for i, delta in enumerate(deltas)],
                       compression=codec, last_offset_delta=len(deltas) - 1)


@pytest.mark.parametrize("codec", COMPRESSED)
@pytest.mark.parametrize(("deltas", "indexes"), MISPLACED)
@pytest.mark.parametrize("compression_type", ["producer", "same"])
def test_a_compressed_batch_kept_as_sent_names_every_record_whose_offset_delta_is_out_of_place(
    open_log: LogFactory, codec: Compression, deltas: list[int], indexes: list[int], compression_type: str,
) -> None:
    topic_codec = codec.name.lower() if compression_type == "same" else "producer"
    log = open_log(LogConfig(compression_type=topic_codec))
    with pytest.raises(RecordValidationError) as err:
        log.append_as_leader(batch_with_offset_deltas(deltas, codec), leader_epoch=0, now_ms=NOW)
    assert err.value.code is ErrorCode.INVALID_RECORD
    assert err.value.record_errors == tuple(
        (i, f"offset delta {deltas[i]} where {i} was expected: the records of a compressed batch must have "
            "offset deltas 0, 1, 2...") for i in indexes)
    assert log.log_end_offset == 0
    log.append_as_leader(batch_with_offset_deltas([0, 1, 2], codec), leader_epoch=0, now_ms=NOW)  # in order: kept
    assert log.log_end_offset == 3


@pytest.mark.parametrize("codec", [Compression.NONE, *COMPRESSED])
def test_a_batch_recompressed_for_the_topic_has_its_records_renumbered_in_order(
    open_log: LogFactory, codec: Compression,
) -> None:
    target = Compression.ZSTD if codec is Compression.GZIP else Compression.GZIP
    log = open_log(LogConfig(compression_type=target.name.lower()))
    log.append_as_leader(make_batch(2), leader_epoch=0, now_ms=NOW)
    info = log.append_as_leader(batch_with_offset_deltas([1, 1, 5, 2], codec), leader_epoch=0, now_ms=NOW)
    assert (info.first_offset, info.last_offset) == (2, 5)
    stored = log.read(2, 1 << 20).read_bytes()
    [(header, _)] = list(iter_batches(stored))
    assert header.compression is target
    assert [(r.offset, r.key) for r in decode_records(stored)] == [(2, b"k0"), (3, b"k1"), (4, b"k2"), (5, b"k3")]


def test_an_uncompressed_batch_kept_uncompressed_is_stored_with_the_offset_deltas_it_was_sent_with(
    open_log: LogFactory,
) -> None:
    # Kafka reads no offset delta of such a batch: its records come back as sent.
    log = open_log()
    log.append_as_leader(batch_with_offset_deltas([0, 2, 1, 3], Compression.NONE), leader_epoch=0, now_ms=NOW)
    assert [r.offset for r in decode_records(log.read(0, 1 << 20).read_bytes())] == [0, 2, 1, 3]


def test_keyless_records_of_a_compacted_topic_are_named_before_offsets_out_of_place(open_log: LogFactory) -> None:
    # Kafka fails the records' own checks first; the offsets matter only when every record passes them.
    log = open_log(LogConfig(cleanup_policy=("compact",)))
    with pytest.raises(RecordValidationError) as err:
        log.append_as_leader(batch_with_offset_deltas([0, 2, 1], Compression.LZ4, [b"a", None, b"c"]),
                             leader_epoch=0, now_ms=NOW)
    assert [index for index, _ in err.value.record_errors] == [1]
    with pytest.raises(RecordValidationError) as err:
        log.append_as_leader(batch_with_offset_deltas([0, 2, 1], Compression.LZ4), leader_epoch=0, now_ms=NOW)
    assert [index for index, _ in err.value.record_errors] == [1, 2]
    assert log.log_end_offset == 0


def test_an_empty_request_is_refused(open_log: LogFactory) -> None:
    with pytest.raises(KafkaError) as err:
        open_log().append_as_leader(b"", leader_epoch=0, now_ms=NOW)
    assert err.value.code is ErrorCode.INVALID_RECORD


def test_log_append_time_is_stamped(open_log: LogFactory) -> None:
    log = open_log(LogConfig(message_timestamp_type="LogAppendTime"))
    info = log.append_as_leader(make_batch(2, ts=5), leader_epoch=0, now_ms=NOW + 7)
    assert info.log_append_time == NOW + 7 and info.max_timestamp == NOW + 7
    records = decode_records(log.read(0, 1 << 20).read_bytes())
    assert [r.timestamp for r in records] == [NOW + 7, NOW + 7]


def test_retried_batch_gets_its_original_offsets(open_log: LogFactory) -> None:
    log = open_log()
    log.append_as_leader(make_batch(1), leader_epoch=0, now_ms=NOW)
    first = log.append_as_leader(make_batch(3, pid=42, epoch=0, seq=0), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(make_batch(2, pid=42, epoch=0, seq=3), leader_epoch=0, now_ms=NOW)
    retry = log.append_as_leader(make_batch(3, pid=42, epoch=0, seq=0), leader_epoch=0, now_ms=NOW)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset) == (1, 3)
    assert log.log_end_offset == 6
    with pytest.raises(KafkaError) as err:
        log.append_as_leader(make_batch(1, pid=42, epoch=0, seq=9), leader_epoch=0, now_ms=NOW)
    assert err.value.code is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


@pytest.mark.parametrize("clean", [True, False])
def test_producer_state_survives_reopen(tmp_path: Path, clean: bool) -> None:
    log = PartitionLog(tmp_path / "t-0", LogConfig(segment_bytes=400), now_ms=NOW)
    for seq in range(0, 12, 2):
        log.append_as_leader(make_batch(2, pid=7, epoch=1, seq=seq), leader_epoch=0, now_ms=NOW)
    log.close(clean=clean)
    log = PartitionLog(tmp_path / "t-0", LogConfig(segment_bytes=400), clean_shutdown=clean, now_ms=NOW)
    retry = log.append_as_leader(make_batch(2, pid=7, epoch=1, seq=10), leader_epoch=0, now_ms=NOW)
    assert retry.duplicate and retry.first_offset == 10
    with pytest.raises(KafkaError):
        log.append_as_leader(make_batch(2, pid=7, epoch=1, seq=14), leader_epoch=0, now_ms=NOW)
    assert log.append_as_leader(make_batch(2, pid=7, epoch=1, seq=12), leader_epoch=0, now_ms=NOW).first_offset == 12
    log.close()


def test_rolls_on_segment_bytes_and_reads_span_segments(open_log: LogFactory) -> None:
    log = open_log(LogConfig(segment_bytes=300))
    for _ in range(10):
        log.append_as_leader(make_batch(1), leader_epoch=0, now_ms=NOW)
    assert len(log.segments) > 3
    assert all(s.size <= 300 for s in log.segments)
    assert offsets_of(log.read(0, 1 << 20).read_bytes()) == [(i, i) for i in range(10)]
    assert [p.name for p in sorted(log.dir.glob("*.log"))][1].startswith("0000000000000000000")


def test_rolls_on_segment_ms_and_full_index(open_log: LogFactory) -> None:
    # segment.ms is measured between record timestamps (the first batch's and the incoming one's),
    # as Kafka's LogSegment.shouldRoll does, not against the broker's clock.
    log = open_log(LogConfig(segment_ms=1000))
    log.append_as_leader(make_batch(1, ts=NOW), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(make_batch(1, ts=NOW + 1000), leader_epoch=0, now_ms=NOW + 5000)
    assert len(log.segments) == 1
    log.append_as_leader(make_batch(1, ts=NOW + 1001), leader_epoch=0, now_ms=NOW + 5000)
    assert [s.base_offset for s in log.segments] == [0, 2]
    small = open_log(LogConfig(segment_index_bytes=16, index_interval_bytes=1), name="u-0")
    for _ in range(6):
        small.append_as_leader(make_batch(1), leader_epoch=0, now_ms=NOW)
    assert len(small.segments) >= 2
    assert all(len(s.offset_index) <= 2 for s in small.segments)


def test_segment_jitter_ms_rolls_each_segment_up_to_that_much_earlier(open_log: LogFactory,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    draws = iter([600, 0])  # the first segment draws 600 ms of jitter, the second none

    def draw(bound: int) -> int:
        assert bound == 1000  # min(segment.jitter.ms, segment.ms)
        return next(draws)

    monkeypatch.setattr(log_config_module.random, "randrange", draw)
    log = open_log(LogConfig(segment_ms=1000, segment_jitter_ms=5000))  # the jitter is capped at segment.ms
    log.append_as_leader(make_batch(1, ts=NOW), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(make_batch(1, ts=NOW + 400), leader_epoch=0, now_ms=NOW)
    assert len(log.segments) == 1
    log.append_as_leader(make_batch(1, ts=NOW + 401), leader_epoch=0, now_ms=NOW)  # past 1000 - 600
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.append_as_leader(make_batch(1, ts=NOW + 1401), leader_epoch=0, now_ms=NOW)
    assert len(log.segments) == 2  # no jitter on this one: 1000 ms after its first batch
    log.append_as_leader(make_batch(1, ts=NOW + 1402), leader_epoch=0, now_ms=NOW)
    assert [s.base_offset for s in log.segments] == [0, 2, 4]


def test_segment_jitter_draws_spread_below_segment_ms() -> None:
    config = LogConfig(segment_ms=100, segment_jitter_ms=60)
    draws = {config.random_segment_jitter() for _ in range(2000)}
    assert draws <= set(range(60)) and len(draws) > 50
    assert LogConfig(segment_ms=100).random_segment_jitter() == 0


def test_records_stamped_long_ago_do_not_roll_a_segment_per_append(open_log: LogFactory) -> None:
    # A replay of last month's events: every batch is older than segment.ms (7 days) by the broker's
    # clock, yet they are a few milliseconds apart, so they share one segment (Kafka's rule).
    log = open_log()
    month_ago = NOW - 30 * 24 * 3600 * 1000
    for i in range(5):
        log.append_as_leader(make_batch(1, ts=month_ago + i), leader_epoch=0, now_ms=NOW)
    assert len(log.segments) == 1


def test_offset_for_timestamp_and_max_timestamp(open_log: LogFactory) -> None:
    log = open_log(LogConfig(segment_bytes=400, index_interval_bytes=50))
    for i in range(20):
        log.append_as_leader(make_batch(2, ts=NOW - 100_000 + i * 10), leader_epoch=i // 5, now_ms=NOW)
    assert log.offset_for_timestamp(NOW - 100_000) == (0, NOW - 100_000, 0)
    assert log.offset_for_timestamp(NOW - 100_000 + 55) == (12, NOW - 100_000 + 60, 1)
    assert log.offset_for_timestamp(NOW) is None
    assert log.max_timestamp_offset() == (38, NOW - 100_000 + 190, 3)  # first record of the tie
    assert log.end_offset_for_epoch(1) == (1, 20)
    assert log.end_offset_for_epoch(3) == (3, 40)


def test_truncate_to_drops_later_batches_and_epochs(open_log: LogFactory) -> None:
    log = open_log(LogConfig(segment_bytes=300))
    for i in range(10):
        log.append_as_leader(make_batch(2), leader_epoch=i, now_ms=NOW)
    assert log.truncate_to(9) == 8  # the batch 8..9 straddles: it goes
    assert log.log_end_offset == log.high_watermark == 8
    assert offsets_of(log.read(0, 1 << 20).read_bytes())[-1] == (6, 7)
    assert log.end_offset_for_epoch(3) == (3, 8)
    assert log.append_as_leader(make_batch(1), leader_epoch=20, now_ms=NOW).first_offset == 8


def test_truncating_inside_an_indexed_batch_drops_its_index_entry(open_log: LogFactory) -> None:
    # An index entry on every batch; the last batch (4..5) has one and straddles the cut at 5.
    log = open_log(LogConfig(index_interval_bytes=1))
    for n in (1, 3, 2):
        log.append_as_leader(make_batch(n), leader_epoch=0, now_ms=NOW)
    assert log.truncate_to(5) == 4
    assert log.log_end_offset == 4
    assert offsets_of(log.read(0, 1 << 20).read_bytes()) == [(0, 0), (1, 3)]
    assert log.append_as_leader(make_batch(1), leader_epoch=0, now_ms=NOW).first_offset == 4
    assert offsets_of(log.read(4, 1 << 20).read_bytes()) == [(4, 4)]


def test_truncating_the_batch_that_holds_the_log_start_keeps_the_start_at_or_below_the_end(
    open_log: LogFactory,
) -> None:
    log = open_log()
    for n in (1, 1, 1, 1, 2):
        log.append_as_leader(make_batch(n), leader_epoch=0, now_ms=NOW)
    log.delete_records_before(5)  # inside the batch 4..5
    assert log.truncate_to(5) == 4  # that batch straddles the cut: it goes
    assert log.log_start_offset == log.log_end_offset == 4
    assert log.read(4, 1 << 20).ranges == []
    assert log.append_as_leader(make_batch(1), leader_epoch=0, now_ms=NOW).first_offset == 4


@pytest.mark.parametrize("interval", [1, 150, 4096])
def test_batches_are_found_the_same_from_the_tail_positions_and_from_the_index(
    open_log: LogFactory, interval: int
) -> None:
    """The segment finds batches after its last index entry from positions kept in memory; after
    appends, truncation and a reopen they must agree with a walk from the index."""

    def check(log: PartitionLog) -> None:
        for seg in log.segments:
            walked = list(seg.headers_from(0))
            for offset in range(seg.base_offset, seg.next_offset + 2):
                expected = next(((p, h) for p, h in walked if h.last_offset >= offset), None)
                assert seg.find(offset) == expected, (interval, offset)
                located = None if expected is None else (
                    expected[0], expected[1].base_offset, expected[1].last_offset, expected[1].size
                )
                assert seg._locate(offset) == located, (interval, offset)

    log = open_log(LogConfig(index_interval_bytes=interval, segment_bytes=2000))
    for n in itertools.islice(itertools.cycle((1, 3, 2, 5)), 30):
        log.append_as_leader(make_batch(n), leader_epoch=0, now_ms=NOW)
    check(log)
    log.truncate_to(log.log_end_offset - 4)
    check(log)
    for n in (2, 1):
        log.append_as_leader(make_batch(n), leader_epoch=0, now_ms=NOW)
    check(log)
    log.close()
    check(PartitionLog(log.dir, log.config, now_ms=NOW))


def test_delete_records_moves_the_log_start(open_log: LogFactory) -> None:
    log = open_log(LogConfig(segment_bytes=300))
    for _ in range(10):
        log.append_as_leader(make_batch(2), leader_epoch=0, now_ms=NOW)
    segments_before = len(log.segments)
    assert log.delete_records_before(7) == 7
    assert log.log_start_offset == 7 and len(log.segments) < segments_before
    with pytest.raises(KafkaError):
        log.read(5, 100)
    assert offsets_of(log.read(7, 1 << 20).read_bytes())[0] == (6, 7)
    with pytest.raises(KafkaError) as err:
        log.delete_records_before(21)
    assert err.value.code is ErrorCode.OFFSET_OUT_OF_RANGE


def test_retention_by_time_and_size_never_removes_the_active_segment(open_log: LogFactory) -> None:
    log = open_log(LogConfig(segment_bytes=300, retention_ms=10_000, file_delete_delay_ms=500))
    for i in range(10):
        log.append_as_leader(make_batch(2, ts=NOW + i * 1000), leader_epoch=0, now_ms=NOW + 9000)
    bases = [s.base_offset for s in log.segments]
    removed = log.apply_retention(NOW + 13_500)  # segments whose newest record is older than NOW+3500
    assert removed >= 1 and log.log_start_offset == log.segments[0].base_offset > 0
    assert log.apply_retention(NOW + 10**9) == len(bases) - removed - 1
    assert len(log.segments) == 1 and log.segments[0].base_offset == bases[-1]
    sized = open_log(LogConfig(segment_bytes=300, retention_bytes=600), name="s-0")
    for _ in range(10):
        sized.append_as_leader(make_batch(2), leader_epoch=0, now_ms=NOW)
    sized.apply_retention(NOW)
    assert sized.size_bytes <= 600 + 300


def test_deleted_segment_stays_readable_until_the_delay(open_log: LogFactory) -> None:
    log = open_log(LogConfig(segment_bytes=300, retention_ms=0, file_delete_delay_ms=1000))
    for _ in range(6):
        log.append_as_leader(make_batch(2), leader_epoch=0, now_ms=NOW)
    fetch = log.read(0, 1 << 20)
    expected = fetch.read_bytes()
    assert log.apply_retention(NOW + 10**6) > 0
    assert list(log.dir.glob("*.log.deleted"))
    assert fetch.read_bytes() == expected
    assert log.delete_expired_files(NOW + 10**6 + 999) == 0
    assert log.delete_expired_files(NOW + 10**6 + 1000) > 0
    assert not list(log.dir.glob("*.deleted"))
    for _ in range(20):  # files opened now must not take over the descriptors the fetch holds
        open_log(name=f"other-{_}").append_as_leader(make_batch(1), leader_epoch=0, now_ms=NOW)
    assert fetch.read_bytes() == expected, "a fetch in flight keeps reading its (deleted) segment"


def test_flush_messages_asks_for_a_flush_and_flush_moves_the_recovery_point(open_log: LogFactory) -> None:
    log = open_log(LogConfig(flush_messages=3))
    assert not log.append_as_leader(make_batch(2), leader_epoch=0, now_ms=NOW).needs_flush
    assert log.append_as_leader(make_batch(1), leader_epoch=0, now_ms=NOW).needs_flush
    assert log.flush() == 3 == log.recovery_point
    assert not log.append_as_leader(make_batch(1), leader_epoch=0, now_ms=NOW).needs_flush


def reopen(tmp_path: Path, config: LogConfig, *, clean: bool) -> PartitionLog:
    return PartitionLog(tmp_path / "t-0", config, clean_shutdown=clean, now_ms=NOW)


def test_unclean_reopen_cuts_a_torn_tail_and_rebuilds_indexes(tmp_path: Path) -> None:
    config = LogConfig(index_interval_bytes=100)
    log = reopen(tmp_path, config, clean=False)
    for _ in range(20):
        log.append_as_leader(make_batch(2), leader_epoch=0, now_ms=NOW)
    good = log.read(0, 1 << 20).read_bytes()
    log.close(clean=False)
    seg = tmp_path / "t-0" / "00000000000000000000.log"
    with open(seg, "ab") as f:
        f.write(make_batch(3)[:50])
    (tmp_path / "t-0" / "00000000000000000000.index").write_bytes(b"\xff" * 16)
    log = reopen(tmp_path, config, clean=False)
    assert log.recovered_unclean and log.truncated_bytes == 50
    assert log.log_end_offset == 40 and log.read(0, 1 << 20).read_bytes() == good
    assert len(log.active_segment.offset_index) > 3
    assert offsets_of(log.read(33, 1 << 20).read_bytes())[0] == (32, 33)
    log.close()


@pytest.mark.parametrize("damage", ["delete", "garble", "truncate"])
def test_index_problems_after_a_clean_shutdown_are_repaired(tmp_path: Path, damage: str) -> None:
    config = LogConfig(index_interval_bytes=100)
    log = reopen(tmp_path, config, clean=False)
    for _ in range(20):
        log.append_as_leader(make_batch(2), leader_epoch=0, now_ms=NOW)
    log.close()
    index = tmp_path / "t-0" / "00000000000000000000.index"
    if damage == "delete":
        index.unlink()
    elif damage == "garble":
        index.write_bytes(os.urandom(64))
    else:
        index.write_bytes(index.read_bytes()[:-3])
    log = reopen(tmp_path, config, clean=True)
    assert log.log_end_offset == 40
    assert len(log.active_segment.offset_index) > 3, "the index was rebuilt, not left empty"
    for offset in (0, 17, 39):
        assert offsets_of(log.read(offset, 1).read_bytes())[0][0] <= offset
    assert log.append_as_leader(make_batch(1), leader_epoch=0, now_ms=NOW).first_offset == 40
    log.close()


def test_a_bit_flip_in_the_middle_drops_everything_after_it(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=1000)
    log = reopen(tmp_path, config, clean=False)
    for _ in range(30):
        log.append_as_leader(make_batch(2), leader_epoch=0, now_ms=NOW)
    assert len(log.segments) >= 3
    log.close(clean=False)
    first = tmp_path / "t-0" / "00000000000000000000.log"
    data = bytearray(first.read_bytes())
    size = len(make_batch(2))
    data[size * 2 + 70] ^= 0x40
    first.write_bytes(bytes(data))
    log = reopen(tmp_path, config, clean=False)
    assert log.log_end_offset == 4 and len(log.segments) == 1
    assert offsets_of(log.read(0, 1 << 20).read_bytes()) == [(0, 1), (2, 3)]
    log.close()


def test_aborted_transactions_are_indexed_and_bound_the_lso(open_log: LogFactory) -> None:
    log = open_log()
    log.append_as_leader(make_batch(2, pid=5, epoch=0, seq=0, transactional=True), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(make_batch(1), leader_epoch=0, now_ms=NOW)
    assert log.high_watermark == 3 and log.last_stable_offset == 0
    marker = build_control_batch(ControlType.ABORT, 5, 0, 7, NOW)
    log.append_as_leader(marker, leader_epoch=0, now_ms=NOW, from_client=False)
    assert log.last_stable_offset == 4
    (txn,) = log.aborted_transactions(0, 4)
    assert (txn.producer_id, txn.first_offset, txn.last_offset) == (5, 0, 3)
    assert log.read(0, 1 << 20, isolation_committed=True).aborted == [txn]


def test_unclean_recovery_keeps_the_aborted_transactions_of_the_segments_it_rereads(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=400)
    log = reopen(tmp_path, config, clean=False)
    for pid in (5, 6, 7):  # one aborted transaction per segment, the last in the active one
        log.append_as_leader(make_batch(3, pid=pid, epoch=0, seq=0, transactional=True), leader_epoch=0, now_ms=NOW)
        log.append_as_leader(build_control_batch(ControlType.ABORT, pid, 1, 0, NOW), leader_epoch=0, now_ms=NOW,
                             from_client=False)
        log.flush()
    before = log.aborted_transactions(0, log.log_end_offset)
    assert [t.producer_id for t in before] == [5, 6, 7]
    log.close(clean=False)
    log = reopen(tmp_path, config, clean=False)
    assert log.recovered_unclean
    assert log.aborted_transactions(0, log.log_end_offset) == before
    log.close(clean=False)


def test_enospc_fails_the_append_without_a_partial_batch(open_log: LogFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log()
    log.append_as_leader(make_batch(2), leader_epoch=0, now_ms=NOW)
    real_pwritev = os.pwritev

    def short(fd: int, parts: list[bytes], offset: int) -> int:
        return os.pwrite(fd, bytes(parts[0])[:20], offset)  # the kernel wrote only 20 bytes

    def full(fd: int, data: memoryview, offset: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(segment_module.os, "pwritev", short)
    monkeypatch.setattr(segment_module.os, "pwrite", full)
    with pytest.raises(KafkaError) as err:
        log.append_as_leader(make_batch(3), leader_epoch=0, now_ms=NOW)
    assert err.value.code is ErrorCode.KAFKA_STORAGE_ERROR and not isinstance(err.value, StorageError)
    assert log.active_segment.size == os.path.getsize(log.active_segment.log_path) == len(make_batch(2))
    monkeypatch.undo()
    assert os.pwritev is real_pwritev
    assert log.append_as_leader(make_batch(3), leader_epoch=0, now_ms=NOW).first_offset == 2
    assert offsets_of(log.read(0, 1 << 20).read_bytes()) == [(0, 1), (2, 4)]


def test_eio_takes_the_log_offline(open_log: LogFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    failures = []
    log = open_log(on_io_error=lambda failed, exc: failures.append(exc.errno))

    def broken(fd: int, parts: list[bytes], offset: int) -> int:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(segment_module.os, "pwritev", broken)
    with pytest.raises(StorageError):
        log.append_as_leader(make_batch(1), leader_epoch=0, now_ms=NOW)
    assert failures == [errno.EIO] and log.offline
    with pytest.raises(StorageError):
        log.read(0, 100)


def test_follower_appends_keep_leader_offsets_and_epochs(open_log: LogFactory) -> None:
    leader = open_log()
    for epoch in (1, 1, 4):
        leader.append_as_leader(make_batch(2), leader_epoch=epoch, now_ms=NOW)
    follower = open_log(name="f-0")
    info = follower.append_as_follower(leader.read(0, 1 << 20).read_bytes())
    assert (info.first_offset, info.last_offset) == (0, 5)
    assert follower.read(0, 1 << 20).read_bytes() == leader.read(0, 1 << 20).read_bytes()
    assert follower.end_offset_for_epoch(1) == (1, 4)
    with pytest.raises(KafkaError):
        follower.append_as_follower(leader.read(0, 1 << 20).read_bytes())


def test_concurrent_reads_flushes_and_retention_see_a_consistent_log(open_log: LogFactory) -> None:


    log = open_log(LogConfig(segment_bytes=2000, retention_bytes=6000, file_delete_delay_ms=0))
    stop = threading.Event()
    problems: list[BaseException] = []

    def reader() -> None:
        while not stop.is_set():
            try:
                start = log.log_start_offset
                fetch = log.read(start, 1 << 20)
                data = fetch.read_bytes() if fetch.ranges else b""
                offsets = offsets_of(data)
                assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(offsets))
            except KafkaError as exc:
                if exc.code is not ErrorCode.OFFSET_OUT_OF_RANGE:  # retention may move the start meanwhile
                    problems.append(exc)
            except BaseException as exc:
                problems.append(exc)

    def background() -> None:
        while not stop.is_set():
            log.flush()
            log.apply_retention(NOW)

    threads = [threading.Thread(target=reader), threading.Thread(target=background)]
    for t in threads:
        t.start()
    for _ in range(300):
        log.append_as_leader(make_batch(3), leader_epoch=0, now_ms=NOW)
    stop.set()
    for t in threads:
        t.join()
    assert problems == []
    assert log.log_end_offset == 900 and log.log_start_offset > 0


def test_a_new_leader_epoch_is_made_durable_by_flush_before_the_recovery_point_passes_it(tmp_path: Path) -> None:
    """The append writes the epoch checkpoint without fsync (off the produce path); flush makes it durable."""
    config = LogConfig()
    log = reopen(tmp_path, config, clean=False)
    log.append_as_leader(make_batch(2), leader_epoch=3, now_ms=NOW)
    assert log.epoch_cache.unflushed
    assert (tmp_path / "t-0" / "leader-epoch-checkpoint").read_text().splitlines() == ["0", "1", "3 0"]
    assert log.flush() == 2
    assert not log.epoch_cache.unflushed
    log.append_as_leader(make_batch(1), leader_epoch=3, now_ms=NOW)
    assert not log.epoch_cache.unflushed, "a known epoch writes nothing"
    log.close(clean=False)


def test_an_epoch_entry_lost_in_a_crash_is_relearnt_from_the_batches_above_the_recovery_point(tmp_path: Path) -> None:
    config = LogConfig()
    log = reopen(tmp_path, config, clean=False)
    log.append_as_leader(make_batch(2), leader_epoch=1, now_ms=NOW)
    log.flush()  # epoch 1 durable, recovery point 2
    log.append_as_leader(make_batch(3), leader_epoch=4, now_ms=NOW)
    log.close(clean=False)
    # A power loss after the un-fsynced rename: the file on disk still holds only epoch 1.
    (tmp_path / "t-0" / "leader-epoch-checkpoint").write_text("0\n1\n1 0\n")
    log = reopen(tmp_path, config, clean=False)
    assert log.epoch_cache.entries() == [(1, 0), (4, 2)]
    assert not log.epoch_cache.unflushed
    assert log.end_offset_for_epoch(1) == (1, 2)

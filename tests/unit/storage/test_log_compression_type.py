"""A topic's compression.type: batches stored in the topic's codec, whatever the producer sent."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import crc32c
import pytest
from storage_helpers import NOW, LogFactory, make_batch

from tidelog.common.errors import ErrorCode, KafkaError
from tidelog.protocol.compression import Compression
from tidelog.protocol.records import (
    BatchHeader,
    ControlType,
    Record,
    build_batch,
    build_control_batch,
    decode_records,
    iter_batches,
)
from tidelog.storage.log import PartitionLog
from tidelog.storage.log_config import LogConfig


def stored(log: PartitionLog) -> list[tuple[BatchHeader, bytes]]:
    data = log.read(0, 1 << 24).read_bytes()
    return [(h, data[p : p + h.size]) for h, p in iter_batches(data)]


def words(n: int) -> list[Record]:
    return [Record(i, NOW + i, b"k%d" % (i % 5), b"value %d " % i * 20, (("h", b"%d" % i),)) for i in range(n)]


@pytest.mark.parametrize("target", ["uncompressed", "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("source", list(Compression))
def test_every_batch_is_stored_in_the_topics_codec_with_its_records_and_offsets(
    open_log: LogFactory, source: Compression, target: str
) -> None:
    log = open_log(LogConfig(compression_type=target))
    first = log.append_as_leader(build_batch(words(10), compression=source), leader_epoch=3, now_ms=NOW)
    second = log.append_as_leader(build_batch(words(4), compression=source), leader_epoch=3, now_ms=NOW)
    assert (first.first_offset, first.last_offset, second.first_offset, second.last_offset) == (0, 9, 10, 13)
    batches = stored(log)
    assert [h.compression for h, _ in batches] == [LogConfig(compression_type=target).target_compression] * 2
    assert [(h.base_offset, h.partition_leader_epoch) for h, _ in batches] == [(0, 3), (10, 3)]
    values = [r.value for _, batch in batches for r in decode_records(batch)]
    assert values == [r.value for r in words(10)] + [r.value for r in words(4)]
    assert decode_records(batches[0][1])[7].headers == (("h", b"7"),)


def test_producer_keeps_each_batch_as_sent(open_log: LogFactory) -> None:
    log = open_log(LogConfig(compression_type="producer"))
    sent = [build_batch(words(3), compression=codec) for codec in Compression]
    for batch in sent:
        log.append_as_leader(batch, leader_epoch=0, now_ms=NOW)
    assert [bytes(b[61:]) for _, b in stored(log)] == [b[61:] for b in sent]
    assert [h.compression for h, _ in stored(log)] == list(Compression)


def test_a_batch_already_in_the_topics_codec_is_stored_byte_for_byte(open_log: LogFactory) -> None:
    log = open_log(LogConfig(compression_type="lz4"))
    sent = build_batch(words(30), compression=Compression.LZ4)
    log.append_as_leader(sent, leader_epoch=0, now_ms=NOW)
    [(_, kept)] = stored(log)
    assert kept[16:] == sent[16:]  # all but the base offset and leader epoch, which the log assigns


def test_idempotent_batches_keep_their_sequence_and_a_retry_is_still_a_duplicate(open_log: LogFactory) -> None:
    log = open_log(LogConfig(compression_type="gzip"))
    batch = make_batch(5, pid=77, epoch=2, seq=0)
    first = log.append_as_leader(batch, leader_epoch=0, now_ms=NOW)
    retry = log.append_as_leader(batch, leader_epoch=0, now_ms=NOW)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset)
    log.append_as_leader(make_batch(2, pid=77, epoch=2, seq=5), leader_epoch=0, now_ms=NOW)
    with pytest.raises(KafkaError) as err:
        log.append_as_leader(make_batch(1, pid=77, epoch=2, seq=9), leader_epoch=0, now_ms=NOW)
    assert err.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    headers = [h for h, _ in stored(log)]
    assert [(h.producer_id, h.producer_epoch, h.base_sequence, h.compression) for h in headers] == [
        (77, 2, 0, Compression.GZIP), (77, 2, 5, Compression.GZIP),
    ]


def test_transactional_batches_and_markers(open_log: LogFactory) -> None:
    log = open_log(LogConfig(compression_type="zstd"))
    log.append_as_leader(make_batch(3, pid=5, epoch=0, seq=0, transactional=True), leader_epoch=0, now_ms=NOW)
    assert log.last_stable_offset == 0
    marker = build_control_batch(ControlType.COMMIT, 5, 0, 0, NOW)
    log.append_as_leader(marker, leader_epoch=0, now_ms=NOW, from_client=False)
    assert log.last_stable_offset == 4
    (data_header, _), (marker_header, _) = stored(log)
    assert data_header.is_transactional and data_header.compression is Compression.ZSTD
    assert marker_header.is_control and marker_header.compression is Compression.NONE  # never compressed


def test_log_append_time_applies_to_the_rebuilt_batch(open_log: LogFactory) -> None:
    log = open_log(LogConfig(compression_type="snappy", message_timestamp_type="LogAppendTime"))
    info = log.append_as_leader(build_batch(words(4)), leader_epoch=0, now_ms=NOW + 5_000)
    assert info.log_append_time == NOW + 5_000
    [(header, batch)] = stored(log)
    assert header.compression is Compression.SNAPPY and header.timestamp_type == 1
    assert {r.timestamp for r in decode_records(batch)} == {NOW + 5_000}


def test_a_batch_that_grows_past_max_message_bytes_is_refused_and_nothing_is_written(open_log: LogFactory) -> None:
    noise = build_batch([Record(0, NOW, b"k", os.urandom(50_000))])  # incompressible: gzip adds its framing
    log = open_log(LogConfig(compression_type="gzip", max_message_bytes=len(noise)))
    with pytest.raises(KafkaError) as err:
        log.append_as_leader(noise, leader_epoch=0, now_ms=NOW)
    assert err.value.code == ErrorCode.MESSAGE_TOO_LARGE and "gzip" in (err.value.message or "").lower()
    assert log.log_end_offset == 0 and stored(log) == []


def test_a_compressed_batch_that_does_not_decompress_is_refused(open_log: LogFactory) -> None:
    batch = bytearray(build_batch(words(20), compression=Compression.GZIP))
    batch[70:80] = b"\x00" * 10
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))  # a valid CRC over broken gzip data
    log = open_log(LogConfig(compression_type="lz4"))
    with pytest.raises(KafkaError) as err:
        log.append_as_leader(bytes(batch), leader_epoch=0, now_ms=NOW)
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE
    assert log.log_end_offset == 0


@pytest.mark.parametrize("codec,key", [("gzip", "compression.gzip.level"), ("lz4", "compression.lz4.level"),
                                       ("zstd", "compression.zstd.level")])
def test_the_codecs_level_is_applied(open_log: LogFactory, codec: str, key: str) -> None:
    levels = {"gzip": (1, 9), "lz4": (1, 17), "zstd": (1, 19)}[codec]
    sizes = []
    for level in levels:
        config = LogConfig.from_topic_config({"compression.type": codec, key: level})
        log = open_log(config, name=f"{codec}-{level}")
        log.append_as_leader(build_batch(words(2_000)), leader_epoch=0, now_ms=NOW)
        [(header, _)] = stored(log)
        sizes.append(header.size)
    assert sizes[1] < sizes[0]


def test_recompressed_batches_survive_an_unclean_restart(tmp_path: Path) -> None:
    config = LogConfig(compression_type="zstd")
    log = PartitionLog(tmp_path / "t-0", config, now_ms=NOW)
    for n in (3, 4):
        log.append_as_leader(build_batch(words(n)), leader_epoch=0, now_ms=NOW)
    log.close(clean=False)
    reopened = PartitionLog(tmp_path / "t-0", config, now_ms=NOW)
    try:
        assert reopened.log_end_offset == 7
        assert [h.compression for h, _ in stored(reopened)] == [Compression.ZSTD] * 2
    finally:
        reopened.close()

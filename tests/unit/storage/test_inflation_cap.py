"""Decompression bombs against every storage path that inflates a batch: refused or left as they are,
never inflated whole (Kafka's rule: a batch's records, decompressed, must fit max.message.bytes)."""

from __future__ import annotations

import functools
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from helpers.bombs import SECTIONS, batch
from tidelog.common.errors import ErrorCode, KafkaError
from tidelog.protocol.compression import Compression
from tidelog.protocol.records import Record, build_batch, decode_records, iter_batches
from tidelog.storage.cleaner import LogCleaner
from tidelog.storage.log import PartitionLog
from tidelog.storage.log_config import LogConfig

T = TypeVar("T")
NOW = 1_700_000_000_000
BOMB = 128 << 20  # inflated size; the default max.message.bytes is 1 MiB
CAP = LogConfig().max_message_bytes


@functools.cache
def section_of(kind: str) -> tuple[bytes, int]:
    return SECTIONS[kind](BOMB)


def peak_traced(work: Callable[[], T]) -> tuple[T | BaseException, int]:
    """What ``work`` returned (or raised) and the most memory Python objects held meanwhile."""
    tracemalloc.start()
    try:
        try:
            result: T | BaseException = work()
        except BaseException as exc:  # handed back to the test
            result = exc
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("kind", ["gzip", "lz4", "zstd", "zstd-sized"])
@pytest.mark.parametrize("topic", [{"compression_type": "snappy"}, {"cleanup_policy": ("compact",)},
                                   {"compression_type": "producer"}])
def test_a_bomb_to_a_topic_that_inflates_batches_is_refused_with_message_too_large(
    tmp_path: Path, kind: str, topic: dict[str, object]
) -> None:
    log = PartitionLog(tmp_path / "t-0", LogConfig(**topic), now_ms=NOW)  # type: ignore[arg-type]
    section, codec = section_of(kind)
    bomb = batch(section, codec)
    assert len(bomb) < CAP  # small on the wire: only its inflated size is refused
    assert log.inflates(bomb)
    error, peak = peak_traced(lambda: log.append_as_leader(bomb, leader_epoch=0, now_ms=NOW))
    assert isinstance(error, KafkaError) and error.code is ErrorCode.MESSAGE_TOO_LARGE, error
    assert peak < 4 * CAP, f"{peak} bytes held to refuse a {BOMB}-byte bomb"
    assert log.log_end_offset == 0
    ok = build_batch([Record(0, NOW, b"k", b"v" * 1000)], compression=Compression(codec))
    assert log.append_as_leader(ok, leader_epoch=0, now_ms=NOW).last_offset == 0


def test_a_bomb_admitted_under_a_larger_cap_is_read_later_under_the_current_one(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    section, codec = section_of("zstd-record")
    roomy = PartitionLog(directory, LogConfig(max_message_bytes=2 * BOMB), now_ms=NOW)
    # Admitted: its inflated size is counted chunk by chunk, never held.
    _, peak = peak_traced(lambda: roomy.append_as_leader(batch(section, codec), leader_epoch=0, now_ms=NOW))
    assert roomy.log_end_offset == 1 and peak < 4 * CAP
    roomy.close()
    log = PartitionLog(directory, LogConfig(), now_ms=NOW)  # max.message.bytes back to its default
    # ListOffsets by timestamp decodes records: the bomb answers for itself instead of being inflated.
    found, peak = peak_traced(lambda: log.offset_for_timestamp(NOW))
    assert found == (0, NOW, 0)
    assert peak < 4 * CAP
    log.close()


def test_the_cleaner_keeps_a_batch_inflating_past_the_cap_as_it_is_and_compacts_the_rest(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    plain = PartitionLog(directory, LogConfig(max_message_bytes=2 * BOMB), now_ms=NOW)  # then the cap is lowered
    section, codec = section_of("zstd-record")
    plain.append_as_leader(batch(section, codec), leader_epoch=0, now_ms=NOW)
    for round_ in range(3):
        records = [Record(i, NOW, b"k%d" % i, b"round %d" % round_) for i in range(10)]
        plain.append_as_leader(build_batch(records), leader_epoch=0, now_ms=NOW)
        plain.roll(now_ms=NOW)
    plain.close()
    compacted = PartitionLog(directory, LogConfig(cleanup_policy=("compact",), min_cleanable_dirty_ratio=0.0,
                                                   file_delete_delay_ms=0), now_ms=NOW)
    result, peak = peak_traced(lambda: LogCleaner().clean(compacted, NOW, force=True))
    assert not isinstance(result, BaseException), result
    assert peak < 8 * CAP, f"the cleaner held {peak} bytes"
    data = compacted.read(0, 1 << 24).read_bytes()
    batches = [(h, data[p : p + h.size]) for h, p in iter_batches(data)]
    assert batches[0][0].base_offset == 0 and batches[0][1][61:] == section, "the bomb was not kept as it is"
    values = [r.value for h, b in batches[1:] for r in decode_records(b)]
    assert values == [b"round 2"] * 10
    compacted.close()

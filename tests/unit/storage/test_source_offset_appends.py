"""Offset-preserving (mirror) appends: the pure decision, then PartitionLog.append_at_source_offsets."""

from __future__ import annotations

import pytest
from storage_helpers import NOW, LogFactory

from tidelog.common.errors import ErrorCode, KafkaError
from tidelog.protocol.records import ControlType, Record, build_batch, build_control_batch, iter_batches
from tidelog.storage.source_offsets import SourceAppend, decide


@pytest.mark.parametrize(("spans", "log_end", "expected"), [
    ([(0, 4)], 0, SourceAppend(0, 0, 0)),
    ([(10, 14)], 0, SourceAppend(0, 10, 10)),  # a gap, as compaction leaves on the source
    ([(0, 4), (5, 9)], 5, SourceAppend(1, 5, 0)),  # a retry whose first batch is in already
    ([(0, 4), (5, 9)], 10, SourceAppend(2, -1, 0)),  # wholly written: acknowledged, not written
    ([(0, 4), (8, 9)], 5, SourceAppend(1, 8, 3)),
    ([(3, 3)], 3, SourceAppend(0, 3, 0)),
])
def test_batches_below_the_log_end_are_duplicates_and_the_rest_is_written_at_its_offsets(
        spans: list[tuple[int, int]], log_end: int, expected: SourceAppend) -> None:
    assert decide(spans, log_end) == expected


@pytest.mark.parametrize(("spans", "log_end", "message"), [
    ([(0, 9)], 5, "straddles the log end offset 5"),
    ([(0, 4), (3, 9)], 0, "out of offset order"),
    ([(5, 9), (0, 4)], 0, "out of offset order"),
    ([], 0, "no record batch"),
])
def test_a_straddling_or_disordered_request_is_refused_whole(
        spans: list[tuple[int, int]], log_end: int, message: str) -> None:
    with pytest.raises(KafkaError) as raised:
        decide(spans, log_end)
    assert raised.value.code is ErrorCode.INVALID_RECORD
    assert message in str(raised.value)


def batch(base: int, n: int = 3, *, pid: int = -1, transactional: bool = False, epoch: int = 7) -> bytes:
    records = [Record(base + i, NOW + i, b"k%d" % i, b"v%d" % (base + i)) for i in range(n)]
    return build_batch(records, base_offset=base, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                       base_sequence=0 if pid >= 0 else -1, transactional=transactional,
                       partition_leader_epoch=epoch)


def offsets(log: object) -> list[int]:
    data = log.read(log.log_start_offset, 1 << 20).read_bytes()  # type: ignore[attr-defined]
    return [h.base_offset for h, _ in iter_batches(data)]


def test_batches_keep_their_offsets_with_gaps_and_retries_write_nothing(open_log: LogFactory) -> None:
    log = open_log()
    info, dups = log.append_at_source_offsets(batch(0) + batch(3), leader_epoch=2, now_ms=NOW)
    assert (info.first_offset, info.last_offset, dups) == (0, 5, 0)
    info, dups = log.append_at_source_offsets(batch(20), leader_epoch=2, now_ms=NOW)
    assert (info.first_offset, log.log_end_offset) == (20, 23)
    info, dups = log.append_at_source_offsets(batch(3) + batch(20), leader_epoch=2, now_ms=NOW)
    assert info.duplicate and dups == 2 and log.log_end_offset == 23
    info, dups = log.append_at_source_offsets(batch(20) + batch(23), leader_epoch=2, now_ms=NOW)
    assert not info.duplicate and dups == 1 and info.first_offset == 23
    assert offsets(log) == [0, 3, 20, 23]
    with pytest.raises(KafkaError, match="straddles"):
        log.append_at_source_offsets(batch(25, 5), leader_epoch=2, now_ms=NOW)
    assert log.log_end_offset == 26


def test_batches_are_stamped_with_this_leaders_epoch_not_the_sources(open_log: LogFactory) -> None:
    log = open_log()
    log.append_at_source_offsets(batch(0, epoch=99), leader_epoch=4, now_ms=NOW)
    data = log.read(0, 1 << 20).read_bytes()
    assert [h.partition_leader_epoch for h, _ in iter_batches(data)] == [4]
    assert log.end_offset_for_epoch(4) == (4, 3)


def test_an_empty_log_starts_where_the_source_starts_and_survives_a_reopen(open_log: LogFactory) -> None:
    log = open_log()
    log.append_at_source_offsets(batch(1000) + batch(1010), leader_epoch=1, now_ms=NOW)
    assert (log.log_start_offset, log.log_end_offset) == (1000, 1013)
    log.close(clean=False)
    reopened = open_log(log_start_offset=1000)
    assert reopened.log_end_offset == 1013
    assert offsets(reopened) == [1000, 1010]


def test_copied_aborted_transaction_stays_aborted_and_holds_the_lso_until_its_marker(open_log: LogFactory) -> None:
    log = open_log()
    log.append_at_source_offsets(batch(0, pid=5, transactional=True), leader_epoch=1, now_ms=NOW)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 0  # the source transaction is still open
    marker = build_control_batch(ControlType.ABORT, producer_id=5, producer_epoch=0, coordinator_epoch=0,
                                 base_offset=3, timestamp=NOW)
    log.append_at_source_offsets(marker, leader_epoch=1, now_ms=NOW)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 4
    aborted = log.aborted_transactions(0, 4)
    assert [(a.producer_id, a.first_offset) for a in aborted] == [(5, 0)]

"""The scrubber: pacing, checkpointed passes, damage found in real segment files, and how the log answers."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from storage_helpers import NOW, LogFactory, make_batch

from tidelog.common.errors import ErrorCode, KafkaError
from tidelog.protocol.records import iter_batches
from tidelog.storage.damage import FILE_NAME, read_damage
from tidelog.storage.log import PartitionLog
from tidelog.storage.log_config import LogConfig
from tidelog.storage.scrubber import CHECKPOINT_FILE, RateLimiter, Scrubber, read_cursors

# Small segments: 8 batches of 5 records (~240 bytes each) per segment.
CONFIG = LogConfig(segment_bytes=2000, index_interval_bytes=500)


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> bool:
        self.slept.append(seconds)
        self.now += seconds
        return True


def test_rate_limiter_paces_reads_to_the_configured_rate() -> None:
    t = FakeTime()
    limiter = RateLimiter(1024 * 1024, clock=t.clock, sleep=t.sleep)
    for _ in range(160):  # 10 MiB in 64 KiB reads at 1 MiB/s
        limiter.acquire(64 * 1024)
    assert 9.8 <= t.now <= 10.0  # the last read starts 9.94 s in: the first one goes at once


def test_rate_limiter_saves_no_credit_while_idle() -> None:
    t = FakeTime()
    limiter = RateLimiter(1000, clock=t.clock, sleep=t.sleep)
    limiter.acquire(1000)
    t.now += 60  # idle for a minute
    limiter.acquire(1000)
    limiter.acquire(1000)
    assert t.slept == [1.0]  # no burst of 60 s worth of bytes after the rest


def test_rate_limiter_reports_an_interrupted_wait() -> None:
    limiter = RateLimiter(10, clock=lambda: 0.0, sleep=lambda _s: False)
    assert limiter.acquire(10) is True  # the first read never waits
    assert limiter.acquire(10) is False


def _fill(plog: PartitionLog, batches: int) -> None:
    for _ in range(batches):
        plog.append_as_leader(make_batch(5), leader_epoch=0, now_ms=NOW)


def _scrubber(tmp_path: Path, plog: PartitionLog, clock: list[int], rate: int = 10**9) -> Scrubber:
    return Scrubber(lambda: [(tmp_path, plog)], bytes_per_second=rate, interval_ms=60_000,
                    stop=threading.Event(), clock_ms=lambda: clock[0])


def _flip(plog: PartitionLog, segment_index: int, batch_index: int, at: int) -> tuple[int, int]:
    """Flip a byte ``at`` bytes into a batch of a closed segment on disk; return (base, last offset)."""
    seg = plog.segments[segment_index]
    data = seg.log_path.read_bytes()
    header, position = list(iter_batches(data))[batch_index]
    with open(seg.log_path, "r+b") as f:
        f.seek(position + at)
        byte = f.read(1)
        f.seek(position + at)
        f.write(bytes([byte[0] ^ 0xFF]))
    return header.base_offset, header.last_offset


def test_a_flipped_record_byte_becomes_a_damaged_range_that_reads_refuse(open_log: LogFactory, tmp_path: Path) -> None:
    plog = open_log(CONFIG, "t-0")
    _fill(plog, 40)
    assert len(plog.segments) >= 4
    first, last = _flip(plog, 1, 3, 100)  # inside the records: only the CRC tells
    scrubber = _scrubber(tmp_path, plog, [NOW])
    while scrubber.run_once():
        pass
    [damage] = plog.damaged_ranges
    assert (damage.start_offset, damage.end_offset, damage.kind) == (first, last, "crc-mismatch")
    assert scrubber.damage_found == 1
    closed_bytes = sum(s.size for s in plog.segments[:-1])
    assert closed_bytes <= scrubber.verified_bytes < 2 * closed_bytes  # what follows the damage is read again
    with pytest.raises(KafkaError) as refused:
        plog.read(first + 2, 1 << 20)
    assert refused.value.code is ErrorCode.CORRUPT_MESSAGE
    before = plog.read(0, 1 << 20)  # stops at the damaged range, whole batches before it
    assert before.end_offset == first
    after = plog.read(last + 1, 1 << 20)
    assert after.size > 0 and after.end_offset > last + 1


def test_damage_to_a_length_field_resynchronises_on_the_next_valid_batch(open_log: LogFactory, tmp_path: Path) -> None:
    plog = open_log(CONFIG, "t-0")
    _fill(plog, 30)
    first, last = _flip(plog, 0, 2, 9)  # the batch length field: framing is lost
    scrubber = _scrubber(tmp_path, plog, [NOW])
    while scrubber.run_once():
        pass
    [damage] = plog.damaged_ranges
    assert (damage.start_offset, damage.end_offset) == (first, last)
    assert plog.read(last + 1, 1 << 20).size > 0


def test_damage_is_remembered_after_reopening_and_dropped_by_truncation(open_log: LogFactory, tmp_path: Path) -> None:
    plog = open_log(CONFIG, "t-0")
    _fill(plog, 30)
    first, _ = _flip(plog, 1, 0, 80)
    scrubber = _scrubber(tmp_path, plog, [NOW])
    while scrubber.run_once():
        pass
    plog.close()
    reopened = PartitionLog(tmp_path / "t-0", CONFIG, clean_shutdown=True, now_ms=NOW)
    try:
        assert [r.start_offset for r in reopened.damaged_ranges] == [first]
        with pytest.raises(KafkaError):
            reopened.read(first, 1 << 20)
        reopened.truncate_to(first)  # what a follower does before fetching the range again
        assert reopened.damaged_ranges == ()
        assert not (tmp_path / "t-0" / FILE_NAME).exists()
        assert read_damage(tmp_path / "t-0") == []
    finally:
        reopened.close()


def test_a_pass_resumes_from_the_checkpoint_and_rests_until_the_interval(open_log: LogFactory, tmp_path: Path) -> None:
    plog = open_log(CONFIG, "t-0")
    _fill(plog, 40)
    clock = [NOW]
    scrubber = _scrubber(tmp_path, plog, clock)
    assert scrubber.run_once()  # one segment per step
    scrubber.save()
    [(key, cursor)] = read_cursors(tmp_path).items()
    assert key == ("t", 0) and cursor.pass_start_ms == NOW and cursor.offset == plog.segments[1].base_offset
    resumed = _scrubber(tmp_path, plog, clock)  # a restart: the new scrubber reads the checkpoint
    while resumed.run_once():
        pass
    assert resumed.verified_bytes == sum(s.size for s in plog.segments[1:-1])
    assert not resumed.run_once()  # the pass is done: nothing read until the interval passes
    clock[0] += 60_000
    assert resumed.run_once()
    resumed.save()
    assert read_cursors(tmp_path)[("t", 0)].pass_start_ms == NOW + 60_000
    assert (tmp_path / CHECKPOINT_FILE).exists()


def test_the_scrubber_reads_nothing_of_the_active_segment(open_log: LogFactory, tmp_path: Path) -> None:
    plog = open_log(CONFIG, "t-0")
    _fill(plog, 5)  # one segment, still active
    os.truncate(plog.active_segment.log_path, plog.active_segment.size - 3)  # even a torn tail is not its business
    scrubber = _scrubber(tmp_path, plog, [NOW])
    assert not scrubber.run_once()
    assert scrubber.verified_bytes == 0 and plog.damaged_ranges == ()

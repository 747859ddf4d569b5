"""Readers running while the cleaner swaps segments see a consistent log.

A writer thread keeps overwriting keys, the cleaner compacts over and over, and reader threads scan the
log from the start. Every value names its key and offset, so a reader can check each record it gets:
offsets strictly increase within a scan, and each record is the one written at that offset.
"""

from __future__ import annotations

import threading
from pathlib import Path

from tidelog.protocol.records import Record, build_batch, decode_records, iter_batches
from tidelog.storage.cleaner import LogCleaner
from tidelog.storage.log import PartitionLog
from tidelog.storage.log_config import LogConfig

T0 = 1_700_000_000_000
KEYS = 50


def _value(key: bytes, offset: int) -> bytes:
    return key + b"@%d" % offset


def _scan(log: PartitionLog, errors: list[str]) -> tuple[dict[bytes, int], int]:
    """One full scan; returns (key → newest offset seen, records seen); problems go to ``errors``."""
    offset = log.log_start_offset
    last_seen = -1
    newest: dict[bytes, int] = {}
    count = 0
    end = log.log_end_offset
    while offset < end:
        data = log.read(offset, 64 * 1024).read_bytes()
        if not data:
            break
        for header, pos in iter_batches(data):
            for record in decode_records(data[pos : pos + header.size]):
                if record.offset <= last_seen:
                    errors.append(f"offset {record.offset} after {last_seen}")
                assert record.key is not None
                if record.value != _value(record.key, record.offset):
                    errors.append(f"offset {record.offset} holds {record.value!r}")
                last_seen = record.offset
                newest[record.key] = record.offset
                count += 1
            offset = header.next_offset
    return newest, count


def test_readers_see_increasing_offsets_and_right_values_during_compaction(tmp_path: Path) -> None:
    config = LogConfig(
        cleanup_policy=("compact",),
        segment_bytes=16 * 1024,
        min_cleanable_dirty_ratio=0.1,
        file_delete_delay_ms=3_600_000,  # readers in flight keep old segment fds valid
    )
    log = PartitionLog(tmp_path / "compacted-0", config, now_ms=T0)
    stop = threading.Event()
    errors: list[str] = []
    scans = [0]
    written: dict[bytes, int] = {}
    lock = threading.Lock()

    def write() -> None:
        i = 0
        while not stop.is_set() and i < 20_000:
            base = log.log_end_offset
            keys = [b"key-%d" % ((i + j) % KEYS) for j in range(5)]
            batch = build_batch([Record(j, T0 + i, k, _value(k, base + j)) for j, k in enumerate(keys)])
            first = log.append_as_leader(batch, leader_epoch=0, now_ms=T0 + i).first_offset
            assert first == base
            with lock:
                for j, k in enumerate(keys):
                    written[k] = base + j
            i += 5

    def read() -> None:
        while not stop.is_set():
            _scan(log, errors)
            scans[0] += 1

    writer = threading.Thread(target=write)
    readers = [threading.Thread(target=read) for _ in range(2)]
    writer.start()
    for reader in readers:
        reader.start()
    cleaner = LogCleaner()
    cleans = 0
    while writer.is_alive():
        if cleaner.clean(log, T0 + 10_000).cleaned:
            cleans += 1
    writer.join()
    log.roll(now_ms=T0)
    cleaner.clean(log, T0 + 10_000, force=True)
    stop.set()
    for reader in readers:
        reader.join()

    assert not errors, errors[:5]
    assert cleans >= 5 and scans[0] >= 5
    final, count = _scan(log, errors)
    assert not errors
    assert final == written  # every key's newest record survived, at its original offset
    assert count == KEYS  # and nothing else: the whole log is compacted
    log.close()

"""The LogProducer's spool on disk: round trip, position checkpoint, locking, torn tails."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.clients.errors import SpoolLockedError
from tidelog.clients.spool import Spool, SpooledRecord
from tidelog.protocol.compression import Compression


def records(count: int, start: int = 0) -> list[SpooledRecord]:
    return [SpooledRecord(f"t{i % 2}", str(start + i).encode(), b"k", (("h", b"v"),), i % 3 - 1, 1000 + i)
            for i in range(count)]


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4, Compression.ZSTD])
def test_records_come_back_with_topic_partition_headers_and_timestamp(tmp_path: Path, codec: Compression) -> None:
    spool = Spool(tmp_path, compression=codec)
    sent = records(50)
    assert spool.append(spool.encode(sent)) == (0, 50)
    back = [r for batch in spool.read(0, 1 << 20) for r in batch.records]
    assert back == sent
    spool.close()


def test_position_survives_reopening_and_segments_below_it_go(tmp_path: Path) -> None:
    spool = Spool(tmp_path, segment_bytes=64 * 1024)
    for i in range(40):
        spool.append(spool.encode(records(100, i * 100)))
    segments = len(spool.log.segments)
    spool.release(2500)
    assert spool.start_offset == 2500 and len(spool.log.segments) < segments
    spool.close()
    again = Spool(tmp_path, segment_bytes=64 * 1024)
    first = again.read(again.start_offset, 1 << 20)[0]
    assert (again.start_offset, first.records[0].value) == (2500, b"2500")
    again.release(again.end_offset)
    assert again.record_count == 0 and again.size_bytes == 0
    again.close()


def test_one_spool_per_folder(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    with pytest.raises(SpoolLockedError):
        Spool(tmp_path)
    spool.close()
    Spool(tmp_path).close()


def test_a_torn_tail_is_cut_to_the_last_whole_batch_and_reported(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    for i in range(5):
        spool.append(spool.encode(records(10, i * 10)))
    spool.close()
    (tmp_path / "clean-shutdown").unlink()  # as after kill -9 or a power loss
    segment = next((tmp_path / "spool-0").glob("*.log"))
    with segment.open("r+b") as f:
        f.truncate(segment.stat().st_size - 7)
    again = Spool(tmp_path)
    assert again.truncated_bytes > 0 and again.end_offset == 40
    assert [r.value for b in again.read(0, 1 << 20) for r in b.records] == [str(i).encode() for i in range(40)]
    again.close()


def test_drop_oldest_removes_whole_segments(tmp_path: Path) -> None:
    spool = Spool(tmp_path, segment_bytes=64 * 1024)
    spool.append(spool.encode(records(100)))
    assert spool.drop_oldest() == 100  # the only segment: rolled, then dropped
    assert spool.record_count == 0
    spool.close()

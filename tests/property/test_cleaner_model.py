"""Compaction agrees with a dict model for any sequence of writes, deletes, batch and segment splits."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.protocol.compression import Compression
from tidelog.protocol.records import Record, build_batch, decode_records, iter_batches
from tidelog.storage.cleaner import LogCleaner
from tidelog.storage.log import PartitionLog
from tidelog.storage.log_config import LogConfig

T0 = 1_700_000_000_000
RETENTION = 1_000

writes = st.tuples(
    st.sampled_from([b"a", b"b", b"c", b"d", b"e"]), st.one_of(st.none(), st.binary(max_size=8))
)
# a segment is a list of batches, a batch a list of writes
segments = st.lists(
    st.lists(st.lists(writes, min_size=1, max_size=4), min_size=1, max_size=3), min_size=2, max_size=5
)


def _read_all(log: PartitionLog) -> list[Record]:
    data = log.read(log.log_start_offset, 1 << 24).read_bytes() if log.log_end_offset else b""
    out: list[Record] = []
    for header, pos in iter_batches(data):
        out.extend(decode_records(data[pos : pos + header.size]))
    return out


@settings(max_examples=60)
@given(layout=segments, codec=st.sampled_from([Compression.NONE, Compression.LZ4]))
def test_compaction_matches_the_model(
    layout: list[list[list[tuple[bytes, bytes | None]]]], codec: Compression
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config = LogConfig(cleanup_policy=("compact",), delete_retention_ms=RETENTION, file_delete_delay_ms=0)
        log = PartitionLog(Path(tmp) / "model-0", config, now_ms=T0)
        written: list[Record] = []
        for segment in layout:
            for batch in segment:
                base = log.log_end_offset
                records = [Record(base + i, T0 + base + i, k, v) for i, (k, v) in enumerate(batch)]
                sent = [Record(i, r.timestamp, r.key, r.value) for i, r in enumerate(records)]  # as a producer numbers them
                log.append_as_leader(build_batch(sent, compression=codec), leader_epoch=0, now_ms=T0)
                written.extend(records)
            log.roll(now_ms=T0)
        active_start = log.segments_snapshot()[-1].base_offset
        newest = {r.key: r.offset for r in written}

        cleaner = LogCleaner()
        cleaner.clean(log, T0, force=True)
        expected = [r for r in written if newest[r.key] == r.offset]
        assert _read_all(log) == expected  # offsets, keys, values, timestamps all unchanged

        cleaner.clean(log, T0 + RETENTION)  # the delete horizon has passed: tombstones go
        expected = [r for r in expected if r.value is not None or r.offset >= active_start]
        assert _read_all(log) == expected
        log.close()

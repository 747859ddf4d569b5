"""Properties of the partition log under any sequence of operations, and of recovery from damage."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.protocol.records import (
    Record,
    build_batch,
    iter_batches,
    set_base_offset,
    set_partition_leader_epoch,
)
from tidelog.storage.log import PartitionLog
from tidelog.storage.log_config import LogConfig

NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=900, index_interval_bytes=150, retention_bytes=-1, file_delete_delay_ms=0)


def batch(n: int, size: int, ts: int) -> bytes:
    return build_batch([Record(i, ts + i, b"k%d" % i, b"x" * size) for i in range(n)])


appends = st.tuples(st.just("append"), st.integers(1, 5), st.integers(0, 120))
operations = st.lists(
    st.one_of(
        appends,
        appends,
        appends,
        st.tuples(st.just("roll"), st.just(0), st.just(0)),
        st.tuples(st.just("truncate"), st.integers(0, 100), st.just(0)),
        st.tuples(st.just("delete_records"), st.integers(0, 100), st.just(0)),
        st.tuples(st.just("retention"), st.integers(0, 3000), st.just(0)),
        st.tuples(st.just("reopen"), st.booleans(), st.just(0)),
    ),
    max_size=30,
)


class Model:
    """What the log must contain: the appended batches with the offsets the log assigned."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, int, bytes]] = []  # (first offset, last offset, stored bytes)
        self.end = 0

    def expected_from(self, start: int) -> bytes:
        return b"".join(data for _, last, data in self.batches if last >= start)


def reopen(path: Path, old: PartitionLog, clean: bool) -> PartitionLog:
    start, point = old.log_start_offset, old.recovery_point
    old.close(clean=clean)
    return PartitionLog(path, CONFIG, log_start_offset=start, recovery_point=point, clean_shutdown=clean, now_ms=NOW)


def apply(log: PartitionLog, model: Model, op: tuple[object, int, int], path: Path, step: int) -> PartitionLog:
    kind, a, b = op
    if kind == "append":
        raw = batch(a, b, NOW + step)
        info = log.append_as_leader(raw, leader_epoch=step, now_ms=NOW)
        assert info.first_offset == model.end, "offsets must be dense"
        stored = bytearray(raw)
        set_base_offset(stored, 0, info.first_offset)
        set_partition_leader_epoch(stored, 0, step)
        model.batches.append((info.first_offset, info.last_offset, bytes(stored)))
        model.end = info.last_offset + 1
    elif kind == "roll":
        log.roll(now_ms=NOW)
    elif kind == "truncate":
        target = max(log.log_start_offset, min(a, model.end))
        log.truncate_to(target)
        model.batches = [x for x in model.batches if x[1] < target]
        model.end = model.batches[-1][1] + 1 if model.batches else target
        if not model.batches:
            model.end = log.log_end_offset
    elif kind == "delete_records":
        log.delete_records_before(min(a, log.high_watermark))
    elif kind == "retention":
        log.config = dataclasses.replace(CONFIG, retention_bytes=a)
        log.apply_retention(NOW)
        log.delete_expired_files(NOW)
        log.config = CONFIG
    elif kind == "reopen":
        log = reopen(path, log, clean=bool(a))
    return log


def paged_read(log: PartitionLog, page: int) -> bytes:
    """Fetch the whole log ``page`` bytes at a time, as a consumer would, following ``end_offset``."""
    offset, out = log.log_start_offset, b""
    while offset < log.log_end_offset:
        fetch = log.read(offset, page)
        assert fetch.ranges, "min_one_batch: a fetch below the log end returns at least one batch"
        assert fetch.size <= page or len(fetch.ranges) == 1
        out += fetch.read_bytes()
        offset = fetch.end_offset
    return out


@settings(max_examples=60)
@given(operations, st.integers(1, 2500))
def test_offsets_stay_dense_and_reads_return_the_appended_bytes(ops: list[tuple[object, int, int]], page: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p-0"
        log = PartitionLog(path, CONFIG, now_ms=NOW)
        model = Model()
        for step, op in enumerate(ops):
            log = apply(log, model, op, path, step)
            assert log.log_end_offset == model.end
            start = log.log_start_offset
            fetch = log.read(start, 1 << 30)
            assert (fetch.read_bytes() if fetch.ranges else b"") == model.expected_from(start)
            assert paged_read(log, page) == model.expected_from(start)
            bases = [s.base_offset for s in log.segments]
            assert bases == sorted(set(bases))
        log.close(clean=False)


damage_strategy = st.one_of(
    st.tuples(st.just("truncate"), st.floats(0, 1)),
    st.tuples(st.just("flip"), st.floats(0, 1)),
)


@settings(max_examples=80)
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(0, 200)), min_size=1, max_size=15), damage_strategy,
       st.integers(0, 7))
def test_a_damaged_tail_recovers_to_the_longest_valid_prefix(
    shapes: list[tuple[int, int]], damage: tuple[str, float], bit: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p-0"
        config = LogConfig(index_interval_bytes=100)
        log = PartitionLog(path, config, now_ms=NOW)
        for n, size in shapes:
            log.append_as_leader(batch(n, size, NOW), leader_epoch=0, now_ms=NOW)
        log.close(clean=False)
        seg = path / "00000000000000000000.log"
        data = bytearray(seg.read_bytes())
        spans = [(pos, pos + h.size, h) for h, pos in iter_batches(data)]
        kind, where = damage
        if kind == "truncate":
            cut = int(where * len(data))
            seg.write_bytes(bytes(data[:cut]))
            good = [s for s in spans if s[1] <= cut]
        else:
            # Every byte but the base offset and partition leader epoch is covered by length, magic or CRC.
            protected = [i for start, end, _ in spans for i in range(start, end)
                         if not (start <= i < start + 8 or start + 12 <= i < start + 16)]
            victim = protected[int(where * (len(protected) - 1))]
            data[victim] ^= 1 << bit
            seg.write_bytes(bytes(data))
            good = [s for s in spans if s[1] <= victim]
        log = PartitionLog(path, config, now_ms=NOW)
        expected_end = good[-1][2].next_offset if good else 0
        assert log.log_end_offset == expected_end
        prefix = bytes(data[: good[-1][1]]) if good else b""
        fetch = log.read(0, 1 << 30)
        assert (fetch.read_bytes() if fetch.ranges else b"") == prefix
        assert seg.stat().st_size == len(prefix)
        log.close()


def reference_read(log: PartitionLog, offset: int, max_bytes: int, max_offset: int | None,
                   min_one: bool) -> tuple[bytes, int]:
    """The read as a plain walk over every batch header: (bytes, next offset)."""
    out, remaining, position_offset, taken = b"", max_bytes, offset, False
    for seg in [s for s in log.segments if s.next_offset > offset]:
        if remaining <= 0 and not (min_one and not taken):
            break
        start, length, next_offset = -1, 0, position_offset
        for position, header in seg.batches_from(position_offset):
            if start < 0:
                start = position
            if max_offset is not None and header.last_offset >= max_offset:
                break
            if length + header.size > remaining and not (min_one and not taken and length == 0):
                break
            length += header.size
            next_offset = header.next_offset
        if start < 0:
            next_offset = max(position_offset, seg.next_offset)
        if length:
            out += seg.read_at(start, length)
            remaining -= length
            taken = True
        position_offset = next_offset
        if position_offset < seg.next_offset or (max_offset is not None and position_offset >= max_offset):
            break
    return out, position_offset


@settings(max_examples=150)
@given(
    st.lists(st.tuples(st.integers(1, 4), st.integers(0, 150)), min_size=1, max_size=30),  # batches fit a segment
    st.data(),
)
def test_reads_planned_from_the_index_equal_a_walk_over_every_batch(
    shapes: list[tuple[int, int]], data: st.DataObject
) -> None:
    """``read`` finds where a range ends from the offset index and a short walk after the last entry
    before the byte limit; the bytes and the next offset must be those of walking every batch."""
    with tempfile.TemporaryDirectory() as tmp:
        log = PartitionLog(Path(tmp) / "t-0", CONFIG, now_ms=NOW)
        try:
            for n, size in shapes:
                log.append_as_leader(batch(n, size, NOW), leader_epoch=0, now_ms=NOW)
            end = log.log_end_offset
            offset = data.draw(st.integers(0, end - 1))
            max_bytes = data.draw(st.integers(0, 3000))
            max_offset = data.draw(st.none() | st.integers(offset + 1, end))
            min_one = data.draw(st.booleans())
            got = log.read(offset, max_bytes, max_offset=max_offset, min_one_batch=min_one)
            expected, next_offset = reference_read(log, offset, max_bytes, max_offset, min_one)
            assert (got.read_bytes() if got.ranges else b"") == expected
            assert got.end_offset == next_offset
        finally:
            log.close(clean=False)

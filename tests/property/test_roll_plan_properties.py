"""Planned rolls (storage/roll_plan.py) interleaved with appends, truncations, flushes and late
completions in any order, then a crash: the reopened log holds exactly the records appended and
not truncated, at their offsets, in segments whose bases increase and bound their offsets."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.protocol.records import Record, batch_views, build_batch, decode_records
from tidelog.storage.log import PartitionLog
from tidelog.storage.log_config import LogConfig
from tidelog.storage.roll_plan import RollPlan

NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=600, index_interval_bytes=150, retention_bytes=-1, file_delete_delay_ms=0)

operations = st.lists(
    st.sampled_from(["append", "append", "append", "plan", "make files", "complete", "truncate", "flush"]),
    max_size=40,
)


def stored_values(log: PartitionLog) -> list[bytes]:
    data = log.read(0, 1 << 24) if log.log_end_offset > log.log_start_offset else None
    values: list[bytes] = []
    if data is not None and data.ranges:
        for _, view in batch_views(data.read_bytes()):
            values.extend(r.value or b"" for r in decode_records(view))
    return values


@settings(max_examples=80, deadline=None)
@given(operations)
def test_any_interleaving_of_planned_rolls_reopens_after_a_crash_with_every_record(ops: list[str]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        directory = Path(folder) / "t-0"
        log = PartitionLog(directory, CONFIG, now_ms=NOW)
        expected: list[bytes] = []
        plans: list[RollPlan] = []
        for op in ops:
            if op == "append":
                value = b"r%d" % len(expected) + b"x" * 100
                log.append_as_leader(build_batch([Record(0, NOW, None, value)]), leader_epoch=0, now_ms=NOW)
                expected.append(value)
            elif op == "plan" and (plan := log.begin_roll(NOW)) is not None:
                plans.append(plan)
            elif op == "make files" and plans and plans[-1].claim():
                plans[-1].make_files()  # the pool made them; the install has not happened yet
            elif op == "complete" and plans:
                log.complete_roll(plans.pop(0))  # possibly late: an append may have settled it
            elif op == "truncate" and expected:
                cut = len(expected) // 2
                log.truncate_to(cut)
                del expected[cut:]
            elif op == "flush":
                log.flush()
        assert log.log_end_offset == len(expected)
        assert stored_values(log) == expected

        reopened = PartitionLog(directory, CONFIG, now_ms=NOW, recovery_point=0, clean_shutdown=False)  # kill -9
        try:
            assert reopened.log_end_offset == len(expected)
            assert stored_values(reopened) == expected
            segments = reopened.segments
            bases = [s.base_offset for s in segments]
            assert bases == sorted(set(bases))
            for seg, nxt in zip(segments, [*bases[1:], None], strict=True):
                assert nxt is None or seg.next_offset <= nxt, f"segment {seg.base_offset} reaches past {nxt}"
            assert not list(directory.glob("*.tmp"))
        finally:
            reopened.close(clean=False)
            log.close(clean=False)

"""A follower's producer state, whatever happened to its copy, equals its leader's once it caught up.

The leader election that follows decides on it: a producer's retry of a batch the old leader wrote
must be recognised by the new leader as a duplicate (and a fresh batch accepted at the next
sequence), or the producer bumps its epoch and writes the batch a second time. Here a leader log
takes idempotent producers' batches (with epoch bumps), and a follower log copies them fetch by
fetch while both roll their segments (inline, and planned with deferred snapshots as the disk pools
roll them), the follower truncates (reconciliation after a leader change), restarts cleanly or not,
and starts again empty at the leader's log start (a replica added by a move restarts its log there).
After each step the follower is caught up and then compared: every producer's epoch and its last
batches, and the retry check of each producer's last batch.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.protocol.records import Record, build_batch
from tidelog.storage.log import PartitionLog
from tidelog.storage.log_config import LogConfig
from tidelog.storage.producer_state import ProducerStateManager

NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=700, index_interval_bytes=150, retention_bytes=-1, file_delete_delay_ms=0)

operations = st.lists(
    st.one_of(
        st.tuples(st.just("produce"), st.integers(0, 2), st.integers(1, 4)),
        st.tuples(st.just("produce"), st.integers(0, 2), st.integers(1, 4)),
        st.tuples(st.just("produce"), st.integers(0, 2), st.integers(1, 4)),
        st.tuples(st.just("bump"), st.integers(0, 2), st.just(0)),
        st.tuples(st.just("replicate"), st.integers(1, 900), st.just(0)),
        st.tuples(st.just("replicate"), st.integers(1, 900), st.just(0)),
        st.tuples(st.just("roll_leader"), st.booleans(), st.just(0)),
        st.tuples(st.just("roll_follower"), st.booleans(), st.just(0)),
        st.tuples(st.just("truncate_follower"), st.integers(0, 60), st.just(0)),
        st.tuples(st.just("reopen_follower"), st.booleans(), st.just(0)),
        st.tuples(st.just("restart_follower_empty"), st.just(0), st.just(0)),
    ),
    min_size=1, max_size=40,
)


class Producers:
    """Three idempotent producers: id 1000 + i, each with its epoch and next sequence."""

    def __init__(self) -> None:
        self.epoch = [0, 0, 0]
        self.next_seq = [0, 0, 0]

    def batch(self, i: int, count: int, step: int) -> bytes:
        records = [Record(j, NOW + step, b"k", b"v%d-%d" % (step, j)) for j in range(count)]
        raw = build_batch(records, producer_id=1000 + i, producer_epoch=self.epoch[i], base_sequence=self.next_seq[i])
        self.next_seq[i] += count
        return raw

    def bump(self, i: int) -> None:
        self.epoch[i] += 1
        self.next_seq[i] = 0


def planned_roll(log: PartitionLog, deferred_snapshot: bool) -> None:
    """A roll as the disk pools make it: planned, its files made, installed, its snapshot written later."""
    plan = log.begin_roll(NOW)
    if plan is None:
        return
    log.complete_roll(plan, write_snapshot=not deferred_snapshot)


def replicate(leader: PartitionLog, follower: PartitionLog, max_bytes: int) -> None:
    """One replica fetch: at most ``max_bytes`` (one batch at least) from the follower's log end."""
    if follower.log_end_offset < leader.log_start_offset:
        follower.truncate_fully_and_start_at(leader.log_start_offset)
    if follower.log_end_offset >= leader.log_end_offset:
        return
    fetch = leader.read(follower.log_end_offset, max_bytes)
    if fetch.ranges:
        follower.append_as_follower(fetch.read_bytes(), now_ms=NOW)


def catch_up(leader: PartitionLog, follower: PartitionLog) -> None:
    while follower.log_end_offset < leader.log_end_offset:
        replicate(leader, follower, 1 << 20)


def state_of(producers: ProducerStateManager) -> dict[int, tuple[int, list[tuple[int, int, int, int]]]]:
    return {pid: (e.epoch, [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in e.batches])
            for pid, e in producers.producers.items()}


def reopen(path: Path, old: PartitionLog, clean: bool) -> PartitionLog:
    start, point = old.log_start_offset, old.recovery_point
    old.close(clean=clean)
    return PartitionLog(path, CONFIG, log_start_offset=start, recovery_point=point, clean_shutdown=clean, now_ms=NOW)


@settings(max_examples=150, deadline=None)
@given(operations)
def test_a_caught_up_follower_knows_every_producer_as_its_leader_does(ops: list[tuple[str, int, int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        leader = PartitionLog(Path(tmp) / "leader" / "t-0", CONFIG, now_ms=NOW)
        follower_path = Path(tmp) / "follower" / "t-0"
        follower = PartitionLog(follower_path, CONFIG, now_ms=NOW)
        producers = Producers()
        try:
            for step, (kind, a, b) in enumerate(ops):
                if kind == "produce":
                    leader.append_as_leader(producers.batch(a, b, step), leader_epoch=0, now_ms=NOW)
                elif kind == "bump":
                    producers.bump(a)
                elif kind == "replicate":
                    replicate(leader, follower, a)
                elif kind == "roll_leader":
                    planned_roll(leader, a) if a else leader.roll(now_ms=NOW)
                elif kind == "roll_follower":
                    planned_roll(follower, a) if a else follower.roll(now_ms=NOW)
                elif kind == "truncate_follower":
                    follower.truncate_to(max(follower.log_start_offset, min(a, follower.log_end_offset)))
                elif kind == "reopen_follower":
                    follower.write_pending_snapshots()
                    follower = reopen(follower_path, follower, clean=a)
                elif kind == "restart_follower_empty":
                    follower.truncate_fully_and_start_at(leader.log_start_offset)
                if kind in ("replicate", "truncate_follower", "reopen_follower"):
                    continue  # compared once it caught up again, below
                catch_up(leader, follower)
                assert follower.log_end_offset == leader.log_end_offset
                assert state_of(follower.producers) == state_of(leader.producers), (step, kind)
                for pid, entry in leader.producers.producers.items():
                    last = entry.batches[-1]
                    retried = follower.producers.check(pid, entry.epoch, last.first_seq, last.last_seq, {})
                    assert retried == last, (pid, last, retried)
            catch_up(leader, follower)
            assert state_of(follower.producers) == state_of(leader.producers)
        finally:
            leader.close(clean=False)
            follower.close(clean=False)

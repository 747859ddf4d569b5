"""The transaction coordinator's state machine, driven without a broker.

The harness applies each decision's records through ``replay``, as the runtime does, so every test
also checks that state changes only by records.
"""

from __future__ import annotations

import itertools

import pytest

from tidelog.common.errors import ErrorCode
from tidelog.coordinator.records import partition_for
from tidelog.coordinator.txn_coordinator import MAX_EPOCH, OFFSETS_TOPIC, Decision, TxnConfig, TxnCoordinator
from tidelog.coordinator.txn_records import TxnRecord, TxnState, TxnValue

TIMEOUT = 60_000


class Harness:
    def __init__(self, config: TxnConfig | None = None) -> None:
        self.core = TxnCoordinator(config)
        self.core.num_partitions = 3
        for partition in range(3):  # a single node: every partition owned, at coordinator epoch 0
            self.core.begin_loading(partition, 0)
            self.core.complete_loading(partition)
        self.ids = itertools.count(1000)
        self.log: list[TxnRecord] = []
        self.now = 1_000

    def apply(self, decision: Decision) -> Decision:
        for record in decision.records:
            self.log.append(record)
            self.core.replay(record)
        if decision.markers_needed:
            for record in self.core.complete(decision.records[0].transactional_id, self.now):
                self.log.append(record)
                self.core.replay(record)
        return decision

    def init(self, txn: str = "t", pid: int = -1, epoch: int = -1, timeout: int = TIMEOUT) -> Decision:
        return self.apply(self.core.init_producer_id(txn, timeout, pid, epoch, self.now, lambda: next(self.ids)))

    def add(self, txn: str, pid: int, epoch: int, *partitions: tuple[str, int]) -> Decision:
        return self.apply(self.core.add_partitions(txn, pid, epoch, partitions or [("a", 0)], self.now))

    def end(self, txn: str, pid: int, epoch: int, commit: bool) -> Decision:
        decision = self.core.end_txn(txn, pid, epoch, commit, self.now)
        for record in decision.records:
            self.log.append(record)
            self.core.replay(record)
        return decision

    def state(self, txn: str = "t") -> TxnValue:
        return self.core.txns[txn]


def test_first_init_gives_a_new_producer_at_epoch_zero_and_reinit_bumps_the_epoch() -> None:
    h = Harness()
    first = h.init()
    assert (first.error, first.producer_id, first.producer_epoch) == (ErrorCode.NONE, 1000, 0)
    again = h.init()
    assert (again.producer_id, again.producer_epoch) == (1000, 1)
    assert h.state().state is TxnState.EMPTY


def test_a_timeout_above_the_maximum_is_refused() -> None:
    h = Harness(TxnConfig(max_timeout_ms=10_000))
    assert h.init(timeout=10_001).error is ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert h.init(timeout=0).error is ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert "t" not in h.core.txns


def test_commit_walks_ongoing_prepare_commit_complete_commit() -> None:
    h = Harness()
    d = h.init()
    h.add("t", d.producer_id, 0, ("a", 0), ("b", 1))
    assert h.state().state is TxnState.ONGOING
    assert h.state().partitions == {("a", 0), ("b", 1)}
    end = h.end("t", d.producer_id, 0, commit=True)
    assert end.markers_needed
    assert h.state().state is TxnState.PREPARE_COMMIT
    assert h.core.preparing() == ["t"]
    h.apply(Decision(records=h.core.complete("t", h.now)))
    assert h.state().state is TxnState.COMPLETE_COMMIT
    assert h.state().partitions == frozenset()
    # A retried EndTxn of the same outcome succeeds; the other outcome is refused.
    assert h.end("t", d.producer_id, 0, commit=True).error is ErrorCode.NONE
    assert h.end("t", d.producer_id, 0, commit=False).error is ErrorCode.INVALID_TXN_STATE


@pytest.mark.parametrize(("state_after", "request_error"), [
    (TxnState.PREPARE_COMMIT, ErrorCode.CONCURRENT_TRANSACTIONS),
])
def test_requests_while_markers_are_written_are_told_to_retry(state_after: TxnState, request_error: ErrorCode) -> None:
    h = Harness()
    d = h.init()
    h.add("t", d.producer_id, 0)
    h.end("t", d.producer_id, 0, commit=True)
    assert h.state().state is state_after
    assert h.core.add_partitions("t", d.producer_id, 0, [("a", 1)], h.now).error is request_error
    assert h.core.end_txn("t", d.producer_id, 0, True, h.now).error is request_error
    assert h.core.init_producer_id("t", TIMEOUT, -1, -1, h.now, lambda: 1).error is request_error


def test_end_txn_without_a_transaction_is_an_invalid_state() -> None:
    h = Harness()
    d = h.init()
    assert h.end("t", d.producer_id, 0, commit=True).error is ErrorCode.INVALID_TXN_STATE


def test_a_new_producer_fences_the_old_one_and_aborts_its_transaction() -> None:
    h = Harness()
    old = h.init()
    h.add("t", old.producer_id, 0)
    fencing = h.init()
    assert fencing.error is ErrorCode.CONCURRENT_TRANSACTIONS  # the abort markers went out at epoch 1
    assert h.log[-2].value is not None and h.log[-2].value.state is TxnState.PREPARE_ABORT
    assert h.log[-2].value.producer_epoch == 1
    assert h.state().state is TxnState.COMPLETE_ABORT
    new = h.init()
    assert (new.error, new.producer_epoch) == (ErrorCode.NONE, 2)
    assert h.core.add_partitions("t", old.producer_id, 0, [("a", 0)], h.now).error is ErrorCode.PRODUCER_FENCED
    assert h.core.end_txn("t", old.producer_id, 0, True, h.now).error is ErrorCode.PRODUCER_FENCED
    assert h.core.end_txn("t", 999, 2, True, h.now).error is ErrorCode.INVALID_PRODUCER_ID_MAPPING


def test_kip_360_reinit_with_the_current_epoch_bumps_and_a_stale_one_is_fenced() -> None:
    h = Harness()
    d = h.init()
    bumped = h.init(pid=d.producer_id, epoch=0)
    assert (bumped.error, bumped.producer_epoch) == (ErrorCode.NONE, 1)
    assert h.init(pid=d.producer_id, epoch=0).error is ErrorCode.PRODUCER_FENCED
    # An id the coordinator does not know starts afresh whatever producer the request names.
    fresh = h.init(txn="unknown", pid=5, epoch=0)
    assert (fresh.error, fresh.producer_epoch) == (ErrorCode.NONE, 0) and fresh.producer_id != 5


def test_epoch_exhaustion_moves_the_id_to_a_new_producer_id() -> None:
    h = Harness()
    d = h.init()
    h.core.replay(TxnRecord("t", TxnValue(d.producer_id, MAX_EPOCH, TIMEOUT, TxnState.EMPTY)))
    moved = h.init()
    assert moved.producer_id != d.producer_id and moved.producer_epoch == 0
    assert h.state().previous_producer_id == d.producer_id
    # A retry naming the old producer gets the new one instead of being fenced.
    retried = h.init(pid=d.producer_id, epoch=MAX_EPOCH)
    assert (retried.error, retried.producer_id) == (ErrorCode.NONE, moved.producer_id)


def test_a_transaction_past_its_timeout_is_aborted_with_a_bumped_epoch() -> None:
    h = Harness()
    d = h.init(timeout=5_000)
    h.add("t", d.producer_id, 0)
    h.now += 4_999
    assert h.core.timed_out(h.now) == []
    h.now += 1
    [abort] = h.core.timed_out(h.now)
    h.apply(abort)
    assert h.state().state is TxnState.COMPLETE_ABORT
    assert h.state().producer_epoch == 1
    assert h.core.end_txn("t", d.producer_id, 0, True, h.now).error is ErrorCode.PRODUCER_FENCED
    # The producer may recover with KIP-360 naming the epoch it had.
    recovered = h.init(pid=d.producer_id, epoch=0)
    assert (recovered.error, recovered.producer_epoch) == (ErrorCode.NONE, 2)


def test_idle_ids_expire_with_a_tombstone_and_open_ones_do_not() -> None:
    h = Harness(TxnConfig(id_expiration_ms=10_000))
    h.init("idle")
    busy = h.init("busy")
    h.add("busy", busy.producer_id, 0)
    h.now += 10_000
    tombstones = h.core.expired_ids(h.now)
    assert tombstones == [TxnRecord("idle")]
    h.apply(Decision(records=tombstones))
    assert set(h.core.txns) == {"busy"}


def test_add_offsets_adds_the_groups_offsets_partition() -> None:
    h = Harness()
    d = h.init()
    h.apply(h.core.add_offsets("t", d.producer_id, 0, "my-group", 50, h.now))
    [(topic, partition)] = h.state().partitions
    assert topic == OFFSETS_TOPIC and 0 <= partition < 50


def test_produce_verification_needs_the_partition_in_the_ongoing_transaction() -> None:
    h = Harness()
    d = h.init()
    assert h.core.verify_produce("t", d.producer_id, 0, "a", 0) is ErrorCode.INVALID_TXN_STATE
    h.add("t", d.producer_id, 0, ("a", 0))
    assert h.core.verify_produce("t", d.producer_id, 0, "a", 0) is ErrorCode.NONE
    assert h.core.verify_produce("t", d.producer_id, 0, "a", 1) is ErrorCode.INVALID_TXN_STATE
    assert h.core.verify_produce("t", d.producer_id + 1, 0, "a", 0) is ErrorCode.INVALID_PRODUCER_ID_MAPPING
    h.init()  # fences epoch 0
    assert h.core.verify_produce("t", d.producer_id, 0, "a", 0) is ErrorCode.INVALID_PRODUCER_EPOCH


def test_replaying_the_log_rebuilds_the_same_state() -> None:
    h = Harness()
    a = h.init("a")
    h.add("a", a.producer_id, 0, ("x", 0))
    b = h.init("b")
    h.add("b", b.producer_id, 0, ("y", 1))
    h.end("b", b.producer_id, 0, commit=False)
    h.apply(Decision(records=h.core.complete("b", h.now)))
    replayed = TxnCoordinator()
    for record in h.log:
        replayed.replay(record)
    assert replayed.txns == h.core.txns


def test_list_filters_by_state_producer_and_duration() -> None:
    h = Harness()
    a = h.init("a")
    h.add("a", a.producer_id, 0)
    h.init("b")
    h.now += 1_000
    assert [t.transactional_id for t in h.core.list([], [], -1, h.now)] == ["a", "b"]
    assert [t.transactional_id for t in h.core.list(["Ongoing"], [], -1, h.now)] == ["a"]
    assert [t.transactional_id for t in h.core.list([], [a.producer_id], -1, h.now)] == ["a"]
    assert [t.transactional_id for t in h.core.list([], [], 1_000, h.now)] == ["a"]
    assert h.core.list([], [], 2_000, h.now) == []
    assert h.core.describe("nope").error is ErrorCode.TRANSACTIONAL_ID_NOT_FOUND


def test_ids_are_served_only_from_owned_partitions_and_unloading_forgets_them() -> None:
    core = TxnCoordinator()
    core.num_partitions = 3
    ids = {partition_for(t, 3): t for t in ("t0", "t1", "t2", "t3", "t4", "t5")}
    served, other = ids[0], ids[1]
    core.begin_loading(0, 7)
    assert core.status(served) is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert core.status(other) is ErrorCode.NOT_COORDINATOR
    core.replay(TxnRecord(served, TxnValue(1, 0, TIMEOUT, TxnState.ONGOING, frozenset({("a", 0)}), 0, 0)))
    assert core.complete_loading(0)
    assert core.status(served) is ErrorCode.NONE and core.coordinator_epoch(served) == 7
    assert [d.transactional_id for d in core.list([], [], -1, 1)] == [served]
    assert core.unload(0) == 1
    assert served not in core.txns and core.status(served) is ErrorCode.NOT_COORDINATOR
    assert core.coordinator_epoch(served) is None


def test_a_load_overtaken_by_an_unload_does_not_activate_the_partition() -> None:
    core = TxnCoordinator()
    core.num_partitions = 3
    core.begin_loading(2, 1)
    core.unload(2)
    assert not core.complete_loading(2)
    assert 2 not in core.active


def test_the_sweeper_leaves_transactions_of_partitions_still_loading_alone() -> None:
    core = TxnCoordinator()
    core.num_partitions = 1
    core.begin_loading(0, 0)
    core.replay(TxnRecord("late", TxnValue(1, 0, 10, TxnState.ONGOING, frozenset({("a", 0)}), 0, 0)))
    assert core.timed_out(1_000) == []
    core.complete_loading(0)
    assert [d.records[0].transactional_id for d in core.timed_out(1_000)] == ["late"]

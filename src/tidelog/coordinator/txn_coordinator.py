"""The transaction coordinator as a pure state machine.

Every transactional id has one :class:`~tidelog.coordinator.txn_records.TxnValue`: its producer id
and epoch, its status, the partitions of its open transaction and its timeout. A request method
checks the request against that value and returns a :class:`Decision`: the error to answer and the
records to append to ``__transaction_state``. It never changes the state itself: the shell appends
the records, then hands each to :meth:`TxnCoordinator.replay`, the only place state changes. A
restart that replays the log therefore rebuilds exactly the same state.

The life of a transaction (Kafka's transitions)::

    (none) --InitProducerId--> Empty --AddPartitions/AddOffsets--> Ongoing --EndTxn--> PrepareCommit
                                                                        \\                 | markers
                                                                         --EndTxn-->  PrepareAbort
                                                                                          | markers
    CompleteCommit / CompleteAbort <------------------------------------------------------+
        --AddPartitions--> Ongoing ...           --InitProducerId--> Empty (epoch + 1)

- A Prepare state lasts while the shell writes the COMMIT/ABORT markers to every partition of the
  transaction; then it asks for :meth:`complete`. Requests meanwhile get CONCURRENT_TRANSACTIONS,
  which clients retry.
- InitProducerId on an Ongoing transaction fences it (the in-memory PrepareEpochFence step of
  Kafka): the epoch is bumped and the transaction moves to PrepareAbort at the new epoch, so its
  markers fence the old producer in every partition; the caller is told CONCURRENT_TRANSACTIONS and
  gets its new epoch on retry.
- A transaction Ongoing for longer than its timeout is aborted the same way by :meth:`timed_out`.
- An epoch that would pass ``MAX_EPOCH`` makes the id move to a new producer id at epoch 0.
- An id idle (Empty or Complete*) for ``transactional.id.expiration.ms`` gets a tombstone.

Which ids this coordinator serves (Kafka's ownership rule): an id belongs to partition
``partition_for(id)`` of ``__transaction_state``, and the coordinator serves the partitions it
*owns*: on a single node all of them, in a cluster those whose leader this broker is. Each owned
partition is first *loading* (its records are being replayed: COORDINATOR_LOAD_IN_PROGRESS), then
*active* with a **coordinator epoch**, the partition's leader epoch when it was loaded (the number
Kafka writes in every COMMIT/ABORT marker, so that a partition leader can refuse markers from a
coordinator that lost the partition). An id of a partition not owned answers NOT_COORDINATOR.
:meth:`unload` forgets every id of a partition the broker no longer leads; the new leader rebuilds
them by replaying the partition.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from tidelog.common.errors import ErrorCode
from tidelog.coordinator.records import partition_for
from tidelog.coordinator.txn_records import TxnRecord, TxnState, TxnValue

OFFSETS_TOPIC = "__consumer_offsets"
MAX_EPOCH = 32766  # Short.MAX_VALUE - 1: the last epoch a producer id may reach
NO_PRODUCER = -1
PREPARING = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE)
COMPLETE = (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
IDLE = (TxnState.EMPTY, *COMPLETE)


@dataclass(frozen=True, slots=True)
class TxnConfig:
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms


@dataclass(slots=True)
class Decision:
    """What a request decided: its error, the records to write first, and the producer to answer."""

    error: ErrorCode = ErrorCode.NONE
    records: list[TxnRecord] = field(default_factory=list)
    producer_id: int = NO_PRODUCER
    producer_epoch: int = -1
    markers_needed: bool = False  # the records start a Prepare state: the shell writes markers next


@dataclass(frozen=True, slots=True)
class DescribedTxn:
    transactional_id: str
    error: ErrorCode
    value: TxnValue | None = None


class TxnCoordinator:
    """All transactional ids of this broker's ``__transaction_state`` partitions."""

    def __init__(self, config: TxnConfig | None = None) -> None:
        self.config = config or TxnConfig()
        self.txns: dict[str, TxnValue] = {}
        # The epoch an id had before a bump the producer did not ask for (timeout abort): KIP-360
        # lets that producer recover with InitProducerId naming it. Kafka keeps this in memory too.
        self.last_epoch: dict[str, int] = {}
        self.num_partitions = 0
        self.loading: dict[int, int] = {}  # partition -> the coordinator epoch it will be served at
        self.active: dict[int, int] = {}  # partition -> coordinator epoch

    # ----------------------------------------------------------------------------- ownership

    def begin_loading(self, partition: int, coordinator_epoch: int) -> None:
        """``partition`` is now owned at ``coordinator_epoch``; its records are about to be replayed."""
        self.unload(partition)
        self.loading[partition] = coordinator_epoch

    def complete_loading(self, partition: int) -> bool:
        """The replay of ``partition`` is done; False if it was unloaded meanwhile."""
        epoch = self.loading.pop(partition, None)
        if epoch is None:
            return False
        self.active[partition] = epoch
        return True

    def unload(self, partition: int) -> int:
        """Forget every id of ``partition`` (no longer owned); returns how many."""
        self.loading.pop(partition, None)
        self.active.pop(partition, None)
        gone = [t for t in self.txns if self.partition_of(t) == partition]
        for transactional_id in gone:
            del self.txns[transactional_id]
            self.last_epoch.pop(transactional_id, None)
        return len(gone)

    def status(self, transactional_id: str) -> ErrorCode:
        """Whether requests for ``transactional_id`` can be served here now."""
        if not self.num_partitions:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        partition = self.partition_of(transactional_id)
        if partition in self.active:
            return ErrorCode.NONE
        if partition in self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NOT_COORDINATOR

    def coordinator_epoch(self, transactional_id: str) -> int | None:
        """The epoch the id's partition is served at; None if it is not active here."""
        return self.active.get(self.partition_of(transactional_id))

    # ---------------------------------------------------------------------------------- replay

    def replay(self, record: TxnRecord) -> None:
        old = self.txns.get(record.transactional_id)
        if record.value is None:
            self.txns.pop(record.transactional_id, None)
            self.last_epoch.pop(record.transactional_id, None)
            return
        new = record.value
        bumped = old is not None and old.producer_id == new.producer_id and new.producer_epoch > old.producer_epoch
        if bumped and old is not None and new.state is TxnState.PREPARE_ABORT:
            self.last_epoch[record.transactional_id] = old.producer_epoch  # the coordinator's own bump
        elif bumped or new.state is TxnState.EMPTY:
            self.last_epoch.pop(record.transactional_id, None)  # the producer got a new epoch itself
        self.txns[record.transactional_id] = new

    def partition_of(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    # -------------------------------------------------------------------------- InitProducerId

    def init_producer_id(
        self, transactional_id: str, timeout_ms: int, expected_pid: int, expected_epoch: int, now_ms: int,
        allocate: Callable[[], int],
    ) -> Decision:
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return Decision(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        current = self.txns.get(transactional_id)
        if current is None or current.state is TxnState.DEAD:
            # A new id starts afresh even when the request names a producer (Kafka does the same).
            value = TxnValue(allocate(), 0, timeout_ms, TxnState.EMPTY, frozenset(), now_ms, -1)
            return self._answer(transactional_id, value)
        if current.state in PREPARING:
            return Decision(ErrorCode.CONCURRENT_TRANSACTIONS)
        if expected_pid != NO_PRODUCER and not self._is_current(transactional_id, current, expected_pid, expected_epoch):
            if expected_pid == current.previous_producer_id and current.state is TxnState.EMPTY:
                # A retry of the InitProducerId that moved this id to a new producer id.
                return Decision(producer_id=current.producer_id, producer_epoch=current.producer_epoch)
            return Decision(ErrorCode.PRODUCER_FENCED)
        if current.state is TxnState.ONGOING:
            return self._abort(transactional_id, current, now_ms, TxnState.PREPARE_ABORT, ErrorCode.CONCURRENT_TRANSACTIONS)
        pid, epoch, previous = current.producer_id, current.producer_epoch + 1, -1
        if epoch > MAX_EPOCH:
            pid, epoch, previous = allocate(), 0, current.producer_id
        value = TxnValue(pid, epoch, timeout_ms, TxnState.EMPTY, frozenset(), now_ms, -1, previous)
        return self._answer(transactional_id, value)

    def _is_current(self, transactional_id: str, current: TxnValue, pid: int, epoch: int) -> bool:
        if pid != current.producer_id:
            return False
        return epoch == current.producer_epoch or epoch == self.last_epoch.get(transactional_id)

    @staticmethod
    def _answer(transactional_id: str, value: TxnValue) -> Decision:
        return Decision(ErrorCode.NONE, [TxnRecord(transactional_id, value)], value.producer_id, value.producer_epoch)

    # ------------------------------------------------------------------ AddPartitions, AddOffsets

    def check_producer(self, transactional_id: str, pid: int, epoch: int) -> tuple[ErrorCode, TxnValue | None]:
        """The error a request from (pid, epoch) gets before any state check, with the id's value."""
        current = self.txns.get(transactional_id)
        if current is None or current.state is TxnState.DEAD:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, None
        if pid != current.producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, current
        if epoch != current.producer_epoch:
            return ErrorCode.PRODUCER_FENCED, current
        return ErrorCode.NONE, current

    def add_partitions(
        self, transactional_id: str, pid: int, epoch: int, partitions: Iterable[tuple[str, int]], now_ms: int
    ) -> Decision:
        error, current = self.check_producer(transactional_id, pid, epoch)
        if error is not ErrorCode.NONE or current is None:
            return Decision(error)
        if current.state in PREPARING:
            return Decision(ErrorCode.CONCURRENT_TRANSACTIONS)
        wanted = frozenset(partitions)
        if current.state is TxnState.ONGOING and wanted <= current.partitions:
            return Decision(producer_id=pid, producer_epoch=epoch)
        start = current.start_ms if current.state is TxnState.ONGOING else now_ms
        value = replace(current, state=TxnState.ONGOING, partitions=current.partitions | wanted,
                        last_update_ms=now_ms, start_ms=start)
        return self._answer(transactional_id, value)

    def add_offsets(
        self, transactional_id: str, pid: int, epoch: int, group_id: str, offsets_partitions: int, now_ms: int
    ) -> Decision:
        """Add the ``__consumer_offsets`` partition of ``group_id`` to the transaction."""
        partition = partition_for(group_id, offsets_partitions)
        return self.add_partitions(transactional_id, pid, epoch, [(OFFSETS_TOPIC, partition)], now_ms)

    # ------------------------------------------------------------------------------------ EndTxn

    def end_txn(self, transactional_id: str, pid: int, epoch: int, commit: bool, now_ms: int) -> Decision:
        error, current = self.check_producer(transactional_id, pid, epoch)
        if error is not ErrorCode.NONE or current is None:
            return Decision(error)
        done, preparing = (
            (TxnState.COMPLETE_COMMIT, TxnState.PREPARE_COMMIT) if commit
            else (TxnState.COMPLETE_ABORT, TxnState.PREPARE_ABORT)
        )
        if current.state is done:
            return Decision(producer_id=pid, producer_epoch=epoch)  # a retry of an EndTxn that succeeded
        if current.state is preparing:
            return Decision(ErrorCode.CONCURRENT_TRANSACTIONS)
        if current.state is not TxnState.ONGOING:
            return Decision(ErrorCode.INVALID_TXN_STATE)
        value = replace(current, state=preparing, last_update_ms=now_ms)
        decision = self._answer(transactional_id, value)
        decision.markers_needed = True
        return decision

    def complete(self, transactional_id: str, now_ms: int) -> list[TxnRecord]:
        """The record ending a Prepare state once its markers are written (none if not preparing)."""
        current = self.txns.get(transactional_id)
        if current is None or current.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return []
        state = TxnState.COMPLETE_COMMIT if current.state is TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
        return [TxnRecord(transactional_id, replace(current, state=state, partitions=frozenset(), last_update_ms=now_ms))]

    def preparing(self, partition: int | None = None) -> list[str]:
        """Ids (of ``partition``, or all) whose markers are still to be written (after a load, say)."""
        return [t for t, v in self.txns.items() if v.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
                and (partition is None or self.partition_of(t) == partition)]

    # ---------------------------------------------------------------------------- time-outs, expiry

    def timed_out(self, now_ms: int) -> list[Decision]:
        """Abort every transaction open for longer than its timeout, fencing its producer."""
        return [d for t in list(self.txns) if (d := self.abort_if_timed_out(t, now_ms)) is not None]

    def abort_if_timed_out(self, transactional_id: str, now_ms: int) -> Decision | None:
        """The abort of ``transactional_id``'s transaction if it is open for longer than its timeout."""
        v = self.txns.get(transactional_id)
        if v is None or v.state is not TxnState.ONGOING or v.start_ms + v.timeout_ms > now_ms \
                or not self._served(transactional_id):
            return None
        return self._abort(transactional_id, v, now_ms, TxnState.PREPARE_ABORT, ErrorCode.NONE)

    def _served(self, transactional_id: str) -> bool:
        return self.partition_of(transactional_id) in self.active

    def _abort(self, transactional_id: str, current: TxnValue, now_ms: int, state: TxnState, error: ErrorCode) -> Decision:
        pid, epoch = current.producer_id, current.producer_epoch + 1
        if epoch > MAX_EPOCH:
            epoch = current.producer_epoch  # cannot bump: the markers still end the transaction
        value = replace(current, producer_epoch=epoch, state=state, last_update_ms=now_ms)
        return Decision(error, [TxnRecord(transactional_id, value)], pid, epoch, markers_needed=True)

    def abort(self, transactional_id: str, now_ms: int) -> Decision:
        """An operator's abort of an open transaction (like kafka-transactions.sh abort)."""
        current = self.txns.get(transactional_id)
        if current is None:
            return Decision(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
        if current.state is not TxnState.ONGOING:
            return Decision(ErrorCode.INVALID_TXN_STATE)
        return self._abort(transactional_id, current, now_ms, TxnState.PREPARE_ABORT, ErrorCode.NONE)

    def expired_ids(self, now_ms: int) -> list[TxnRecord]:
        """Tombstones for ids idle for longer than ``transactional.id.expiration.ms``."""
        limit = now_ms - self.config.id_expiration_ms
        return [TxnRecord(t) for t, v in self.txns.items()
                if v.state in IDLE and v.last_update_ms <= limit and self._served(t)]

    # ------------------------------------------------------------------------- produce, describe

    def verify_produce(self, transactional_id: str, pid: int, epoch: int, topic: str, partition: int) -> ErrorCode:
        """Whether a transactional batch of (pid, epoch) may go to ``topic-partition`` now."""
        current = self.txns.get(transactional_id)
        if current is None or current.producer_id != pid:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if epoch < current.producer_epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if epoch > current.producer_epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if current.state is not TxnState.ONGOING or (topic, partition) not in current.partitions:
            return ErrorCode.INVALID_TXN_STATE
        return ErrorCode.NONE

    def describe(self, transactional_id: str) -> DescribedTxn:
        value = self.txns.get(transactional_id)
        if value is None:
            return DescribedTxn(transactional_id, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
        return DescribedTxn(transactional_id, ErrorCode.NONE, value)

    def list(self, states: Iterable[str], producer_ids: Iterable[int], duration_ms: int, now_ms: int) -> list[DescribedTxn]:
        wanted_states, wanted_pids = set(states), set(producer_ids)
        out = []
        for transactional_id, value in sorted(self.txns.items()):
            if not self._served(transactional_id):
                continue
            if wanted_states and value.state.display not in wanted_states:
                continue
            if wanted_pids and value.producer_id not in wanted_pids:
                continue
            if duration_ms >= 0 and (value.state is not TxnState.ONGOING or now_ms - value.start_ms < duration_ms):
                continue
            out.append(DescribedTxn(transactional_id, ErrorCode.NONE, value))
        return out


"""The mirror process's loop: own shards through the link group, copy their partitions, commit.

One thread does everything, so no state is shared: it polls the link group's membership consumer
(rebalances arrive as callbacks and take or release shards), refreshes topics every
``metadata.refresh.ms`` (topics.py), reads records from the one source consumer (``assign``ed, never
subscribed: the source sees a plain read_committed reader) and copies each into the open transaction
of its shard (shard.py). Transactions are committed every ``transaction.interval.ms``, or at once
when the link's byte budget is used up (budget.py).

Exactly once, the rules:

- a source record is copied only when its offset is at or past its partition's expected next
  offset; anything older (a refetch after a rewind) is dropped, so no copy is made twice within one
  process;
- across processes and crashes, the position comes from the destination (shard.py): the checkpoint
  committed with the copies, read after ``init_transactions()`` fenced every earlier owner;
- an abortable error aborts the shard's transaction and re-assigns its partitions at their committed
  positions; a fenced producer (another owner, or a transaction that outlived
  ``transaction.timeout.ms`` in an outage) drops the shard, which is taken again only if the group
  still gives it to this process after ``session.timeout.ms``.

Outages: while a commit cannot complete (the destination is unreachable) the loop retries it and
reads nothing more; the source holds the backlog. When the source is unreachable, nothing is read
and open transactions are committed on time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient

from tidelog.clients.transactional import FENCED, read_to_end, retry_retriable, shared_settings
from tidelog.mirror import memory
from tidelog.mirror.budget import FairBudget
from tidelog.mirror.config import MirrorConfig
from tidelog.mirror.metrics import MirrorMetrics
from tidelog.mirror.position import Checkpoint, shard_of
from tidelog.mirror.shard import Key, PartitionState, Shard
from tidelog.mirror.topics import LinkError, TopicSync, ensure_link_topic, link_group_member

log = logging.getLogger(__name__)
FENCES_BEFORE_GIVING_UP = 5
FENCE_WINDOW_S = 300.0
CONSUME_BATCH = 2000
COMMIT_THREADS = 8  # shards committing at once
DRAINED_COMMIT_S = 0.05
FETCH_QUEUE_BACKOFF_MS = 20  # a full prefetch is looked at again this soon


class Mirror:
    """Runs one process of a link until ``stop`` is set (see the module docstring)."""

    def __init__(self, config: MirrorConfig, metrics: MirrorMetrics | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.clock = clock
        self.metrics = metrics or MirrorMetrics()
        self.budget = FairBudget.for_link(config.budget_bytes)
        self.shards: dict[int, Shard] = {}
        self.topics: dict[str, int] = {}  # mirrored source topic -> partitions
        self._retake: dict[int, float] = {}  # dropped (fenced) shard -> when to look at the group again
        self._fences: list[float] = []
        self._group_error = ""
        self._stop = threading.Event()
        self.source_admin = AdminClient(shared_settings(config.source))
        self.dest_admin = AdminClient(shared_settings(config.destination))
        self.sync = TopicSync(config, self.source_admin, self.dest_admin)
        self.source: Consumer | None = None
        self.group: Consumer | None = None
        self.joined = threading.Event()
        self._pool: ThreadPoolExecutor | None = None
        self._shard_numbers: dict[Key, int] = {}  # shard_of, remembered (it is pure)

    # ---- start and stop ------------------------------------------------------------------------------

    def start(self) -> None:
        self.config = ensure_link_topic(self.config, self.dest_admin)
        self.topics = self.sync.run()
        self.source = Consumer({
            **self.config.source, "group.id": self.config.group_id, "enable.auto.commit": False,
            "enable.auto.offset.store": False, "isolation.level": "read_committed",
            "auto.offset.reset": self.config.start, "enable.partition.eof": False,
            # The prefetch is bounded in bytes only (one total over all partitions). A count bound
            # (queued.min.messages) would stop each partition after that many records and then hold
            # its fetches back for fetch.queue.backoff.ms (1 s by default): with 1 KiB records that
            # capped a partition at about 1,000 records/s.
            "queued.max.messages.kbytes": self.budget.prefetch_kbytes, "queued.min.messages": 10_000_000,
            "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
            "fetch.max.bytes": min(50 << 20, self.budget.prefetch_kbytes * 1024),
            "logger": logging.getLogger("tidelog.mirror.rdkafka")})
        self.group = link_group_member(self.config)
        self.group.subscribe([self.config.link_topic], on_assign=self._assigned, on_revoke=self._revoked,
                             on_lost=self._lost)
        log.info("mirror link %s: %d topics to mirror, %d shards, budget %d bytes", self.config.name,
                 len(self.topics), self.config.shards, self.config.budget_bytes)

    def close(self) -> None:
        for number in list(self.shards):
            self._release(number, commit=True)
        if self.group is not None:
            self.group.close()
            self.group = None
        if self.source is not None:
            self.source.close()
            self.source = None
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    # ---- shards come and go --------------------------------------------------------------------------

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        consumer.incremental_assign(partitions)
        if partitions:
            consumer.pause(partitions)
        self.joined.set()
        for tp in partitions:
            self._retake.pop(tp.partition, None)
            self._take(tp.partition)

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._retake.pop(tp.partition, None)
            if tp.partition in self.shards:
                self._release(tp.partition, commit=True)
        consumer.incremental_unassign(partitions)

    def _lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._retake.pop(tp.partition, None)
            if tp.partition in self.shards:
                self._release(tp.partition, commit=False)
        consumer.incremental_unassign(partitions)

    def _take(self, number: int) -> None:
        """Fence every earlier owner, read the shard's checkpoints, start reading its partitions."""
        if number in self.shards:
            self._release(number, commit=False)
        settings = {**self.config.destination, "transaction.timeout.ms": self.config.transaction_timeout_ms,
                    "queue.buffering.max.kbytes": max(1024, self.config.budget_bytes // 1024),
                    "linger.ms": self.config.destination.get("linger.ms", 20)}
        shard = Shard(number, self.config.transactional_id(number), settings, self.config.link_topic,
                      self.config.offset_header)
        try:
            if not retry_retriable(self._stop, lambda: shard.producer.init_transactions(30), "init_transactions",
                                   log):
                return
        except KafkaException as exc:
            raise LinkError(f"shard {number}: init_transactions: {exc.args[0].str()}") from None
        saved: dict[Key, Checkpoint] = {}

        def take(message: Message) -> None:
            try:
                checkpoint = Checkpoint.decode(message.value() or b"")
            except ValueError as exc:
                raise LinkError(f"{self.config.link_topic} [{number}] offset {message.offset()}: {exc}") from None
            saved[(checkpoint.topic, checkpoint.partition)] = checkpoint

        read_to_end(shared_settings(self.config.destination), self.config.link_topic, [number], take)
        self.shards[number] = shard
        for (topic, partition), checkpoint in saved.items():
            shard.add(PartitionState(topic, partition, self.config.topics.destination(topic), checkpoint))
        self._follow(shard)
        memory.trim()  # the checkpoint reader's buffers and the new producer's metadata answer are freed
        self.metrics.shards.set((), len(self.shards))
        log.info("shard %d taken: %d partitions, %d with checkpoints", number, len(shard.partitions), len(saved))

    def _follow(self, shard: Shard) -> None:
        """Start reading every partition of the mirrored topics that belongs to ``shard`` and is not read yet."""
        assert self.source is not None
        new: list[TopicPartition] = []
        for topic, count in self.topics.items():
            for partition in range(count):
                if shard_of(topic, partition, self.config.shards) != shard.number:
                    continue
                state = shard.partitions.get((topic, partition))
                if state is None:
                    state = PartitionState(topic, partition, self.config.topics.destination(topic), None)
                    shard.add(state)
                elif state.reading:
                    continue
                state.reading = True
                new.append(_position(state))
        if new:
            self.source.incremental_assign(new)

    def _release(self, number: int, commit: bool) -> None:
        shard = self.shards.pop(number, None)
        if shard is None:
            return
        if shard.open_since is not None and not (commit and self._commit(shard)):
            self._abort_quietly(shard)
        self._unassign(shard, set(shard.partitions))
        shard.close()
        self.metrics.shards.set((), len(self.shards))
        log.info("shard %d released", number)

    def _unassign(self, shard: Shard, keys: set[Key]) -> None:
        if self.source is not None and keys:
            self.source.incremental_unassign([TopicPartition(t, p) for t, p in keys])
        for key in keys:
            shard.partitions[key].reading = False
        self.budget.release(keys)

    # ---- the loop ------------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        self._stop = stop
        assert self.source is not None and self.group is not None
        next_refresh = self.clock() + self.config.metadata_refresh_ms / 1000
        next_metrics = 0.0
        try:
            while not stop.is_set():
                self._poll_group()
                now = self.clock()
                if now >= next_refresh:
                    self._refresh()
                    next_refresh = now + self.config.metadata_refresh_ms / 1000
                self._retake_due(now)
                messages = self.source.consume(CONSUME_BATCH, 0.05 if self.shards else 0.2)
                for message in messages:
                    self._handle(message, now)
                drained = len(messages) < CONSUME_BATCH
                if self.budget.full() or self._interval_due(now, drained):
                    self._commit_all()
                if now >= next_metrics:
                    self._advance_idle(now)
                    self._observe(time.time())
                    next_metrics = now + 1.0
            self._commit_all()
        finally:
            self.close()

    def _poll_group(self) -> None:
        assert self.group is not None
        try:
            message = self.group.poll(0)
        except KafkaException as exc:
            message, error = None, exc.args[0]
        else:
            error = message.error() if message is not None else None
        if error is not None:
            self.metrics.errors.inc(("group",))
            if error.str() != self._group_error:
                log.warning("link group %s: %s", self.config.group_id, error.str())
            self._group_error = error.str()
        elif message is not None:
            self._group_error = ""

    def _handle(self, message: Message, now: float) -> None:
        error = message.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                self.metrics.errors.inc(("source",))
                log.warning("source: %s", error.str())
            return
        topic, partition = message.topic() or "", message.partition() or 0
        number = self._shard_numbers.get((topic, partition))
        if number is None:
            number = self._shard_numbers[(topic, partition)] = shard_of(topic, partition, self.config.shards)
        shard = self.shards.get(number)
        state = shard.partitions.get((topic, partition)) if shard is not None else None
        if shard is None or state is None or not state.reading:
            return  # released since it was fetched
        expected = state.next_offset
        if expected is not None and (message.offset() or 0) < expected:
            return  # fetched before a rewind: already copied or to be copied from the committed position
        try:
            size = shard.copy(state, message, now)
        except KafkaException as exc:
            self._failed(shard, exc.args[0])
            return
        self.metrics.count(topic, partition, size)
        if self.budget.add((topic, partition), size) and self.source is not None:
            self.source.pause([TopicPartition(topic, partition)])

    def _interval_due(self, now: float, drained: bool) -> bool:
        """A transaction commits once it is ``transaction.interval.ms`` old, or, when the source had
        nothing more to give (``drained``: the last consume came back short), once it is
        ``DRAINED_COMMIT_S`` old: a backlog still makes big transactions, a trickle is not held back
        for the whole interval (its lag is what a read_committed reader sees)."""
        interval = self.config.transaction_interval_ms / 1000
        if drained:
            interval = min(interval, DRAINED_COMMIT_S)
        return any(s.open_since is not None and now - s.open_since >= interval for s in self.shards.values())

    def _commit_all(self) -> None:
        """Commit every open transaction. The shards' commits run side by side on worker threads
        (each waits on its destination round trips, with the GIL released), so the loop stalls for
        the slowest commit, not for their sum; what follows a commit is done here, on the loop."""
        open_ = [shard for shard in self.shards.values() if shard.open_since is not None]
        if len(open_) == 1:
            self._settle(open_[0], self._finish(open_[0]))
        elif open_:
            for shard, outcome in zip(open_, self._committer().map(self._finish, open_), strict=True):
                self._settle(shard, outcome)

    def _committer(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(COMMIT_THREADS, thread_name_prefix="mirror-commit")
        return self._pool

    def _commit(self, shard: Shard) -> bool:
        return self._settle(shard, self._finish(shard))

    def _finish(self, shard: Shard) -> dict[Key, Checkpoint] | KafkaError | None:
        """Flush the shard's copies, write its checkpoints and commit: the checkpoints to adopt, the
        error that ended the transaction, or None when stopped first. Touches only ``shard``, so the
        shards' commits can run on several threads at once."""
        producer = shard.producer

        def flush() -> None:
            while producer.flush(1.0) > 0:
                if self._stop.is_set():
                    return  # stopping in an outage: the commit fails, the next owner aborts

        try:
            checkpoints = shard.write_checkpoints(int(time.time() * 1000), flush)
            if shard.delivery_error is not None:
                raise KafkaException(shard.delivery_error)
            if not retry_retriable(self._stop, lambda: producer.commit_transaction(10), "commit", log,
                                   "retrying, the source holds the backlog"):
                return None
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            return error
        return checkpoints

    def _settle(self, shard: Shard, outcome: dict[Key, Checkpoint] | KafkaError | None) -> bool:
        if outcome is None:
            return False
        if isinstance(outcome, KafkaError):
            self._failed(shard, outcome)
            return False
        shard.committed(outcome)
        self._resume(self.budget.release(set(outcome)))
        self.metrics.transactions.inc()
        return True

    def _resume(self, keys: set[Key]) -> None:
        live = [TopicPartition(t, p) for t, p in keys
                if (s := self.shards.get(shard_of(t, p, self.config.shards))) is not None and (t, p) in s.partitions]
        if live and self.source is not None:
            self.source.resume(live)

    def _failed(self, shard: Shard, error: KafkaError) -> None:
        """Abort and rewind (abortable), or drop the shard (fenced or fatal)."""
        self.metrics.aborts.inc()
        self.metrics.errors.inc(("fenced" if error.code() in FENCED else "destination",))
        if error.code() in FENCED or error.fatal():
            log.warning("shard %d: %s; dropping it (another process owns it, or the transaction timed out)",
                        shard.number, error.str())
            self._count_fence(error)
            self.shards.pop(shard.number, None)
            shard.aborted()
            self._unassign(shard, set(shard.partitions))
            shard.close()
            self._retake[shard.number] = self.clock() + self.config.session_timeout_ms / 1000
            self.metrics.shards.set((), len(self.shards))
            return
        log.warning("shard %d: transaction aborted (%s); copying again from the committed positions",
                    shard.number, error.str())
        self._abort_quietly(shard)
        keys = shard.aborted() | {k for k, s in shard.partitions.items() if s.reading}
        self._unassign(shard, keys)
        self._follow(shard)

    def _abort_quietly(self, shard: Shard) -> None:
        try:
            retry_retriable(self._stop, lambda: shard.producer.abort_transaction(30), "abort", log)
        except KafkaException as exc:
            log.warning("shard %d: abort failed (%s); the next owner's init_transactions aborts it",
                        shard.number, exc.args[0].str())
        shard.aborted()

    def _count_fence(self, error: KafkaError) -> None:
        now = self.clock()
        self._fences = [t for t in self._fences if now - t < FENCE_WINDOW_S] + [now]
        if len(self._fences) >= FENCES_BEFORE_GIVING_UP:
            raise LinkError(f"fenced {len(self._fences)} times in {FENCE_WINDOW_S:.0f} s: is another process "
                            f"running link {self.config.name!r} outside its group? ({error.str()})")

    def _retake_due(self, now: float) -> None:
        assert self.group is not None
        due = [n for n, at in self._retake.items() if at <= now]
        if not due:
            return
        owned = {tp.partition for tp in self.group.assignment()}
        for number in due:
            del self._retake[number]
            if number in owned and number not in self.shards:
                log.info("shard %d is still ours after the fence: taking it again", number)
                self._take(number)

    def _refresh(self) -> None:
        try:
            topics = self.sync.run()
        except KafkaException as exc:
            self.metrics.errors.inc(("metadata",))
            log.warning("topic refresh failed: %s", exc.args[0].str())
            return
        if topics != self.topics:
            log.info("mirrored topics now %s", {t: n for t, n in sorted(topics.items())})
            self.topics = topics
            for shard in self.shards.values():
                self._follow(shard)

    def _advance_idle(self, now: float) -> None:
        """Partitions with nothing in flight whose source position went past their checkpoint (only
        records that are not copied were there) get their checkpoint moved (Shard.advance). Called
        between batches, when every record consume() returned has been handled."""
        assert self.source is not None
        for shard in list(self.shards.values()):
            idle = [s for s in shard.partitions.values() if s.reading and s.pending_next is None]
            if not idle:
                continue
            positions = self.source.position([TopicPartition(s.topic, s.partition) for s in idle])
            for state, tp in zip(idle, positions, strict=True):
                known = state.committed.next if state.committed is not None else -1
                if tp.error is None and tp.offset >= 0 and tp.offset > known and tp.offset > (state.origin or 0):
                    try:
                        shard.advance(state, tp.offset, now)
                    except KafkaException as exc:
                        self._failed(shard, exc.args[0])
                        break

    def _observe(self, now_s: float) -> None:
        assert self.source is not None
        for shard in self.shards.values():
            for state in shard.partitions.values():
                if not state.reading:
                    continue
                try:
                    _low, high = self.source.get_watermark_offsets(TopicPartition(state.topic, state.partition),
                                                                   cached=True)
                except KafkaException:
                    continue
                if high >= 0:
                    state.high = high
                self.metrics.observe(state, now_s)
        self.metrics.budget.set((), self.budget.in_flight)


def _position(state: PartitionState) -> TopicPartition:
    next_offset = state.committed.next if state.committed is not None else state.origin
    if next_offset is None:
        return TopicPartition(state.topic, state.partition)  # auto.offset.reset = link.start
    return TopicPartition(state.topic, state.partition, next_offset)


def describe(mirror: Mirror) -> dict[str, Any]:
    """What this process does now (for logs and tests)."""
    return {"shards": sorted(mirror.shards), "partitions": sum(len(s.partitions) for s in mirror.shards.values()),
            "in_flight": mirror.budget.in_flight}

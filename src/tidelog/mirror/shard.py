"""One shard of a link: its transactional producer on the destination and its partitions' positions.

A shard is the unit of ownership, of fencing and of transactions. Its producer's transactional.id is
``tidelog-mirror.<link>.<shard>``, the same in every mirror process, so the process that takes the
shard over calls ``init_transactions()`` with it and thereby (1) aborts the transaction the previous
owner left open and (2) fences that owner: a zombie (a process paused past its session, or cut off
from the destination, that still believes it owns the shard) gets PRODUCER_FENCED on its next
send or commit and can never add a record. Only then are the shard's checkpoints read
(read_committed), so they are exactly those of the records on the destination: copying resumes
right after the last committed record of every partition.

Each transaction holds the copies of records of the shard's partitions and, written last, one
checkpoint per partition it touched (position.py), then commits. ``flush()`` before the checkpoints
gives the destination offsets of the copies (delivery reports) for the translation pairs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from tidelog.clients.transactional import send
from tidelog.mirror.position import Checkpoint, encode_offset

log = logging.getLogger(__name__)
Key = tuple[str, int]


@dataclass(slots=True)
class PartitionState:
    topic: str
    partition: int
    dest_topic: str
    committed: Checkpoint | None  # None: nothing mirrored yet (starts at link.start)
    pending_next: int | None = None  # source offset after the last record in the open transaction
    pending_ts: int = -1
    pending_dest: int = -1  # destination offset of the last delivered copy in the open transaction
    high: int = -1  # the source's high watermark last seen (for lag)
    caught_up_at: float = 0.0  # when lag was last seen to be zero
    reading: bool = False  # assigned on the source consumer
    origin: int | None = None  # with no checkpoint yet: the first offset ever copied (where a rewind goes)

    @property
    def next_offset(self) -> int | None:
        """Where the next record to copy is: after the open transaction's, else after the committed."""
        if self.pending_next is not None:
            return self.pending_next
        return self.committed.next if self.committed is not None else None

    def rewind(self) -> None:
        self.pending_next = None
        self.pending_ts = -1
        self.pending_dest = -1


class Shard:
    def __init__(self, number: int, transactional_id: str, settings: dict[str, Any], link_topic: str,
                 offset_header: str) -> None:
        self.number = number
        self.link_topic = link_topic
        self.offset_header = offset_header
        self.partitions: dict[Key, PartitionState] = {}
        self._source_of: dict[str, str] = {}  # destination topic -> source topic (partition n goes to n)
        self.open_since: float | None = None
        self.touched: set[Key] = set()
        self.delivery_error: KafkaError | None = None
        self.producer = Producer({"logger": logging.getLogger("tidelog.mirror.rdkafka"), **settings,
                                  "transactional.id": transactional_id, "enable.idempotence": True,
                                  "on_delivery": self.on_delivery})

    def add(self, state: PartitionState) -> None:
        self.partitions[(state.topic, state.partition)] = state
        self._source_of[state.dest_topic] = state.topic

    def copy(self, state: PartitionState, message: Message, now: float) -> int:
        """Add the copy of ``message`` to the open transaction (begun if none); bytes copied."""
        if self.open_since is None:
            self.producer.begin_transaction()
            self.open_since = now
        offset = message.offset() or 0
        headers: list[tuple[str, str | bytes | None]] = list(message.headers() or ())  # type: ignore[arg-type]
        if self.offset_header:
            headers.append((self.offset_header, encode_offset(offset)))
        kind, timestamp = message.timestamp()
        value, key = message.value(), message.key()
        send(self.producer, state.dest_topic, value, key, headers, partition=state.partition,
             timestamp=timestamp if kind != 0 and timestamp > 0 else 0)
        self.producer.poll(0)
        if state.committed is None and state.origin is None:
            state.origin = offset
        state.pending_next = offset + 1
        state.pending_ts = timestamp
        self.touched.add((state.topic, state.partition))
        return len(value or b"") + len(key or b"") + 64

    def advance(self, state: PartitionState, position: int, now: float) -> None:
        """Move the partition's checkpoint to ``position`` with no copy: the source consumer went past
        records that are not copied (control records, aborted data), so that the committed position,
        and the lag, reach the source's end."""
        if self.open_since is None:
            self.producer.begin_transaction()
            self.open_since = now
        state.pending_next = position
        self.touched.add((state.topic, state.partition))

    def on_delivery(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self.delivery_error = error
            return
        topic = message.topic() or ""
        source = self._source_of.get(topic)
        state = self.partitions.get((source, message.partition() or 0)) if source is not None else None
        if state is not None and topic != self.link_topic:
            state.pending_dest = max(state.pending_dest, message.offset() or 0)

    def write_checkpoints(self, now_ms: int, flush: Callable[[], None]) -> dict[Key, Checkpoint]:
        """Flush the copies (their destination offsets come back), then write the checkpoints into the
        open transaction. Returns the checkpoints to adopt once the commit succeeds."""
        flush()
        out: dict[Key, Checkpoint] = {}
        for key in self.touched:
            state = self.partitions[key]
            assert state.pending_next is not None
            dest_next = state.pending_dest + 1 if state.pending_dest >= 0 else (
                state.committed.dest_next if state.committed else 0)
            base = state.committed or Checkpoint(state.topic, state.partition, 0, 0)
            checkpoint = base.advanced(state.pending_next, dest_next, now_ms, state.pending_ts)
            send(self.producer, self.link_topic, checkpoint.encode(), checkpoint.key, partition=self.number)
            out[key] = checkpoint
        return out

    def committed(self, checkpoints: dict[Key, Checkpoint]) -> None:
        for key, checkpoint in checkpoints.items():
            state = self.partitions[key]
            state.committed = checkpoint
            state.rewind()
        self.touched.clear()
        self.open_since = None
        self.delivery_error = None

    def aborted(self) -> set[Key]:
        """The open transaction is gone: its partitions go back to their committed positions."""
        touched = set(self.touched)
        for key in touched:
            self.partitions[key].rewind()
        self.touched.clear()
        self.open_since = None
        self.delivery_error = None
        return touched

    def close(self) -> None:
        self.producer.flush(0)

"""The agent's loop: read lines from every source, write them and their positions in one transaction.

Exactly once per line, across restarts and kill -9: the lines of a transaction and the position
records of their sources (positions.py) are committed together or not at all. At start,
``init_transactions()`` aborts what a previous incarnation left open; the positions then read
(read_committed) are exactly those of the lines that are in the topic, so reading resumes at the
first line not there. An aborted transaction (an abortable error) rewinds every source it touched
to its committed positions (files.py) and its lines are read again.

Records: key and ``tidelog-source-id`` header = ``host:path`` (so one source stays in one partition,
in order); value = the line without its newline; headers ``tidelog-seqno`` (byte offset of the end
of the line in its file), ``tidelog-generation`` (which file that path has been, from 0) and, for a
cut line, ``tidelog-original-size``. (generation, seqno) grows strictly per source.

Outages, without a spool: while a commit cannot complete, the loop retries it and reads nothing
more, so the files themselves hold the backlog, and generations keep their descriptors, so a file
renamed or deleted during the outage is still read in full afterwards (while the agent runs). What is
lost: a file deleted while the agent is down (or restarted during the outage), and bytes a
copytruncate drops (written between its copy and its truncate), as with any tailer. With
``agent.state.dir`` the agent reads on into a disk spool during the outage instead (kafka_spool.py:
a subclass of this loop, with the invariant that keeps it exactly once).

Fencing: a second agent with the same ``agent.id`` fences the first (PRODUCER_FENCED). A transaction
that outlives ``transaction.timeout.ms`` during an outage is fenced the same way, so the agent starts
a new producer and rewinds; fenced three times within five minutes, it stops with an error rather
than fence the other agent back for ever.
"""

from __future__ import annotations

import fnmatch
import glob
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.agent import positions
from tidelog.agent.config import AgentConfig, FileGroup
from tidelog.agent.files import Generation, SavedGeneration, Source
from tidelog.agent.lines import Line
from tidelog.clients.transactional import FENCED, retry_retriable, send

log = logging.getLogger(__name__)

FENCES_BEFORE_GIVING_UP = 3
FENCE_WINDOW_S = 300.0
HEADER_SOURCE = "tidelog-source-id"
HEADER_SEQNO = "tidelog-seqno"
HEADER_GENERATION = "tidelog-generation"
HEADER_ORIGINAL_SIZE = "tidelog-original-size"


class AgentError(Exception):
    """The agent cannot go on (fenced, a topic missing, positions unreadable); the message says why."""


@dataclass
class AgentMetrics:
    lines_total: int = 0
    bytes_total: int = 0
    transactions_total: int = 0
    aborts_total: int = 0
    truncated_lines_total: int = 0
    sources: int = 0
    duplicates_total: int = 0  # gateway mode: lines the gateway already had (sent again after a restart)
    replaced_lines_total: int = 0  # gateway mode: lines not valid UTF-8, bad bytes replaced
    spool_bytes: int = 0  # the outage spool's size (gateway mode, or straight to Kafka with agent.state.dir)
    replayed_lines_total: int = 0  # straight to Kafka: spooled lines written in replay transactions
    positions_write_failures_total: int = 0  # gateway mode: positions file writes the disk refused


class Agent:
    """Ships the files of ``config`` until ``stop`` is set (see the module docstring)."""

    def __init__(self, config: AgentConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.clock = clock
        self.metrics = AgentMetrics()
        self.sources: dict[str, Source] = {}
        self._written: dict[str, str] = {}  # source id -> the position record last written for it
        self._dirty: set[Source] = set()
        self._txn_started: float | None = None
        self._txn_records = 0
        self._producer: Producer | None = None
        self._fences: list[float] = []  # when this agent was fenced, within FENCE_WINDOW_S
        self._stop = threading.Event()

    # ---- start -------------------------------------------------------------------------------------

    def start(self) -> None:
        self._check_topics()
        self._producer = self._new_producer()
        self._restore(positions.load(self.config.kafka, self.config.positions_topic, self.config.agent_id))

    def _restore(self, saved: dict[str, positions.SavedSource]) -> None:
        """Sources from their saved positions, then the globs expanded for new files."""
        now = self.clock()
        for item in saved.values():
            source = Source(item.source_id, item.path, self._group_for(item.path, item.topic))
            source.restore(item.generations, item.next_generation, now)
            self.sources[item.source_id] = source
            self._written[item.source_id] = positions.encode(self.config.agent_id, item).decode()
        self.scan(now)
        log.info("agent %s started: %d sources (%d with saved positions)", self.config.agent_id,
                 len(self.sources), len(saved))

    def _check_topics(self) -> None:
        admin = AdminClient({k: v for k, v in self.config.kafka.items()
                             if k in positions.consumer_settings(self.config.kafka)})
        topic = self.config.positions_topic
        futures = admin.create_topics([NewTopic(topic, num_partitions=1,
                                                config={"cleanup.policy": "compact"})], operation_timeout=30)
        try:
            futures[topic].result(timeout=60)
            log.info("created the positions topic %s", topic)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise AgentError(f"cannot create the positions topic {topic}: {exc.args[0].str()}") from None
        metadata = admin.list_topics(timeout=30)
        for group in self.config.files:
            described = metadata.topics.get(group.topic)
            if described is None or described.error is not None:
                raise AgentError(f"topic {group.topic} (files {', '.join(group.paths)}) does not exist; create it "
                                 f"first")

    def _make_producer(self) -> Producer:
        return Producer({"logger": logging.getLogger("tidelog.agent.rdkafka"), **self.config.kafka,
                         "transactional.id": self.config.transactional_id, "enable.idempotence": True})

    def _new_producer(self) -> Producer:
        producer = self._make_producer()
        try:
            producer.init_transactions(60)
        except KafkaException as exc:
            raise AgentError(f"init_transactions: {exc.args[0].str()}") from None
        return producer

    def _group_for(self, path: str, topic: str) -> FileGroup:
        for group in self.config.files:
            if group.topic == topic and any(fnmatch.fnmatch(path, pattern) for pattern in group.paths):
                return group
        return FileGroup(paths=(path,), topic=topic)  # no longer configured: finish what was saved

    # ---- the loop ----------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Ship until ``stop`` is set; then commit what is open and close."""
        self._stop = stop
        next_scan = self.clock() + self.config.scan_interval_ms / 1000
        try:
            while not stop.is_set():
                now = self.clock()
                if now >= next_scan:
                    self.scan(now)
                    next_scan = now + self.config.scan_interval_ms / 1000
                try:
                    read = self.step(now)
                except KafkaException as exc:
                    self._failed(exc.args[0])
                    read = 0
                if self._txn_started is not None and (
                        self._txn_records >= self.config.transaction_max_records
                        or now - self._txn_started >= self.config.transaction_interval_ms / 1000):
                    self.commit(stop)
                if not read:
                    stop.wait(self.config.poll_interval_ms / 1000)
            if self._txn_started is not None:
                self.commit(stop)
        finally:
            self.close()

    def scan(self, now: float) -> None:
        """Expand the globs: every matching path not yet known becomes a source, read from byte 0."""
        for group in self.config.files:
            for pattern in group.paths:
                for path in sorted(glob.glob(pattern, recursive=True)):
                    path = os.path.abspath(path)
                    source_id = f"{self.config.host}:{path}"
                    if source_id in self.sources or _excluded(path, group.exclude):
                        continue
                    source = Source(source_id, path, group)
                    if source.open_path(now):
                        self.sources[source_id] = source
        self.metrics.sources = len(self.sources)

    def step(self, now: float) -> int:
        """Check every source for rotation, read what is new into the open transaction; lines read."""
        room = max(1, self.config.transaction_max_records - self._txn_records)
        total = 0
        for source in self.sources.values():
            source.check(now)
            lines = source.read(room - total, now, self.config.rotate_wait_ms / 1000,
                                self.config.multiline_timeout_ms / 1000)
            if lines or self._state(source) != self._written.get(source.source_id):
                self._begin(now)
                self._dirty.add(source)  # before producing: an error mid-way rewinds it
            if lines:
                self._produce(source, lines)
                total += len(lines)
            if total >= room:
                break
        return total

    def _state(self, source: Source) -> str:
        saved = positions.SavedSource(source.source_id, source.path, source.group.topic, source.next_generation,
                                      source.saved_state())
        return positions.encode(self.config.agent_id, saved).decode()

    def _begin(self, now: float) -> None:
        if self._txn_started is None:
            assert self._producer is not None
            self._producer.begin_transaction()
            self._txn_started = now
            self._txn_records = 0

    def _produce(self, source: Source, lines: list[tuple[Generation, Line]]) -> None:
        producer = self._producer
        assert producer is not None
        topic = source.group.topic
        key = source.source_id.encode()
        for gen, line in lines:
            if line.original_size:
                self.metrics.truncated_lines_total += 1
            send(producer, topic, line.value, key, record_headers(key, gen.number, line.end, line.original_size))
            self.metrics.bytes_total += len(line.value)
        self._txn_records += len(lines)
        self.metrics.lines_total += len(lines)
        producer.poll(0)

    # ---- commit and abort --------------------------------------------------------------------------

    def commit(self, stop: threading.Event) -> bool:
        """Write the dirty sources' positions and commit. False when the transaction was aborted."""
        producer = self._producer
        assert producer is not None
        states = {source: self._state(source) for source in self._dirty}
        try:
            for source, state in states.items():
                send(producer, self.config.positions_topic, state.encode(),
                      positions.key_of(self.config.agent_id, source.source_id))
            committed = self._commit_transaction(stop)
        except KafkaException as exc:
            committed = False
            self._failed(exc.args[0])
        if committed:
            for source, state in states.items():
                source.committed()
                self._written[source.source_id] = state
            self.metrics.transactions_total += 1
            self._dirty.clear()
            self._txn_started = None
        return committed

    def _commit_transaction(self, stop: threading.Event) -> bool:
        """Commit the open transaction, waiting through an outage; False if stopped first."""
        producer = self._producer
        assert producer is not None
        return self._retry(stop, lambda: producer.commit_transaction(10))

    def _retry(self, stop: threading.Event, call: Callable[[], None], what: str = "commit") -> bool:
        """Run ``call`` until it succeeds; retriable errors (an outage) are retried. False if stopped."""
        return retry_retriable(stop, call, what, log, "retrying, the files wait")

    def _failed(self, error: KafkaError) -> None:
        """An abortable or fatal error: abort, or start a new producer, and rewind to the committed positions.

        During an outage the abort (or the new producer's init_transactions) waits for the cluster, so
        the files are read again only once it answers."""
        self.metrics.aborts_total += 1
        log.warning("transaction aborted (%s); reading again from the committed positions", error.str())
        producer = self._producer
        assert producer is not None
        for source in self._dirty:
            source.rewind()
        self._dirty.clear()
        self._txn_started = None
        if error.code() in FENCED or error.fatal():
            self._renew_producer(error)
            return
        try:
            self._retry(self._stop, lambda: producer.abort_transaction(30), "abort")
        except KafkaException as exc:
            self._renew_producer(exc.args[0])

    def _renew_producer(self, error: KafkaError) -> None:
        """A new producer (init_transactions) after a fatal error. Fenced is also what a transaction that
        outlived transaction.timeout.ms during an outage gets, so it is retried; fenced again and again
        means another agent runs with this agent.id: stop rather than fence it back for ever."""
        self._count_fence(error)
        log.warning("a new transactional producer after: %s", error.str())
        producer = self._make_producer()
        self._producer = producer
        try:
            self._retry(self._stop, lambda: producer.init_transactions(30), "init_transactions")
        except KafkaException as exc:
            raise AgentError(f"init_transactions: {exc.args[0].str()}") from None

    def _count_fence(self, error: KafkaError) -> None:
        """Raise AgentError when fenced too often: another agent with this agent.id runs."""
        now = self.clock()
        if error.code() in FENCED:
            self._fences = [t for t in self._fences if now - t < FENCE_WINDOW_S] + [now]
            if len(self._fences) >= FENCES_BEFORE_GIVING_UP:
                raise AgentError(f"fenced {len(self._fences)} times in {FENCE_WINDOW_S:.0f} s: another agent with "
                                 f"agent.id {self.config.agent_id!r} is running ({error.str()})")

    def close(self) -> None:
        for source in self.sources.values():
            source.close()
        if self._producer is not None:
            self._producer.flush(5)
            self._producer = None


def record_headers(key: bytes, generation: int, end: int, original_size: int
                   ) -> list[tuple[str, str | bytes | None]]:
    """A line's headers (the module docstring's "Records"); ``key`` is the sourceId."""
    headers: list[tuple[str, str | bytes | None]] = [
        (HEADER_SOURCE, key), (HEADER_SEQNO, b"%d" % end), (HEADER_GENERATION, b"%d" % generation)]
    if original_size:
        headers.append((HEADER_ORIGINAL_SIZE, b"%d" % original_size))
    return headers


def _excluded(path: str, patterns: tuple[str, ...]) -> bool:
    name = os.path.basename(path)
    return any(fnmatch.fnmatch(name, p) or fnmatch.fnmatch(path, p) for p in patterns)


__all__ = ["Agent", "AgentError", "AgentMetrics", "SavedGeneration"]

"""Straight to Kafka with an outage spool: the files are read on into a disk spool while the cluster is
out of reach, and the spool is replayed in transactions that write the lines and their positions together.

Enabled by ``agent.state.dir`` in direct mode (``<state.dir>/spool``, the format of outage_spool.py:
one fsynced, CRC'd batch per hand-off holding the lines, each with its sourceId, generation and end
offset, then one state record per source, the position its files resume from after those lines).

Modes of the loop:

* **live** (no outage, nothing spooled): as shipper.py, one transaction per commit point.
* **outage**: a transaction that could not commit (a timeout, an abortable or fatal error) rewinds its
  sources to the positions last known safe and the loop goes on reading, each commit point handing its
  lines and states to the spool (fsynced) instead of a transaction; the positions move on once the
  batch is on disk, so finished files are let go. Every ``PROBE_INTERVAL_S`` the cluster is probed;
  when it answers, a new producer's ``init_transactions()`` settles the old transaction (committed if
  the coordinator had prepared it, aborted otherwise), and the positions topic is read again
  (read_committed): the *baseline*, what Kafka really holds. Its outcome need not be known: the
  baseline says.
* **replay** (the spool holds lines): batches are read back oldest first and written in transactions
  with their state records, then released. The files wait meanwhile (their descriptors are held, and
  their positions are past what the spool holds), so each source's lines reach the topic in
  (generation, end) order and the spool drains at full speed. When it is empty the loop is live again.

Invariant (what makes a kill -9 anywhere lose nothing and repeat nothing): a source's committed
position record (the baseline) determines which lines of it are in the topic: line ``(g, end)`` is
there iff ``(g, end) <= progress(position)`` (:func:`progress`: the first unfinished generation and
its offset, or ``(next_generation, 0)`` when every generation is finished). Therefore

1. a replay transaction writes a spooled line iff it is above the baseline of its source, and a
   spooled state record iff its progress is not below it (the baseline never goes back, even when the
   spool holds lines that a transaction settled after the outage had committed after all);
2. a spool batch is released only after the transaction that wrote what it held above the baseline
   has committed (or when nothing of it was above), so every line not in the topic is in the spool
   or still in a file beyond a durable position;
3. positions move on (finished files are let go) only after a commit or after the batch holding their
   lines and states is fsynced;
4. the baseline is read only with no transaction of this agent open, after ``init_transactions()`` (at
   start, or by the producer that replaced the failed one); every failure makes it unknown again;
5. live transactions (which filter nothing) resume only when the spool is empty and no source's
   position in memory is below its baseline (the case of a commit that timed out, was rewound, and
   then settled as committed): until then lines go through the spool, where rule 1 filters them.

At start, with the cluster, the topic's positions (read_committed after ``init_transactions()``) are
the baseline, and each source resumes from the newest of that, the newest state record in the spool
and the local positions file. A kill during spooling can tear only the batch being written (cut at
open, with its state records, so its lines are read again from the file); a kill during replay
leaves an open transaction that the next ``init_transactions()`` aborts, and the spool, released only
below committed transactions, is replayed again with what the baseline holds filtered out.

A restart while the cluster is out of reach does not wait for it: each source resumes from the newer
of the local positions file (``<state.dir>/positions.json``, local_positions.py) and its newest spooled
state, in outage mode (lines to the spool). The file is at or behind what is committed or spooled,
with the generation numbering never behind (it is rewritten before a hand-off carries a generation it
does not know), so reading from it loses nothing and numbers every file as before; what it re-reads
that the topic already holds is spooled and left out by rule 1 once the baseline is read (rules 4
and 5 as after any outage: the first probe that reaches the cluster also checks the topics; a
missing one is reported and the lines stay spooled until it exists). Without
that file (first start, or an agent of an older version) a restart waits for the cluster, since the
positions of sources not in the spool are only in the topic then. An empty positions topic found at
start (deleted by hand) replays the whole spool.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from tidelog.agent import positions, state_file
from tidelog.agent.config import AgentConfig
from tidelog.agent.files import Generation, Source
from tidelog.agent.lines import Line
from tidelog.agent.local_positions import LocalPositions
from tidelog.agent.outage_spool import Handoff, OutageSpool, Pending, handoff_of, open_spool
from tidelog.agent.positions import PositionsError, SavedSource
from tidelog.agent.shipper import Agent, AgentError, record_headers
from tidelog.clients.transactional import send
from tidelog.common.errors import KafkaError as TidelogKafkaError

log = logging.getLogger(__name__)

PROBE_INTERVAL_S = 2.0  # how often the cluster is probed during an outage
COMMIT_WAIT_S = 10.0  # a commit not done by then (or by transaction.timeout.ms if shorter): an outage
SETTLE_WAIT_S = 5.0  # one attempt at the new producer's init_transactions() once the cluster answers
REPLAY_BATCH_BYTES = 4 << 20
REPLAY_LOG_INTERVAL_S = 5.0
SPOOL_BATCH_BYTES = 4 << 20  # a spooling window is handed over once it holds this much
NOTHING = (-1, -1)
Progress = tuple[int, int]


def progress(saved: SavedSource) -> Progress:
    """Where a position's shipped lines end: every line ``(g, end) <= progress`` of the source is shipped.

    Lines are read oldest generation first, so generations before the first one listed are finished
    (or lost), and later listed ones have not been read past their start."""
    if saved.generations:
        first = min(saved.generations, key=lambda g: g.number)
        return first.number, first.offset
    return saved.next_generation, 0


def newer(candidate: SavedSource, than: SavedSource) -> bool:
    return (progress(candidate), candidate.next_generation) > (progress(than), than.next_generation)


@dataclass
class ReplayPlan:
    """What one replay transaction writes, and where it leaves the baseline and the spool."""

    lines: list[tuple[str, str, Pending, int]]  # topic, source id, line, time read (epoch ms)
    states: dict[str, str]  # source id -> position record to write
    baseline: dict[str, Progress]  # the baseline once the transaction commits
    end: int  # the spool offset after the batches taken


def plan_replay(batches: Iterable[Handoff], baseline: Mapping[str, Progress], max_records: int, start: int
                ) -> ReplayPlan:
    """Whole batches, oldest first, until ``max_records`` lines are taken: the lines above their source's
    baseline, and the state records not below it (rules 1 and 2 of the module docstring)."""
    plan = ReplayPlan([], {}, dict(baseline), start)
    moved = plan.baseline
    for handoff in batches:
        for source_id, (topic, spooled) in handoff.lines.items():
            for line in spooled:
                if (line.generation, line.end) > moved.get(source_id, NOTHING):
                    plan.lines.append((topic, source_id, line, handoff.time_ms))
                    moved[source_id] = (line.generation, line.end)
        for source_id, state in handoff.states.items():
            reached = progress(positions.from_json(json.loads(state))[1])
            if reached >= moved.get(source_id, NOTHING):
                plan.states[source_id] = state
                moved[source_id] = reached
        plan.end = handoff.next_offset
        if len(plan.lines) >= max_records:
            break
    return plan


def _committed_progress(source: Source) -> Progress:
    """:func:`progress` of the source's last committed (or spooled) position, from memory."""
    if source.generations:
        first = min(source.generations, key=lambda g: g.number)
        return first.number, first.committed
    return source.next_generation, 0


class SpoolingAgent(Agent):
    """Direct mode with an outage spool in ``<agent.state.dir>/spool`` (module docstring)."""

    def __init__(self, config: AgentConfig, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(config, clock)
        if config.state_dir is None or not config.spool_max_bytes or config.gateway is not None:
            raise AgentError("the Kafka-mode spool needs [kafka], agent.state.dir and agent.spool.max.bytes > 0")
        self.state_dir = config.state_dir
        self.spool: OutageSpool | None = None
        self._spooling_window = False  # the open commit window hands its lines to the spool
        self._pending: dict[Source, list[Pending]] = {}
        self._outage = False
        self._settle = False  # the producer is new: init_transactions() first
        self._baseline: dict[str, Progress] | None = None  # None: unknown until read again
        self._behind: set[str] = set()  # sources rewound below the baseline: read into the spool till past it
        self._probe_at = 0.0
        self._spool_retry_at = 0.0  # after a spool write the disk refused
        # A transaction not committed within transaction.timeout.ms is aborted by the coordinator anyway.
        self._commit_wait = min(COMMIT_WAIT_S, int(config.kafka.get("transaction.timeout.ms", 60_000)) / 1000)
        self._window_bytes = 0
        self._replay_logged_at = -REPLAY_LOG_INTERVAL_S
        self.local = LocalPositions(self.state_dir, config.agent_id)
        self._topics_checked = False
        self._topics_problem = ""  # the last reason the topics could not be checked, said once

    # ---- start: the spool at once, the cluster in run() (a stop signal may come while waiting) -----

    def start(self) -> None:
        self.spool = open_spool(self.state_dir, self.config.spool_max_bytes)
        self.metrics.spool_bytes = self.spool.size_bytes

    def run(self, stop: threading.Event) -> None:
        self._stop = stop
        try:
            connected = self._connect(stop)
        except BaseException:
            self.close()
            raise
        if not connected:
            self.close()
            return
        super().run(stop)

    def _connect(self, stop: threading.Event) -> bool:
        """Reach the cluster and do what Agent.start does, with the spool's and the local file's states;
        or, while it is out of reach and the local positions file exists, start without it (outage
        mode, local_positions.py). False if stopped while waiting."""
        local = self._read_local()
        # A probe only: its connection errors are said once below, not by librdkafka every backoff.
        settings: dict[str, Any] = {k: v for k, v in self.config.kafka.items()
                                    if k in positions.consumer_settings(self.config.kafka)}
        admin = AdminClient({**settings, "log_level": 0})
        waiting = False
        while True:
            try:
                admin.list_topics(timeout=3)
                break
            except KafkaException as exc:
                reason = exc.args[0].str()
            if local is not None:
                self._start_offline(local, reason)
                return True
            if not waiting:
                log.warning("the cluster is out of reach (%s) and there is no local positions file (%s) yet; the "
                            "files wait until it answers%s", reason, self.local.path,
                            ", the spool is kept" if self._backlog else "")
                waiting = True
            if stop.wait(1.0):
                return False
        self._check_topics()
        self._topics_checked = True
        self._producer = self._new_producer()
        committed = positions.load(self.config.kafka, self.config.positions_topic, self.config.agent_id)
        self._baseline = {source_id: progress(saved) for source_id, saved in committed.items()}
        resume = self._resume(committed, local or {})
        if self._backlog:
            log.info("spool: %d records (lines and positions) from before the restart, written first",
                     self.spool_records)
        self._restore(resume)
        self._reset_local()
        return True

    def _read_local(self) -> dict[str, SavedSource] | None:
        """The local positions file's states; None when there is none or it is unreadable."""
        if not self.local.exists():
            return None
        try:
            return self.local.load()
        except state_file.StateFileError as exc:
            log.warning("%s; it is rewritten once the cluster answers", exc)
            return None

    def _resume(self, *known: Mapping[str, SavedSource]) -> dict[str, SavedSource]:
        """Per source, the newest of the ``known`` positions and the spool's newest state record."""
        assert self.spool is not None
        spooled = {source_id: positions.from_json(json.loads(state))[1]
                   for source_id, state in self.spool.states().items()}
        resume: dict[str, SavedSource] = {}
        for found in (*known, spooled):
            for source_id, saved in found.items():
                if source_id not in resume or newer(saved, resume[source_id]):
                    resume[source_id] = saved
        return resume

    def _start_offline(self, local: dict[str, SavedSource], reason: str) -> None:
        """The cluster is out of reach at start: resume from the local file and the spool, lines to the
        spool; the first probe that reaches the cluster checks the topics, settles the previous
        incarnation's transaction and reads the baseline (as after an outage)."""
        log.warning("the cluster is out of reach (%s); the files are read on into the spool from the local "
                    "positions (%s, %d sources)%s", reason, self.local.path, len(local),
                    f" behind {self.spool_records} spooled records from before the restart" if self._backlog else "")
        self._producer = self._make_producer()
        self._settle = True
        self._outage = True
        self._baseline = None
        self._probe_at = self.clock() + PROBE_INTERVAL_S
        self._restore(self._resume(local))
        self._reset_local()

    def _reset_local(self) -> None:
        try:
            self.local.reset(self._written, self.clock())
        except OSError as exc:
            raise AgentError(f"cannot write {self.local.path}: {exc}") from None

    @property
    def spool_records(self) -> int:
        """Records (lines and positions) in the spool not yet written to the topic."""
        assert self.spool is not None
        return self.spool.spool.end_offset - self.spool.replayed

    @property
    def _backlog(self) -> bool:
        return self.spool is not None and self.spool.backlog

    # ---- reading: into a transaction, or into the spool --------------------------------------------

    def step(self, now: float) -> int:
        assert self.spool is not None
        self.local.tick(now)
        if self._outage:
            if now >= self._probe_at:
                self._probe()
        elif self._backlog:
            # The spool first, at full speed; the files wait meanwhile (their descriptors are held).
            return self._replay(now) if self._txn_started is None else 0
        if now < self._spool_retry_at or (self._backlog and self.spool.full):
            return 0  # the files wait
        return super().step(now)

    def _begin(self, now: float) -> None:
        if self._txn_started is None:
            self._spooling_window = self._outage or self._backlog or bool(self._behind)
            if not self._spooling_window:
                super()._begin(now)
                return
            self._txn_started = now
            self._txn_records = 0
            self._window_bytes = 0

    def _produce(self, source: Source, lines: list[tuple[Generation, Line]]) -> None:
        if not self._spooling_window:
            super()._produce(source, lines)
            return
        pending = self._pending.setdefault(source, [])
        for gen, line in lines:
            pending.append(Pending.of(gen.number, line))
            self._window_bytes += len(line.value)
            if line.original_size:
                self.metrics.truncated_lines_total += 1
        self.metrics.bytes_total += sum(len(line.value) for _, line in lines)
        self._txn_records += len(lines)
        self.metrics.lines_total += len(lines)
        if self._window_bytes >= SPOOL_BATCH_BYTES:  # one spool batch stays well within a segment
            self._txn_records = max(self._txn_records, self.config.transaction_max_records)

    # ---- commit points -----------------------------------------------------------------------------

    def commit(self, stop: threading.Event) -> bool:
        """A hand-off (a transaction or a spool batch), the local file rewritten first when a generation
        it does not know is in it (local_positions.py), and lazily after it."""
        handing = list(self._dirty)
        try:
            self.local.before_handoff(handing, self.clock())
        except OSError as exc:
            self._abandon(f"cannot write {self.local.path} ({exc})")
            return False
        done = self._to_spool() if self._spooling_window else super().commit(stop)
        if done:
            self.local.after_handoff(((source, self._written[source.source_id]) for source in handing),
                                     self.clock())
        return done

    def _abandon(self, reason: str) -> None:
        """The open window must not be handed over: abort it, rewind its sources, the files wait a second."""
        log.warning("%s; reading again from the files in a second", reason)
        self.metrics.aborts_total += 1
        if self._txn_started is not None and not self._spooling_window:
            assert self._producer is not None
            try:
                self._producer.abort_transaction(self._commit_wait)
            except KafkaException as exc:
                self._begin_outage(exc.args[0])  # rewinds and clears the window too
        for source in self._dirty:
            source.rewind()
        self._dirty.clear()
        self._pending.clear()
        self._txn_started = None
        self._spool_retry_at = self.clock() + 1.0

    def _commit_transaction(self, stop: threading.Event) -> bool:
        """One attempt: not done in COMMIT_WAIT_S, the outage begins (the outcome is settled later)."""
        producer = self._producer
        assert producer is not None
        try:
            producer.commit_transaction(self._commit_wait)
        except KafkaException as exc:
            self._begin_outage(exc.args[0])
            return False
        return True

    def _failed(self, error: KafkaError) -> None:
        self._begin_outage(error)

    def _begin_outage(self, error: KafkaError) -> None:
        """The open transaction failed: rewind its sources; lines go to the spool until the cluster answers.

        The producer is replaced: the new one's init_transactions() settles the old transaction (commits
        it if the coordinator had it prepared, aborts it otherwise) and starts from a clean epoch and
        sequence numbers, whatever state the outage left the old one in. Its outcome is not needed:
        the baseline read afterwards says what the topic holds."""
        self.metrics.aborts_total += 1
        self._count_fence(error)
        self._producer = self._make_producer()
        self._settle = True
        for source in self._dirty:
            source.rewind()
        self._dirty.clear()
        self._pending.clear()
        self._txn_started = None
        self._baseline = None
        self._probe_at = self.clock() + PROBE_INTERVAL_S
        if not self._outage:
            log.warning("transaction not committed (%s); lines go to the spool until the cluster answers",
                        error.str())
        self._outage = True

    def _to_spool(self) -> bool:
        """The window's lines and the dirty sources' states as one fsynced batch; positions move on.

        A write the disk refuses (full) rewinds the sources instead: the files keep the lines."""
        assert self.spool is not None
        handoff = handoff_of(self._dirty, self._state, self._pending, int(time.time() * 1000))
        try:
            self.spool.append(handoff)
        except (OSError, TidelogKafkaError) as exc:
            log.warning("spool: cannot write (%s); reading again from the files in a second", exc)
            for source in self._dirty:
                source.rewind()
            self._spool_retry_at = self.clock() + 1.0
            written = False
        else:
            for source in self._dirty:
                source.committed()
                self._written[source.source_id] = handoff.states[source.source_id]
                if source.source_id in self._behind and self._baseline is not None and \
                        _committed_progress(source) >= self._baseline.get(source.source_id, NOTHING):
                    self._behind.discard(source.source_id)
            self.metrics.transactions_total += 1
            written = True
        self._dirty.clear()
        self._pending.clear()
        self._txn_started = None
        self.metrics.spool_bytes = self.spool.size_bytes
        return written

    # ---- outage: probe, settle, read the baseline ----------------------------------------------------

    def _probe(self) -> None:
        self._probe_at = self.clock() + PROBE_INTERVAL_S
        producer = self._producer
        assert producer is not None
        producer.poll(0)  # its log lines and callbacks, queued while nothing else polls it
        try:
            producer.list_topics(self.config.positions_topic, timeout=1.0)
        except KafkaException:
            return
        if not self._topics_checked:  # started without the cluster
            try:
                self._check_topics()
            except AgentError as exc:  # the files are read on into the spool meanwhile
                if str(exc) != self._topics_problem:
                    log.warning("%s; the spool keeps the lines until then", exc)
                    self._topics_problem = str(exc)
                return
            self._topics_checked = True
        if not self._settle_transaction():
            return
        try:
            committed = positions.load(self.config.kafka, self.config.positions_topic, self.config.agent_id,
                                       timeout=10)
        except PositionsError as exc:
            log.info("the positions topic is not readable yet (%s)", exc)
            return
        self._baseline = {source_id: progress(saved) for source_id, saved in committed.items()}
        # A transaction settled as committed after its sources were rewound: their lines up to the
        # baseline are read again, and go through the spool, where replay leaves them out.
        self._behind = {source.source_id for source in self.sources.values()
                        if _committed_progress(source) < self._baseline.get(source.source_id, NOTHING)}
        self._outage = False
        assert self.spool is not None
        log.warning("the cluster answers again; %d spooled records (lines and positions) are written first",
                    self.spool_records)

    def _settle_transaction(self) -> bool:
        """One attempt at the new producer's init_transactions(); True when it can begin transactions."""
        producer = self._producer
        assert producer is not None
        if not self._settle:
            return True
        try:
            producer.init_transactions(SETTLE_WAIT_S)
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if not error.retriable():
                self._count_fence(error)
                log.warning("a new transactional producer after: %s", error.str())
                self._producer = self._make_producer()
            return False
        self._settle = False
        return True

    # ---- replay ------------------------------------------------------------------------------------

    def _replay(self, now: float) -> int:
        """Write spooled batches, oldest first, in transactions, for up to transaction.interval.ms; the
        number of spool records done (0: none, the loop may rest)."""
        assert self.spool is not None
        deadline = now + self.config.transaction_interval_ms / 1000
        before = self.spool.replayed
        while self._backlog and not self._outage and self.clock() <= deadline:
            self._replay_once()
        if not self._backlog and not self._outage:
            log.warning("spool: every spooled line is in the topic; lines go straight to it again")
        elif self._backlog and now >= self._replay_logged_at + REPLAY_LOG_INTERVAL_S:
            self._replay_logged_at = now
            log.info("spool: replaying, %d lines written again so far, %d records left",
                     self.metrics.replayed_lines_total, self.spool_records)
        return self.spool.replayed - before

    def _replay_once(self) -> None:
        """One transaction: whole batches up to transaction.max.records lines (at least one batch)."""
        spool, producer, baseline = self.spool, self._producer, self._baseline
        assert spool is not None and producer is not None and baseline is not None
        plan = plan_replay(spool.next_batches(REPLAY_BATCH_BYTES), baseline, self.config.transaction_max_records,
                           spool.replayed)
        lines, states = plan.lines, plan.states
        if lines or states:
            try:
                producer.begin_transaction()
                for topic, source_id, line, time_ms in lines:
                    key = source_id.encode()
                    send(producer, topic, line.value, key,
                         record_headers(key, line.generation, line.end, line.original_size), timestamp=time_ms)
                for source_id, state in states.items():
                    send(producer, self.config.positions_topic, state.encode(),
                         positions.key_of(self.config.agent_id, source_id))
                producer.commit_transaction(self._commit_wait)
            except KafkaException as exc:
                self._begin_outage(exc.args[0])
                return
            self.metrics.transactions_total += 1
            self.metrics.replayed_lines_total += len(lines)
        self._baseline = plan.baseline
        spool.replayed = plan.end
        spool.release(plan.end)
        self.metrics.spool_bytes = spool.size_bytes

    def close(self) -> None:
        super().close()
        self.local.after_handoff(((self.sources[source_id], state) for source_id, state in self._written.items()
                                  if source_id in self.sources), self.clock(), force=True)
        if self.spool is not None:
            self.spool.close()
            self.spool = None


__all__ = ["ReplayPlan", "SpoolingAgent", "newer", "plan_replay", "progress"]

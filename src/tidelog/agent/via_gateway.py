"""Gateway mode: the agent's loop writing through ``tidelog gateway`` instead of a Kafka producer.

The reading is the direct mode's (shipper.py, files.py); what changes is what a "transaction" is.
Lines read are kept per source; at each commit point every dirty source's lines are sent
(gateway_client.py: one chunk per line, ``sourceId = host:path``, seqno from the generation and the
line's end offset) until the gateway has answered for all of them, ``written`` or ``duplicate``;
only then do the source's positions move on (``Source.committed``).

Exactly once: the gateway writes a line iff its seqno is above the last one written for the source,
and keeps that in its cluster-side state, in the data's transaction. So the agent's own positions
need not be exact, only never ahead: they are saved to ``<state.dir>/positions.json``
(state_file.py) every ``gateway.positions.save.interval.ms`` and at a clean stop, from acknowledged
positions only. After a kill -9 the agent resumes from the last saved position, sends again what
followed, and the gateway answers ``duplicate`` for those lines.

What may never lag is the *numbering* of generations, since it is the seqno's high part: a file that
got generation 3 before a kill must get 3 again after it: numbered 2, its lines would rank below
those already written and be skipped as duplicates (lost). So before the first line of a new generation is
sent, the file is saved at once with that generation listed (its offset: what is acknowledged of
it, 0 at first), and a restart finds it again by inode and fingerprint like any saved generation. A gateway (or cluster) outage: the
request is retried with the same seqnos, and the files wait (as in direct mode); a gateway that
refuses for good (401, 404, 400) stops the agent with its message.

Outages, with a spool (``agent.spool.max.bytes`` > 0, the default): at the first failed write the
lines of every dirty source go to the outage spool (outage_spool.py) and reading goes on into it,
until it holds ``spool.max.bytes`` (then the files wait). Every ``retry`` the oldest spooled batch is
sent again; once the gateway takes the whole backlog, lines go straight to it again. Positions move on
when lines are spooled (the spool holds them, fsynced, with the sources' states), so a file rotated
and deleted during the outage, even with the agent restarted meanwhile, loses nothing. Without a spool,
the request is retried and the files wait.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable

from tidelog.agent import positions, state_file
from tidelog.agent.config import AgentConfig
from tidelog.agent.files import Generation, Source
from tidelog.agent.gateway_client import GatewayClient, GatewayRejected, Outcome
from tidelog.agent.lines import Line
from tidelog.agent.outage_spool import OutageSpool, Pending, handoff_of, open_spool
from tidelog.agent.shipper import Agent, AgentError
from tidelog.common.errors import KafkaError as TidelogKafkaError

log = logging.getLogger(__name__)
logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per request


class GatewayAgent(Agent):
    """Ships the files of ``config`` through the gateway of ``config.gateway`` (module docstring)."""

    def __init__(self, config: AgentConfig, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(config, clock)
        if config.gateway is None or config.state_dir is None:
            raise AgentError("gateway mode needs [gateway] and agent.state.dir")
        self.target = config.gateway
        self.state_dir = config.state_dir
        self.client = GatewayClient(config.gateway, config.host)
        self.spool: OutageSpool | None = None
        self._pending: dict[Source, list[Pending]] = {}
        self._acked: dict[str, str] = {}  # source id -> position record for the positions file (never ahead)
        self._saved_generations: dict[str, int] = {}  # source id -> next_generation in the file
        self._saved_at = clock()
        self._unsaved = False
        self._retry_at = 0.0  # when to send the spool's oldest batch again
        self._spool_stuck = False  # the last spool write failed (disk full)
        self._file_refused = False  # the last positions file write failed (disk full, read-only, EIO)
        self._generations_unsaved = False  # lines of a generation the file does not list wait in memory

    # ---- start -------------------------------------------------------------------------------------

    def start(self) -> None:
        try:
            saved, covered = state_file.load(self.state_dir, self.config.agent_id)
        except state_file.StateFileError as exc:
            raise AgentError(str(exc)) from None
        self._acked = {sid: positions.encode(self.config.agent_id, item).decode() for sid, item in saved.items()}
        if self.config.spool_max_bytes:
            self.spool = open_spool(self.state_dir, self.config.spool_max_bytes)
            self.spool.release(covered)
            for source_id, state in self.spool.states().items():  # newer than the file's (see outage_spool)
                saved[source_id] = positions.from_json(json.loads(state))[1]
            if self.spool.backlog:
                log.info("spool: %d bytes of lines from before the restart, sent first",
                         self.spool.size_bytes)
        self._saved_generations = {sid: item.next_generation for sid, item in saved.items()}
        self._restore(saved)

    # ---- reading -----------------------------------------------------------------------------------

    def step(self, now: float) -> int:
        if self.spool is not None and self.spool.backlog and now >= self._retry_at:
            self._replay(now)
        if (self._spool_stuck or self._generations_unsaved) and now >= self._retry_at:
            self._retry_at = now + 1.0
            self.commit(self._stop)  # the lines kept in memory: to the gateway, or to the spool again
        if self._generations_unsaved:
            return 0  # the files wait until the positions file can be written
        if self.spool is not None and (self._spool_stuck or (self.spool.backlog and self.spool.full)):
            return 0  # the files wait
        return super().step(now)

    def _begin(self, now: float) -> None:
        if self._txn_started is None:
            self._txn_started = now
            self._txn_records = 0

    def _produce(self, source: Source, lines: list[tuple[Generation, Line]]) -> None:
        pending = self._pending.setdefault(source, [])
        for gen, line in lines:
            pending.append(Pending.of(gen.number, line))
            self.metrics.bytes_total += len(line.value)
            if line.original_size:
                self.metrics.truncated_lines_total += 1
        self._txn_records += len(lines)
        self.metrics.lines_total += len(lines)

    # ---- commit points -----------------------------------------------------------------------------

    def commit(self, stop: threading.Event) -> bool:
        """Hand every dirty source's lines on: to the gateway, or behind a backlog into the spool."""
        if self.spool is not None and self.spool.backlog:
            self._to_spool()
        else:
            # A line of a generation the positions file does not list may not leave: after a crash its
            # generation number could be given again, and the gateway would skip new lines as duplicates.
            self._generations_unsaved = not self._save_new_generations()
            if self._generations_unsaved:
                self._txn_started = None
                return True  # the lines wait in memory; step() tries again every second
            for source in list(self._dirty):
                if not self._send(source, stop):
                    if self.spool is None:
                        return False  # stopped during an outage: these lines are read again at the next start
                    self._retry_at = self.clock() + self.client.retry_after
                    self._to_spool()
                    break
        self._txn_started = None
        self.metrics.transactions_total += 1
        self.metrics.replaced_lines_total = self.client.replaced_lines
        if self.clock() - self._saved_at >= self.target.positions_save_interval_ms / 1000:
            self.save_positions()
        return True

    def _send(self, source: Source, stop: threading.Event) -> bool:
        state = self._state(source)
        lines = self._pending.get(source, [])
        if lines:
            outcome = self._write(source.group.topic, source.source_id, source.path, lines, stop)
            if outcome is None:
                return False
        self._pending.pop(source, None)
        source.committed()
        self._written[source.source_id] = self._acked[source.source_id] = state
        self._dirty.discard(source)
        self._unsaved = True
        return True

    def _write(self, topic: str, source_id: str, path: str, lines: list[Pending], stop: threading.Event
               ) -> Outcome | None:
        try:
            outcome = self.client.write(topic, source_id, path, lines, stop, patient=self.spool is None)
        except GatewayRejected as exc:
            raise AgentError(str(exc)) from None
        if outcome is not None:
            self.metrics.duplicates_total += outcome.duplicates
            log.debug("%s: %d lines (%s..%s): %d written, %d duplicate", source_id, len(lines),
                      (lines[0].generation, lines[0].end), (lines[-1].generation, lines[-1].end),
                      outcome.written, outcome.duplicates)
        return outcome

    def _to_spool(self) -> None:
        """The dirty sources' lines and states into the spool, as one fsynced batch; positions move on.

        A write the disk refuses (full) keeps the lines in memory and the positions where they are;
        reading stops until a later write succeeds, as with a full spool."""
        assert self.spool is not None
        handoff = handoff_of(self._dirty, self._state, self._pending)
        try:
            self.spool.append(handoff)
        except (OSError, TidelogKafkaError) as exc:
            if not self._spool_stuck:
                log.warning("spool: cannot write (%s); the lines wait in memory and the files wait", exc)
            self._spool_stuck = True
            return
        if self._spool_stuck:
            log.warning("spool: written again")
            self._spool_stuck = False
        for source in self._dirty:
            self._pending.pop(source, None)
            source.committed()
            self._written[source.source_id] = handoff.states[source.source_id]
        self._dirty.clear()
        self.metrics.spool_bytes = self.spool.size_bytes

    def _replay(self, now: float) -> None:
        """Send the spool's batches again from the oldest, until one fails or the backlog is gone."""
        assert self.spool is not None
        never = threading.Event()
        deadline = now + self.config.transaction_interval_ms / 1000
        while self.spool.backlog and self.clock() <= deadline:
            for handoff in self.spool.next_batches(4 << 20):
                for source_id, (topic, lines) in handoff.lines.items():
                    source = self.sources.get(source_id)
                    path = source.path if source is not None else source_id.partition(":")[2]
                    if self._write(topic, source_id, path, lines, never) is None:
                        self._retry_at = self.clock() + self.client.retry_after
                        return  # sent again from this batch later: the gateway skips what it has
                self._acked.update(handoff.states)
                self.spool.replayed = handoff.next_offset
                self._unsaved = True
        if not self.spool.backlog:
            log.warning("spool: every spooled line is at the gateway; lines go straight to it again")
            self.save_positions()

    # ---- positions ---------------------------------------------------------------------------------

    def _save_new_generations(self) -> bool:
        """Save at once if a source is about to send lines of a generation the file does not list;
        False if the file could not be written (those lines must not leave yet)."""
        fresh = [source for source in self._dirty
                 if source.next_generation > self._saved_generations.get(source.source_id, 0)]
        if not fresh:
            return True
        for source in fresh:
            # Every generation not yet acknowledged to its end, at what is acknowledged of it.
            generations = [dataclasses.replace(gen.saved(), offset=gen.committed) for gen in source.generations]
            saved = positions.SavedSource(source.source_id, source.path, source.group.topic,
                                          source.next_generation, generations)
            self._acked[source.source_id] = positions.encode(self.config.agent_id, saved).decode()
        self._unsaved = True
        return self.save_positions()

    def save_positions(self) -> bool:
        """Write the positions file; then the spool below what it covers can go.

        A write the disk refuses (full, read-only, an I/O error) leaves the previous file, which is
        never ahead of the topic, so shipping goes on; it is tried again at the next save point
        (lines of new generations wait for it, see commit). False when refused."""
        if self._unsaved:
            covered = self.spool.replayed if self.spool is not None else 0
            try:
                state_file.save(self.state_dir, self._acked.values(), covered)
            except OSError as exc:
                if not self._file_refused:
                    log.warning("%s: cannot write the positions file (%s); it keeps older positions (a restart "
                                "sends those lines again, the gateway skips them) and lines of new files wait",
                                self.state_dir / state_file.FILE_NAME, exc)
                self._file_refused = True
                self.metrics.positions_write_failures_total += 1
                self._saved_at = self.clock()
                return False
            if self._file_refused:
                log.warning("%s: written again", self.state_dir / state_file.FILE_NAME)
                self._file_refused = False
            for source_id, state in self._acked.items():
                self._saved_generations[source_id] = int(json.loads(state)["next_generation"])
            self._unsaved = False
            if self.spool is not None:
                self.spool.release(covered)
                self.metrics.spool_bytes = self.spool.size_bytes
        self._saved_at = self.clock()
        return True

    def close(self) -> None:
        if self._unsaved:
            self.save_positions()
        for source in self.sources.values():
            source.close()
        if self.spool is not None:
            self.spool.close()
        self.client.close()

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
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable

from tidelog.agent import positions, state_file
from tidelog.agent.config import AgentConfig
from tidelog.agent.files import Generation, Source
from tidelog.agent.gateway_client import GatewayClient, GatewayRejected, Pending
from tidelog.agent.lines import Line
from tidelog.agent.shipper import Agent, AgentError

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
        self._pending: dict[Source, list[Pending]] = {}
        self._saved_at = clock()
        self._unsaved = False
        self._saved_generations: dict[str, int] = {}  # source id -> next_generation in the file

    def start(self) -> None:
        try:
            saved = state_file.load(self.state_dir, self.config.agent_id)
        except state_file.StateFileError as exc:
            raise AgentError(str(exc)) from None
        self._restore(saved)
        self._saved_generations = {source_id: item.next_generation for source_id, item in saved.items()}

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

    def commit(self, stop: threading.Event) -> bool:
        """Send every dirty source's lines; positions move on per source as the gateway acknowledges."""
        self._save_new_generations()
        for source in list(self._dirty):
            state = self._state(source)
            lines = self._pending.get(source, [])
            if lines:
                try:
                    outcome = self.client.write(source.group.topic, source.source_id, source.path, lines, stop)
                except GatewayRejected as exc:
                    raise AgentError(str(exc)) from None
                if outcome is None:
                    return False  # stopped during an outage: these lines are read again at the next start
                self.metrics.duplicates_total += outcome.duplicates
                log.debug("%s: %d lines (%s..%s): %d written, %d duplicate", source.source_id, len(lines),
                          (lines[0].generation, lines[0].end), (lines[-1].generation, lines[-1].end),
                          outcome.written, outcome.duplicates)
            self._pending.pop(source, None)
            source.committed()
            self._written[source.source_id] = state
            self._dirty.discard(source)
            self._unsaved = True
        self._txn_started = None
        self.metrics.transactions_total += 1
        self.metrics.replaced_lines_total = self.client.replaced_lines
        if self.clock() - self._saved_at >= self.target.positions_save_interval_ms / 1000:
            self.save_positions()
        return True

    def _save_new_generations(self) -> None:
        """Save at once if a source is about to send lines of a generation the file does not list."""
        fresh = [source for source in self._dirty
                 if source.next_generation > self._saved_generations.get(source.source_id, 0)]
        if not fresh:
            return
        for source in fresh:
            # Every generation not yet acknowledged to its end, at what is acknowledged of it.
            generations = [dataclasses.replace(gen.saved(), offset=gen.committed) for gen in source.generations]
            saved = positions.SavedSource(source.source_id, source.path, source.group.topic,
                                          source.next_generation, generations)
            self._written[source.source_id] = positions.encode(self.config.agent_id, saved).decode()
            self._saved_generations[source.source_id] = source.next_generation
        self._unsaved = True
        self.save_positions()

    def save_positions(self) -> None:
        if self._unsaved:
            state_file.save(self.state_dir, self._written.values())
            self._unsaved = False
        self._saved_at = self.clock()

    def close(self) -> None:
        if self._unsaved:
            self.save_positions()
        for source in self.sources.values():
            source.close()
        self.client.close()

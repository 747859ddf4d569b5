"""The agent's outage spool: lines read while the gateway or the cluster is out of reach, kept on disk.

Why: the files are a backlog only while they exist and while the agent holds them open. A file
rotated away and deleted during an outage, with the agent restarted before the gateway is back, is
gone; with the spool its lines were read in time and wait on disk, within ``agent.spool.max.bytes``.
Both modes use it: gateway mode (via_gateway.py) and straight to Kafka (kafka_spool.py, which states
its own invariant: there the committed positions, not the gateway, decide what is a duplicate).

Where and how: ``<agent.state.dir>/spool``, the LogProducer's spool (tidelog.clients.spool: tidelog's
segment format, a CRC-32C per batch, a torn tail cut at open, one process per folder by flock). Each
hand-off (one commit point of the agent) is **one batch**, fsynced, holding the lines and then one
*state record* per source they came from::

    line record:   topic = the file group's topic, key = sourceId, value = the line,
                   headers tidelog-generation, tidelog-end (decimal text), [tidelog-original-size]
    state record:  topic = "", key = sourceId, value = the source's position record (positions.py JSON),
                   header tidelog-agent-state

Every record of a batch has the batch's timestamp: when its lines were read (replayed lines keep it as
their CreateTime straight to Kafka).

A state record says where the source's files resume once its batch's lines are safe; the batch being
one CRC'd unit, the lines and their positions are kept together or not at all.

Invariants gateway mode keeps (via_gateway.py): the spool is a FIFO per source, so lines reach the
gateway in seqno order (the gateway would skip an older line sent after a newer one); while it holds
lines not yet replayed, newly read lines go behind them into the spool, never straight to the gateway.
The positions file records the spool offset below which every line was acknowledged and every state
is in the file (``spool``); the spool is released up to it only after that file is saved, so a restart
finds every position either in the file or in a state record of the spool still there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tidelog.agent.files import Source
from tidelog.agent.lines import Line
from tidelog.agent.shipper import AgentError
from tidelog.clients.errors import SpoolLockedError
from tidelog.clients.spool import Spool, SpooledRecord

HEADER_STATE = "tidelog-agent-state"
HEADER_GENERATION = "tidelog-generation"
HEADER_END = "tidelog-end"
HEADER_ORIGINAL_SIZE = "tidelog-original-size"


@dataclass(frozen=True, slots=True)
class Pending:
    """A line on its way: its generation, end offset, value and original size (0 when whole)."""

    generation: int
    end: int
    value: bytes
    original_size: int = 0

    @classmethod
    def of(cls, generation: int, line: Line) -> Pending:
        return cls(generation, line.end, line.value, line.original_size)


@dataclass
class Handoff:
    """What a commit point hands to the spool, or what one spool batch gives back."""

    lines: dict[str, tuple[str, list[Pending]]] = field(default_factory=dict)  # source id -> (topic, lines)
    states: dict[str, str] = field(default_factory=dict)  # source id -> position record (JSON)
    next_offset: int = 0  # the spool offset after this batch (read back only)
    time_ms: int = 0  # when the lines were read (epoch ms); 0: unknown


def handoff_of(dirty: Iterable[Source], state_of: Callable[[Source], str],
               pending: Mapping[Source, list[Pending]], time_ms: int = 0) -> Handoff:
    """The hand-off of a commit point: every dirty source's position record and its pending lines."""
    handoff = Handoff(time_ms=time_ms)
    for source in dirty:
        handoff.states[source.source_id] = state_of(source)
        lines = pending.get(source)
        if lines:
            handoff.lines[source.source_id] = (source.group.topic, lines)
    return handoff


def _line_record(source_id: str, topic: str, line: Pending, time_ms: int) -> SpooledRecord:
    headers: list[tuple[str, bytes | None]] = [(HEADER_GENERATION, b"%d" % line.generation),
                                               (HEADER_END, b"%d" % line.end)]
    if line.original_size:
        headers.append((HEADER_ORIGINAL_SIZE, b"%d" % line.original_size))
    return SpooledRecord(topic, line.value, source_id.encode(), tuple(headers), timestamp=time_ms)


def _read_back(records: Iterable[SpooledRecord], next_offset: int) -> Handoff:
    out = Handoff(next_offset=next_offset)
    for record in records:
        out.time_ms = out.time_ms or record.timestamp
        source_id = (record.key or b"").decode()
        headers = dict(record.headers)
        if HEADER_STATE in headers:
            out.states[source_id] = (record.value or b"").decode()
            continue
        original = headers.get(HEADER_ORIGINAL_SIZE)
        line = Pending(int(headers[HEADER_GENERATION] or b"0"), int(headers[HEADER_END] or b"0"),
                       record.value or b"", int(original) if original else 0)
        out.lines.setdefault(source_id, (record.topic, []))[1].append(line)
    return out


class OutageSpool:
    def __init__(self, folder: Path, max_bytes: int) -> None:
        self.spool = Spool(folder)
        self.max_bytes = max_bytes
        self.replayed = self.spool.start_offset  # the next record to send again

    @property
    def truncated_bytes(self) -> int:
        return self.spool.truncated_bytes

    @property
    def full(self) -> bool:
        return self.spool.size_bytes >= self.max_bytes

    @property
    def backlog(self) -> bool:
        """Lines handed over and not yet acknowledged by the gateway."""
        return self.replayed < self.spool.end_offset

    @property
    def size_bytes(self) -> int:
        return self.spool.size_bytes

    def append(self, handoff: Handoff) -> None:
        """One batch with the lines, then the states; fsynced before the positions move on."""
        stamp = handoff.time_ms or int(time.time() * 1000)
        records = [_line_record(source_id, topic, line, stamp)
                   for source_id, (topic, lines) in handoff.lines.items() for line in lines]
        records += [SpooledRecord("", state.encode(), source_id.encode(), ((HEADER_STATE, b"1"),), timestamp=stamp)
                    for source_id, state in handoff.states.items()]
        if records:
            self.spool.append(self.spool.encode(records))
            self.spool.sync()

    def next_batches(self, max_bytes: int) -> list[Handoff]:
        """Batches from the replay point on (at least one when there is a backlog)."""
        return [_read_back(batch.records, batch.next_offset)
                for batch in self.spool.read(self.replayed, max_bytes)]

    def states(self) -> dict[str, str]:
        """The newest state record per source among the batches still in the spool (for a restart)."""
        found: dict[str, str] = {}
        offset = self.spool.start_offset
        while offset < self.spool.end_offset:
            batches = self.spool.read(offset, 4 << 20)
            for batch in batches:
                found.update(_read_back(batch.records, batch.next_offset).states)
                offset = batch.next_offset
        return found

    def release(self, position: int) -> None:
        self.spool.release(position)
        self.replayed = max(self.replayed, self.spool.start_offset)

    def close(self) -> None:
        self.spool.close()


def open_spool(state_dir: Path, max_bytes: int) -> OutageSpool:
    """The agent's spool in ``state_dir/spool``: one agent at a time (an AgentError naming the folder
    otherwise), a torn tail from a crash cut and reported (its lines are read again from their files)."""
    try:
        spool = OutageSpool(state_dir / "spool", max_bytes)
    except SpoolLockedError:
        raise AgentError(f"{state_dir}/spool is in use by another agent: give each agent its own "
                         f"agent.state.dir") from None
    if spool.truncated_bytes:
        logging.getLogger(__name__).warning(
            "spool: a torn tail of %d bytes was cut (a crash while writing it); those lines are read again "
            "from their files", spool.truncated_bytes)
    return spool

"""Incremental fetch sessions (KIP-227), as Kafka's FetchManager keeps them.

A client that fetches the same partitions over and over can open a session: its first fetch (epoch 0)
lists every partition and gets a session id back; later fetches (epoch 1, 2, ...) list only what
changed (new fetch offsets, added partitions, forgotten ones), and the response carries only the
partitions that have something to say (records, an error, or a new high watermark, last stable offset
or log start offset). The rules on (session_id, epoch):

- epoch -1 (FINAL): close session ``session_id`` if any; this fetch is sessionless (full request and
  response, response session id 0). Forgotten topics are refused with INVALID_REQUEST.
- epoch 0 (INITIAL): close ``session_id`` if any; open a new session from this full request (if the
  cache is full and no session can be evicted, the fetch goes on sessionless).
- epoch n > 0: session ``session_id`` must exist (FETCH_SESSION_ID_NOT_FOUND) and expect epoch n
  (INVALID_FETCH_SESSION_EPOCH); the request's partitions are upserted, forgotten ones removed, and the
  expected epoch moves to n + 1.

Partitions are keyed by (topic name, partition) after the handler resolved topic ids. Pure data and
decisions; the fetch handler does the reading.
"""

from __future__ import annotations

import itertools
import random
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from tidelog.common.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_SLOTS = 1000
EVICTION_IDLE_MS = 120_000

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class SessionPartition:
    """What the client asked for and what it was last told about one partition."""

    fetch_offset: int
    max_bytes: int
    topic_id: object = None
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    replica_log_start: int = -1  # a follower's own log start, from its request (v5+); not session state


@dataclass(slots=True)
class FetchSession:
    session_id: int
    next_epoch: int
    partitions: OrderedDict[TopicPartition, SessionPartition]
    last_used_ms: int


@dataclass(slots=True)
class FetchContext:
    """One fetch's view: which partitions to read and which results to put in the response."""

    session: FetchSession | None
    partitions: list[tuple[TopicPartition, SessionPartition]]
    incremental: bool
    error: ErrorCode = ErrorCode.NONE
    unknown: list[TopicPartition] = field(default_factory=list)

    @property
    def response_session_id(self) -> int:
        return self.session.session_id if self.session is not None else 0

    def should_include(
        self, tp: TopicPartition, state: SessionPartition, *, has_records: bool, error: ErrorCode,
        high_watermark: int, last_stable_offset: int, log_start_offset: int,
    ) -> bool:
        """Record what the client is told; in an incremental fetch, leave out unchanged partitions."""
        changed = (
            has_records
            or error is not ErrorCode.NONE
            or state.high_watermark != high_watermark
            or state.last_stable_offset != last_stable_offset
            or state.log_start_offset != log_start_offset
        )
        state.high_watermark = high_watermark
        state.last_stable_offset = last_stable_offset
        state.log_start_offset = log_start_offset
        if self.session is not None and has_records:
            # Rotate partitions that returned data to the back so others get their turn next time.
            self.session.partitions.move_to_end(tp)
        return changed or not self.incremental


class FetchSessionCache:
    def __init__(self, max_slots: int = MAX_SLOTS) -> None:
        self.max_slots = max_slots
        self._sessions: dict[int, FetchSession] = {}
        self._ids = itertools.count(random.randint(1, 2**30))

    def __len__(self) -> int:
        return len(self._sessions)

    def new_context(
        self,
        session_id: int,
        epoch: int,
        requested: Iterable[tuple[TopicPartition, SessionPartition]],
        forgotten: Iterable[TopicPartition],
        now_ms: int,
    ) -> FetchContext:
        requested = list(requested)
        forgotten = list(forgotten)
        if epoch == FINAL_EPOCH:
            self._sessions.pop(session_id, None)
            if forgotten:
                return FetchContext(None, [], False, ErrorCode.INVALID_REQUEST)
            return FetchContext(None, requested, False)
        if epoch == INITIAL_EPOCH:
            self._sessions.pop(session_id, None)
            session = self._open(requested, now_ms)
            return FetchContext(session, requested, False)
        session = self._sessions.get(session_id)
        if session is None:
            return FetchContext(None, [], True, ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.next_epoch != epoch:
            return FetchContext(None, [], True, ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        for tp, state in requested:
            known = session.partitions.get(tp)
            if known is None:
                session.partitions[tp] = state
            else:
                known.fetch_offset = state.fetch_offset
                known.max_bytes = state.max_bytes
                known.topic_id = state.topic_id
        for tp in forgotten:
            session.partitions.pop(tp, None)
        session.next_epoch = 1 if epoch >= 2**31 - 1 else epoch + 1
        session.last_used_ms = now_ms
        return FetchContext(session, list(session.partitions.items()), True)

    def _open(self, requested: list[tuple[TopicPartition, SessionPartition]], now_ms: int) -> FetchSession | None:
        if len(self._sessions) >= self.max_slots and not self._evict_idle(now_ms):
            return None
        session_id = next(self._ids) % (2**31 - 1) or 1
        session = FetchSession(session_id, 1, OrderedDict(requested), now_ms)
        self._sessions[session_id] = session
        return session

    def _evict_idle(self, now_ms: int) -> bool:
        oldest = min(self._sessions.values(), key=lambda s: s.last_used_ms)
        if now_ms - oldest.last_used_ms < EVICTION_IDLE_MS:
            return False
        del self._sessions[oldest.session_id]
        return True

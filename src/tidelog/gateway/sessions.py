"""The pull-read sessions of one gateway instance: creation within limits, lookup, expiry.

Design (pull reads):

- A session = one consumer-group member (``reader.ReadSession``: a confluent-kafka Consumer on its own
  thread, ``cooperative-sticky``, ``read_committed``). Sessions of one group, on this instance or on
  others, or plain Kafka consumers of the group, share the partitions through the group protocol only,
  so this works against Apache Kafka too. A session lives on the instance that created it; its id is
  ``<that instance's advertised URL, base64url>.<random UUID>``, so another instance of the same
  deployment forwards the session's requests there (one hop, and only to a URL that is a member of
  the ownership group: an id is client input and must not make the gateway call arbitrary hosts).
- Limits: at most ``gateway.read.sessions.max`` sessions per instance (more gets 429 with
  ``Retry-After``), and a buffer of ``gateway.read.session.max.bytes`` each, so read memory is bounded
  by about three times their product (``reader``).
- Expiry: a session that has no request in progress and none for its ``timeoutMs`` (default
  ``gateway.read.session.timeout.ms``) is closed by a task that looks every ``SWEEP_S``: its consumer
  leaves the group, so its partitions go to the group's other readers at once, from the group's
  committed offsets. A long-poll in progress keeps its session alive. An explicit DELETE does the same.
- Only the principal that created a session (bearer token, ``tidelog.web.auth``) may use it; to any
  other it does not exist.

Event-loop only; opening and closing consumers run on worker threads.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator

from tidelog.gateway.config import GatewayConfig
from tidelog.gateway.read_model import SessionRequest
from tidelog.gateway.reader import ReadSession
from tidelog.observability.registry import MetricFamily, Registry

log = logging.getLogger(__name__)
SWEEP_S = 0.2
_BASE64URL = re.compile(r"[A-Za-z0-9_-]+")


def new_session_id(instance_url: str) -> str:
    return base64.urlsafe_b64encode(instance_url.encode()).decode().rstrip("=") + "." + uuid.uuid4().hex


def instance_of(session_id: str) -> str | None:
    """The URL of the instance that opened the session, as its id says (None if it says nothing)."""
    head, dot, _ = session_id.partition(".")
    if not dot or not _BASE64URL.fullmatch(head):
        return None
    try:
        return base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)).decode() or None
    except (binascii.Error, ValueError):
        return None


class UnknownSession(Exception):
    """No such session here: never created on this instance, expired, or deleted."""


class TooManySessions(Exception):
    """The instance holds ``gateway.read.sessions.max`` sessions."""


class Sessions:
    def __init__(self, config: GatewayConfig, registry: Registry) -> None:
        self.config = config
        self._sessions: dict[str, ReadSession] = {}
        self._opening = 0
        self._sweeper: asyncio.Task[None] | None = None
        self._expired = registry.counter("gateway_read_sessions_expired_total", "Read sessions closed because no "
                                         "request came within their timeout", ())
        self._records = registry.counter("gateway_records_read_total", "Records handed out to read sessions, by "
                                         "topic", ("topic",))
        registry.add_collector(self._collect)

    def start(self) -> None:
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    def interrupt(self) -> None:
        """The gateway is stopping: waiting long-polls answer now, so the listener drains in time."""
        for session in list(self._sessions.values()):
            session.interrupt()

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        sessions, self._sessions = list(self._sessions.values()), {}
        await asyncio.gather(*(asyncio.to_thread(s.close) for s in sessions))

    async def create(self, request: SessionRequest, principal: str) -> ReadSession:
        if len(self._sessions) + self._opening >= self.config.read_sessions_max:
            raise TooManySessions(f"this instance holds gateway.read.sessions.max={self.config.read_sessions_max} "
                                  "read sessions")
        session = ReadSession(new_session_id(self.config.url), request, self.config, self.config.read_session_max_bytes, principal)
        self._opening += 1
        try:
            await asyncio.to_thread(session.start)
        finally:
            self._opening -= 1
        self._sessions[session.id] = session
        log.info("read session %s opened: group %s, topics %s", session.id, request.group, list(request.topics))
        return session

    def get(self, session_id: str, principal: str) -> ReadSession:
        session = self._sessions.get(session_id)
        if session is None or session.principal != principal:
            raise UnknownSession(session_id)
        return session

    @contextlib.asynccontextmanager
    async def use(self, session_id: str, principal: str) -> AsyncIterator[ReadSession]:
        """The session, kept alive while the request runs (the timeout counts from the request's end)."""
        session = self.get(session_id, principal)
        session.active_requests += 1
        session.touch()
        try:
            yield session
        finally:
            session.active_requests -= 1
            session.touch()

    async def delete(self, session_id: str, principal: str) -> None:
        session = self.get(session_id, principal)
        del self._sessions[session_id]
        await asyncio.to_thread(session.close)
        log.info("read session %s deleted", session_id)

    def count_read(self, topic: str, records: int) -> None:
        self._records.inc((topic,), records)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_S)
            now = time.monotonic()
            expired = [s for s in self._sessions.values() if s.idle_s(now) * 1000 > s.request.timeout_ms]
            for session in expired:
                del self._sessions[session.id]
                self._expired.inc(())
                log.info("read session %s expired after %d ms without a request; its partitions go to the "
                         "group's other readers", session.id, session.request.timeout_ms)
            if expired:
                await asyncio.gather(*(asyncio.to_thread(s.close) for s in expired))

    def _collect(self) -> list[MetricFamily]:
        sessions = MetricFamily("gateway_read_sessions", "Open read sessions on this instance", "gauge", ())
        sessions.add((), len(self._sessions))
        buffered = MetricFamily("gateway_read_buffered_bytes", "Bytes read from the cluster that no poll has taken "
                                "yet, over all sessions", "gauge", ())
        buffered.add((), sum(s.buffered_bytes for s in list(self._sessions.values())))
        waiting = MetricFamily("gateway_read_polls_waiting", "Polls being answered or long-polling for records, "
                               "over all sessions", "gauge", ())
        waiting.add((), sum(1 for s in list(self._sessions.values()) if s.poll_lock.locked()))
        return [sessions, buffered, waiting]

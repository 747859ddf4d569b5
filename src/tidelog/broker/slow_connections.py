"""Slow-connection marking (Bilibili's ChannelMarker idea): score each connection by its recent requests.

Each Produce and Fetch a connection sends is timed from decode to answer, less the time it waited
on purpose (a long poll in the purgatory, ``RequestTimer.remote_s``): what the broker spent serving
it, disk waits included. A connection's score is the moving average of those times (the newest
weighing ``SCORE_WEIGHT``, so about the last ten requests count). A connection is marked **slow** when
its score passes ``tidelog.connection.slow.request.ms`` (after ``MIN_REQUESTS`` requests) and unmarked when it falls below half of it
(the gap keeps a connection near the line from flapping); 0 turns marking off.

What marking changes (``broker/disk_pools.py``): a slow connection's disk work, its reads whatever
their temperature and its produce fsyncs, runs on the slow lanes, bounded pools of their own
(``tidelog.slow.fetch.threads``, ``tidelog.slow.produce.threads``), instead of the log dirs' pools
and the event loop. Clients whose requests keep taking long (reading cold data off a slow disk,
fetching huge backlogs) then queue behind each other, not in front of everyone else.

Connections on the inter-broker listener are never scored: a follower's fetch is replication, and
holding it back would shrink the ISR. Admin and coordinator requests are not scored either, and
never run on these lanes.

Metric: ``tidelog_connections_slow`` (connections marked now), ``tidelog_connections_marked_slow_total``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tidelog.common.config import BrokerConfig
from tidelog.observability.registry import Registry

log = logging.getLogger(__name__)

SCORE_WEIGHT = 0.2
MIN_REQUESTS = 3  # a connection is judged on a few requests, not on its first alone


@dataclass(slots=True)
class ConnectionScore:
    """One connection's standing: the moving average of its data requests' service times."""

    score_ms: float = 0.0
    slow: bool = False
    requests: int = 0


class SlowMarker:
    def __init__(self, config: BrokerConfig, registry: Registry) -> None:
        self.config = config
        self.threshold_ms = 0.0
        self.marked = 0
        self.m_slow = registry.gauge("tidelog_connections_slow", "Connections marked slow now (their disk work runs on the slow lanes).")
        self.m_marked = registry.counter("tidelog_connections_marked_slow_total", "Times a connection was marked slow.")
        self.refresh()

    def refresh(self) -> None:
        self.threshold_ms = float(self.config.get_int("tidelog.connection.slow.request.ms"))

    def observe(self, score: ConnectionScore, service_s: float, peer: str = "", client_id: str | None = None) -> None:
        """After a data request: fold its service time into the connection's score; mark or unmark."""
        took_ms = service_s * 1000
        score.requests += 1
        score.score_ms = took_ms if score.requests == 1 else (1 - SCORE_WEIGHT) * score.score_ms + SCORE_WEIGHT * took_ms
        if self.threshold_ms <= 0:
            if score.slow:
                self.forget(score)
            return
        if not score.slow and score.score_ms > self.threshold_ms and score.requests >= MIN_REQUESTS:
            score.slow = True
            self.marked += 1
            self.m_slow.set((), self.marked)
            self.m_marked.inc(())
            log.info("connection %s (client %s) marked slow: its requests average %.0f ms", peer, client_id, score.score_ms)
        elif score.slow and score.score_ms < self.threshold_ms / 2:
            self.forget(score)

    def forget(self, score: ConnectionScore) -> None:
        """Unmark (its score fell, or the connection closed)."""
        if score.slow:
            score.slow = False
            self.marked -= 1
            self.m_slow.set((), self.marked)

"""Replication throttles: a byte-rate quota over sampled windows, and which replicas it applies to.

Kafka's KIP-73 design, as its ReplicationQuotaManager does it:

- One quota per broker and side: ``leader.replication.throttled.rate`` bounds the bytes this broker
  serves to throttled followers, ``follower.replication.throttled.rate`` the bytes its fetchers copy
  for throttled partitions. Both are dynamic broker configs (bytes/s, Long, ``2**63 - 1``: no limit).
- Which replicas: the topic configs ``leader.replication.throttled.replicas`` and
  ``follower.replication.throttled.replicas`` list ``partition:broker`` entries, or ``*`` for every
  replica. A broker applies an entry only when it names itself: the leader list names the brokers
  whose leader side is throttled, the follower list the brokers whose fetchers are.
- The measure: bytes recorded into ``samples`` windows of ``window_s`` each; the rate is the bytes
  still in the windows divided by the time they span. Above the bound the quota is *exceeded*: the
  leader leaves throttled partitions out of a follower's response (no data this round, the other
  partitions served), the follower leaves them out of its next request. Bytes are recorded after
  they are sent or copied, so the rate may pass the bound by one fetch's worth before it holds.
- Who is spared: on the leader side, a follower in the ISR (Kafka's ``shouldLeaderThrottle``); on the
  follower side, a partition whose last fetch found it caught up with the leader's high watermark
  (Kafka's ``fetchState.isReplicaInSync``). Bytes of every listed partition are recorded, spared or not,
  as Kafka records them, so in-sync traffic uses up the quota that catching-up replicas share.

One difference from Kafka, on purpose: Kafka's ``Rate`` divides by at least ``samples - 1`` windows
even when the quota has just started measuring, which lets a new move copy ten seconds' worth of bytes
at full speed before the throttle holds. Here the span is the time since the oldest window began, at
least one window, so a move is held to the rate from its first second.

Pure: the clock is a parameter (seconds, any monotonic origin).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

UNLIMITED = 2**63 - 1
DEFAULT_SAMPLES = 11      # replication.quota.window.num
DEFAULT_WINDOW_S = 1.0    # replication.quota.window.size.seconds


@dataclass(slots=True)
class _Window:
    start: float
    bytes: int = 0


@dataclass(slots=True)
class ReplicationQuota:
    """Bytes/s bound over ``samples`` windows of ``window_s`` seconds; ``UNLIMITED`` never throttles."""

    bound: int = UNLIMITED
    samples: int = DEFAULT_SAMPLES
    window_s: float = DEFAULT_WINDOW_S
    _windows: list[_Window] = field(default_factory=list)

    @property
    def limited(self) -> bool:
        return self.bound < UNLIMITED

    def set_bound(self, bound: int) -> None:
        """A new rate; the bytes already measured keep counting against it."""
        self.bound = bound

    def record(self, nbytes: int, now: float) -> None:
        if nbytes <= 0:
            return
        self._expire(now)
        if not self._windows or now - self._windows[-1].start >= self.window_s:
            self._windows.append(_Window(now))
        self._windows[-1].bytes += nbytes

    def rate(self, now: float) -> float:
        """Bytes per second over the retained windows (0 with nothing recorded)."""
        self._expire(now)
        if not self._windows:
            return 0.0
        total = sum(w.bytes for w in self._windows)
        return total / max(now - self._windows[0].start, self.window_s)

    def exceeded(self, now: float) -> bool:
        return self.limited and self.rate(now) > self.bound

    def delay(self, now: float) -> float:
        """Seconds until the measured rate falls back to the bound if nothing more is recorded."""
        if not self.exceeded(now):
            return 0.0
        total = sum(w.bytes for w in self._windows)
        # total / (t - start) == bound  →  t = start + total / bound (ignoring windows that expire first)
        return max(0.0, self._windows[0].start + total / self.bound - now)

    def _expire(self, now: float) -> None:
        horizon = now - self.samples * self.window_s
        while self._windows and self._windows[0].start <= horizon:
            self._windows.pop(0)


@dataclass(frozen=True, slots=True)
class ThrottledReplicas:
    """One topic's throttle list, as this broker applies it: every partition, or the ones named with it."""

    every: bool = False
    partitions: frozenset[int] = frozenset()

    def __contains__(self, partition: object) -> bool:
        return self.every or partition in self.partitions

    @classmethod
    def parse(cls, entries: Iterable[str], broker: int) -> ThrottledReplicas:
        """``*`` or ``partition:broker`` entries (validated already); those naming ``broker`` count."""
        every, mine = False, set()
        for entry in entries:
            entry = entry.strip()
            if entry == "*":
                every = True
                continue
            partition, _, node = entry.partition(":")
            if int(node) == broker:
                mine.add(int(partition))
        return cls(every, frozenset(mine))


NOTHING = ThrottledReplicas()


"""The circuit breaker: while moves run, the cluster's health decides whether they go on.

``Health`` is what the operator measured this tick: under-replicated partitions that are *not* being
moved (a partition in reassignment has replicas outside its ISR by design), partitions whose ISR lost
a member since the last tick (again excluding moving partitions), offline partitions, the highest
p99 produce latency any broker reports (Prometheus; ``None`` when no endpoint is known) and the
fullest log dir's usage ratio (DescribeLogDirs).

``judge`` answers ``ok``, ``pause`` (start no new moves; the in-flight ones finish under their
throttle) or ``cancel`` (cancel the in-flight moves as well, the cluster restores their replicas), with
every reason. Offline partitions and a disk past ``cancel_disk_ratio`` cancel; the rest pause. A
breaker pause lifts itself once the cluster has been healthy for ``resume_after_ms``; an operator's
pause does not.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BreakerLimits:
    max_under_replicated: int = 0
    max_isr_shrinks: int = 0
    max_p99_ms: float = 1_000.0
    pause_disk_ratio: float = 0.85
    cancel_disk_ratio: float = 0.95
    resume_after_ms: int = 60_000


@dataclass(frozen=True)
class Health:
    under_replicated: int = 0
    isr_shrinks: int = 0
    offline_partitions: int = 0
    p99_ms: float | None = None
    disk_ratio: float = 0.0
    examples: tuple[str, ...] = ()  # a few of the under-replicated partitions, for the reason
    offline_examples: tuple[str, ...] = ()  # a few of the offline partitions, likewise

    def to_json(self) -> dict[str, object]:
        return {"underReplicated": self.under_replicated, "isrShrinks": self.isr_shrinks,
                "offlinePartitions": self.offline_partitions, "p99Ms": self.p99_ms,
                "maxDiskRatio": round(self.disk_ratio, 4)}


@dataclass(frozen=True)
class Verdict:
    action: str  # "ok" | "pause" | "cancel"
    reasons: tuple[str, ...] = ()

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)


def judge(health: Health, limits: BreakerLimits) -> Verdict:
    cancel, pause = [], []
    if health.offline_partitions > 0:
        shown = f": {', '.join(health.offline_examples)}" if health.offline_examples else ""
        cancel.append(f"{health.offline_partitions} offline partitions{shown}")
    if health.disk_ratio > limits.cancel_disk_ratio:
        cancel.append(f"a log dir is {health.disk_ratio:.0%} full (cancel above {limits.cancel_disk_ratio:.0%})")
    elif health.disk_ratio > limits.pause_disk_ratio:
        pause.append(f"a log dir is {health.disk_ratio:.0%} full (pause above {limits.pause_disk_ratio:.0%})")
    if health.under_replicated > limits.max_under_replicated:
        shown = f": {', '.join(health.examples)}" if health.examples else ""
        pause.append(f"{health.under_replicated} under-replicated partitions outside the moves "
                     f"(limit {limits.max_under_replicated}){shown}")
    if health.isr_shrinks > limits.max_isr_shrinks:
        pause.append(f"{health.isr_shrinks} ISR shrinks since the last check (limit {limits.max_isr_shrinks})")
    if health.p99_ms is not None and health.p99_ms > limits.max_p99_ms:
        pause.append(f"produce p99 {health.p99_ms:.0f} ms (limit {limits.max_p99_ms:.0f} ms)")
    if cancel:
        return Verdict("cancel", tuple(cancel + pause))
    if pause:
        return Verdict("pause", tuple(pause))
    return Verdict("ok")


def isr_shrinks(before: dict[tuple[str, int], frozenset[int]], after: dict[tuple[str, int], frozenset[int]],
                replicas: dict[tuple[str, int], tuple[int, ...]], moving: set[tuple[str, int]]) -> int:
    """Partitions (not moving) whose ISR lost a member that is still one of their replicas between two
    looks (a replica a finished move removed is not a shrink)."""
    return sum(1 for k, isr in after.items() if k not in moving and k in before
               and (before[k] - isr) & set(replicas.get(k, ())))

"""Consumer lag evaluation with Burrow's rules: pure functions over a sliding window of samples.

A *window* is the last N samples of one group's committed offset on one partition, oldest first.
Each ``Sample`` holds the committed offset, the lag at that moment (log end offset minus committed
offset, never negative) and ``timestamp_ms``, the time the offset was (re)committed as far as the
sampler can tell (see ``sampler``: while a member of the group owns the partition, every poll counts
as a commit; once no member owns it, the time the offset last moved is carried forward).

``evaluate_partition(window, now_ms)`` returns one of the partition statuses, tried in this order:

1. the newest lag is 0 (or the window is empty): ``OK``; a consumer that is caught up is never in error;
2. the committed offset went backwards between two consecutive samples: ``REWIND``;
3. the time since the newest commit is longer than the window spans
   (``now - newest.timestamp > newest.timestamp - oldest.timestamp``): ``STOP`` (the consumer is gone);
4. if the lag is non-zero in every sample of the window:
   a. the offset is the same in every sample (the consumer commits but does not advance): ``STALL``;
   b. the lag never decreases from one sample to the next (it consumes, but slower than producers
      write): ``WARN``;
5. otherwise ``OK``.

These are Burrow's rules (its "consumer lag evaluation rules"), with one change of order: a rewind
is checked before the lag-is-sometimes-zero escape, so that a consumer that was caught up and then
moved its offset back is reported as rewinding rather than OK. Rules 3 and 4 need at least two
samples: a single sample is ``OK``. The sampler evaluates each window when it takes a sample (``now``
is the poll time), so a slow poll never makes a live consumer look stopped.

A group's status is its worst partition's, mapped as Burrow maps it: ``WARN`` stays ``WARN``, and
``STOP``, ``STALL`` and ``REWIND`` make the group ``ERR``. A group with no committed offsets is
``NOTFOUND``. ``complete`` is the fraction of the window filled (1.0 once N samples are held), the
same field Burrow reports, so alerting can ignore young windows.

Lag in seconds (``lag_seconds``) is measured from the timestamp of the first unconsumed record (the
record at the committed offset): how long that record has waited; 0 when there is no lag.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum


class Status(IntEnum):
    """Burrow's status constants, in its numeric order (a larger value is worse, up to ERR)."""

    NOTFOUND = 0
    OK = 1
    WARN = 2
    ERR = 3
    STOP = 4
    STALL = 5
    REWIND = 6


@dataclass(frozen=True)
class Sample:
    offset: int
    lag: int
    timestamp_ms: int
    observed_ms: int = 0  # when the sampler read it (Burrow's observedAt); 0: same as timestamp_ms


@dataclass(frozen=True)
class PartitionResult:
    topic: str
    partition: int
    status: Status
    window: tuple[Sample, ...]
    current_lag: int
    complete: float
    lag_seconds: float = 0.0
    owner: str = ""
    client_id: str = ""


@dataclass(frozen=True)
class GroupResult:
    group: str
    status: Status
    partitions: tuple[PartitionResult, ...]
    complete: float
    total_lag: int
    max_lag: PartitionResult | None


def evaluate_partition(window: Sequence[Sample], now_ms: int) -> Status:
    if not window or window[-1].lag == 0:
        return Status.OK
    if _rewound(window):
        return Status.REWIND
    if len(window) < 2:
        return Status.OK
    first, last = window[0], window[-1]
    if now_ms - last.timestamp_ms > last.timestamp_ms - first.timestamp_ms:
        return Status.STOP
    if any(sample.lag == 0 for sample in window):
        return Status.OK
    if all(sample.offset == first.offset for sample in window):
        return Status.STALL
    if all(later.lag >= earlier.lag for earlier, later in itertools.pairwise(window)):
        return Status.WARN
    return Status.OK


def _rewound(window: Sequence[Sample]) -> bool:
    return any(later.offset < earlier.offset for earlier, later in itertools.pairwise(window))


def group_status(statuses: Iterable[Status]) -> Status:
    """The worst partition status, with STOP/STALL/REWIND reported as ERR; NOTFOUND when empty."""
    worst = Status.NOTFOUND
    for status in statuses:
        worst = max(worst, Status.ERR if status > Status.ERR else status)
    return worst


def lag_seconds(lag: int, first_unconsumed_timestamp_ms: int | None, now_ms: int) -> float:
    """Seconds the first unconsumed record has waited (0 with no lag or no known timestamp)."""
    if lag <= 0 or first_unconsumed_timestamp_ms is None or first_unconsumed_timestamp_ms < 0:
        return 0.0
    return max(0.0, (now_ms - first_unconsumed_timestamp_ms) / 1000.0)


def evaluate_group(group: str, partitions: Sequence[PartitionResult]) -> GroupResult:
    """Combine evaluated partitions (``status`` already set) into the group's result."""
    status = group_status(p.status for p in partitions)
    complete = min((p.complete for p in partitions), default=0.0)
    max_lag = max(partitions, key=lambda p: p.current_lag, default=None)
    return GroupResult(group, status, tuple(partitions), complete, sum(p.current_lag for p in partitions), max_lag)

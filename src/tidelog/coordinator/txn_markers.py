"""Which partitions of a finishing transaction still need their COMMIT/ABORT marker, and where to.

Pure bookkeeping for the shell that sends markers (``broker/txn_markers.py``), after Kafka's
``TransactionMarkerChannelManager``: a transaction in PrepareCommit/PrepareAbort needs one marker in
every partition it touched, written by that partition's *current* leader. :class:`PendingMarkers`
holds the partitions not yet done; :meth:`PendingMarkers.destinations` groups them by leader as the
cluster image names it now; :meth:`PendingMarkers.record` takes each partition's answer.

An answer is one of (:func:`outcome`):

- **done**: the marker is in the partition's log and replicated (NONE), or the partition cannot
  take it and never will (the topic was deleted; INVALID_PRODUCER_EPOCH: a newer epoch of the
  producer already wrote there, so nothing of this epoch is open);
- **retry**: the leader moved or is not ready (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION,
  NOT_ENOUGH_REPLICAS(_AFTER_APPEND), REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR, the group coordinator
  of a ``__consumer_offsets`` partition still loading, the broker unreachable): asked again once the
  metadata may have moved;
- **fenced**: TRANSACTION_COORDINATOR_FENCED, the partition has seen markers from a newer
  coordinator epoch: this coordinator lost the transaction's partition and must stop; the new one
  finishes the transaction.

Anything else (a malformed marker: CORRUPT_MESSAGE, CLUSTER_AUTHORIZATION_FAILED...) is retried too,
logged by the shell: Kafka treats these as bugs that must not end a transaction half-written.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable

from tidelog.common.errors import ErrorCode

TopicPartition = tuple[str, int]
NO_LEADER = -1


class Outcome(enum.Enum):
    DONE = "done"
    RETRY = "retry"
    FENCED = "fenced"


_DONE = frozenset({ErrorCode.NONE, ErrorCode.INVALID_PRODUCER_EPOCH})
_FENCED = frozenset({ErrorCode.TRANSACTION_COORDINATOR_FENCED})


def outcome(error: ErrorCode) -> Outcome:
    if error in _DONE:
        return Outcome.DONE
    if error in _FENCED:
        return Outcome.FENCED
    return Outcome.RETRY


class PendingMarkers:
    """The partitions of one transaction still without their marker."""

    def __init__(self, partitions: Iterable[TopicPartition]) -> None:
        self.pending: set[TopicPartition] = set(partitions)
        self.fenced = False
        self.last_errors: dict[TopicPartition, ErrorCode] = {}

    @property
    def finished(self) -> bool:
        return self.fenced or not self.pending

    def destinations(self, leader_of: Callable[[TopicPartition], int | None]) -> dict[int, list[TopicPartition]]:
        """Pending partitions by the broker leading them now. ``leader_of`` answers None for a
        partition that no longer exists (it is done: nobody will read a marker there) and
        ``NO_LEADER`` for one without a leader (it waits)."""
        out: dict[int, list[TopicPartition]] = {}
        for tp in sorted(self.pending):
            leader = leader_of(tp)
            if leader is None:
                self.pending.discard(tp)
            elif leader != NO_LEADER:
                out.setdefault(leader, []).append(tp)
        return out

    def record(self, tp: TopicPartition, error: ErrorCode) -> Outcome:
        result = outcome(error)
        if result is Outcome.DONE:
            self.pending.discard(tp)
            self.last_errors.pop(tp, None)
        elif result is Outcome.FENCED:
            self.fenced = True
        else:
            self.last_errors[tp] = error
        return result

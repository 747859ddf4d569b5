"""Nearest-replica reads (KIP-392): which replica a consumer should fetch a partition from.

Pure. The leader answers a consumer's Fetch (v11+, ``rack_id`` set) with a *preferred read replica*
when ``replica.selector.class`` is Kafka's ``RackAwareReplicaSelector``; the rules are that class's
and ``ReplicaManager.findPreferredReadReplica``'s:

- Candidates are the leader and the followers in the committed ISR that hold the consumer's fetch
  offset, as the leader last saw them: their log end offset has reached it and their log start offset
  is not above it (retention or DeleteRecords may have removed it on a follower before the leader).
  Any other follower could only answer OFFSET_OUT_OF_RANGE. A log start the leader has not learnt yet
  (-1: the follower fetched with a version before 5) does not exclude it, as in Kafka.
- No client rack, or no candidate in the client's rack: the leader.
- The leader in the client's rack: the leader.
- Else the most caught-up candidate of that rack: highest log end offset, then the shortest time since
  it was last caught up, then (tidelog's tie-break, so the answer is reproducible) the lowest id.

The leader itself is never sent back as a preferred read replica: -1 means "keep reading here".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

LEADER = -1


@dataclass(frozen=True, slots=True)
class ReplicaView:
    node_id: int
    rack: str | None
    log_end_offset: int
    since_caught_up_ms: int  # 0 for the leader
    log_start_offset: int = -1  # -1: not known


def select_read_replica(client_rack: str | None, leader: ReplicaView, followers: Sequence[ReplicaView], fetch_offset: int) -> int:
    """The node id the consumer should fetch from instead of the leader, or LEADER (-1)."""
    if not client_rack:
        return LEADER
    if leader.rack == client_rack:
        return LEADER
    near = [f for f in followers
            if f.rack == client_rack and f.log_start_offset <= fetch_offset <= f.log_end_offset]
    if not near:
        return LEADER
    best = max(near, key=lambda f: (f.log_end_offset, -f.since_caught_up_ms, -f.node_id))
    return best.node_id

"""The leader's view of one partition: follower progress, the ISR and the high watermark.

Pure: fed the follower fetches, the leader's own appends and a clock (``now_ms``), it answers what
changed (a new high watermark) and what to propose (an ISR change to write to the metadata store).
No I/O, no asyncio; ``replication.manager`` is the shell that does what it says.

Kafka's rules, as this module keeps them:

- A follower's log end offset (LEO) is the offset it fetches from: a fetch at offset N says it holds
  everything below N. LEOs of followers that have not fetched since this leadership began are
  unknown (-1). Its log start offset is the one its fetch carries (Fetch v5+), kept for
  nearest-replica reads only.
- Caught up: a fetch at or past the leader's LEO at that moment means the follower was caught up
  *now*; a fetch at or past the leader's LEO *of the follower's previous fetch* means it was caught
  up at that previous fetch. ``last_caught_up_ms`` remembers the latest such moment.
- Shrink: an ISR follower not caught up for ``replica.lag.time.max.ms`` is proposed for removal.
- Expand: a follower outside the ISR whose LEO reached the high watermark and the start offset of this
  leader's epoch is proposed for addition.
- The high watermark is the minimum LEO over the *maximal* ISR (the committed ISR plus a pending
  addition, and a pending removal still counting until it is committed), never moves back, and never
  passes the leader's own LEO. An ISR change takes effect only when the store confirmed it
  (``isr_committed``); until then the old ISR still bounds the high watermark, so a shrink can never
  let an acks=all write through on fewer replicas than the store knows.
- One proposal at a time, as Kafka's AlterPartition: while one is in flight nothing else is proposed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

UNKNOWN = -1


@dataclass(slots=True)
class FollowerProgress:
    leo: int = UNKNOWN
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    leader_leo_at_last_fetch: int = UNKNOWN
    log_start: int = UNKNOWN


@dataclass(slots=True)
class IsrProposal:
    """An ISR to write to the store (compare-and-set on ``partition_epoch``)."""

    isr: tuple[int, ...]
    partition_epoch: int


@dataclass(slots=True)
class LeaderState:
    node_id: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    high_watermark: int
    epoch_start_offset: int  # the leader's LEO when it became leader in this epoch
    lag_time_max_ms: int
    followers: dict[int, FollowerProgress] = field(default_factory=dict)
    pending: IsrProposal | None = None

    @classmethod
    def become_leader(
        cls, node_id: int, leader_epoch: int, partition_epoch: int, replicas: tuple[int, ...], isr: tuple[int, ...],
        leo: int, high_watermark: int, now_ms: int, lag_time_max_ms: int,
    ) -> LeaderState:
        state = cls(node_id, leader_epoch, partition_epoch, replicas, isr, min(high_watermark, leo), leo, lag_time_max_ms)
        for replica in replicas:
            if replica != node_id:
                # ISR members get a full lag window to fetch before they can be shrunk away (Kafka does the same).
                state.followers[replica] = FollowerProgress(last_caught_up_ms=now_ms if replica in isr else 0)
        return state

    # -- what the leader knows -------------------------------------------------------------------

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        if self.pending is None:
            return self.isr
        return tuple(dict.fromkeys(self.isr + self.pending.isr))

    def in_sync_count(self) -> int:
        """ISR size for min.insync.replicas checks: the committed ISR, whatever is pending."""
        return len(self.isr)

    def _candidate_hw(self, leader_leo: int) -> int:
        low = leader_leo
        for replica in self.maximal_isr:
            if replica == self.node_id:
                continue
            progress = self.followers.get(replica)
            if progress is None or progress.leo == UNKNOWN:
                return self.high_watermark  # an ISR member we have not heard from holds it back
            low = min(low, progress.leo)
        return low

    def _advance_hw(self, leader_leo: int) -> int | None:
        candidate = min(self._candidate_hw(leader_leo), leader_leo)
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            return candidate
        return None

    def in_sync_followers(self, now_ms: int) -> list[tuple[int, int, int, int]]:
        """(follower, its log end offset, ms since it was last caught up, its log start offset or -1) for
        each committed ISR follower heard from in this leadership: the candidates for nearest-replica reads."""
        found = []
        for replica in self.isr:
            progress = self.followers.get(replica)
            if replica != self.node_id and progress is not None and progress.leo != UNKNOWN:
                found.append((replica, progress.leo, max(0, now_ms - progress.last_caught_up_ms), progress.log_start))
        return found

    # -- events ------------------------------------------------------------------------------------

    def on_append(self, leader_leo: int) -> int | None:
        """The leader appended; the new high watermark if it moved (an ISR of the leader alone)."""
        return self._advance_hw(leader_leo)

    def on_follower_fetch(self, replica: int, fetch_offset: int, leader_leo: int, now_ms: int,
                          log_start: int = UNKNOWN) -> tuple[int | None, IsrProposal | None]:
        """A follower fetched at ``fetch_offset`` (its log starting at ``log_start``): (new high watermark
        or None, ISR expansion or None)."""
        progress = self.followers.setdefault(replica, FollowerProgress())
        progress.log_start = log_start
        if fetch_offset >= leader_leo:
            progress.last_caught_up_ms = now_ms
        elif progress.leader_leo_at_last_fetch != UNKNOWN and fetch_offset >= progress.leader_leo_at_last_fetch:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        progress.leo = min(fetch_offset, leader_leo)
        progress.last_fetch_ms = now_ms
        progress.leader_leo_at_last_fetch = leader_leo
        new_hw = self._advance_hw(leader_leo)
        return new_hw, self._maybe_expand(replica, progress)

    def _maybe_expand(self, replica: int, progress: FollowerProgress) -> IsrProposal | None:
        if self.pending is not None or replica in self.isr or replica not in self.replicas:
            return None
        if progress.leo < self.high_watermark or progress.leo < self.epoch_start_offset:
            return None
        ordered = tuple(r for r in self.replicas if r in self.isr or r == replica)
        self.pending = IsrProposal(ordered, self.partition_epoch)
        return self.pending

    def check_lagging(self, now_ms: int) -> IsrProposal | None:
        """Followers out of sync for longer than the lag limit: an ISR shrink to propose, or None."""
        if self.pending is not None:
            return None
        lagging = {
            r for r in self.isr
            if r != self.node_id and now_ms - self.followers.get(r, FollowerProgress()).last_caught_up_ms > self.lag_time_max_ms
        }
        if not lagging:
            return None
        self.pending = IsrProposal(tuple(r for r in self.isr if r not in lagging), self.partition_epoch)
        return self.pending

    def isr_committed(self, isr: tuple[int, ...], partition_epoch: int, leader_leo: int) -> int | None:
        """The store holds ``isr`` at ``partition_epoch`` now; the new high watermark if it moved.

        A commit older than the state's is ignored: the leader's own ISR write can be confirmed after
        the store's watch already delivered a later change (the controller ending a move drops a
        replica). Applying it would bring back an ISR member that no longer fetches, and the high
        watermark would wait for it (and every shrink be proposed on the stale epoch, and lose)."""
        if partition_epoch < self.partition_epoch:
            return None
        self.isr = isr
        self.partition_epoch = partition_epoch
        self.pending = None
        return self._advance_hw(leader_leo)

    def proposal_failed(self) -> None:
        """The compare-and-set lost (someone else changed the partition): propose again later."""
        self.pending = None

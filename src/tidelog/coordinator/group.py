"""One classic consumer group: its members, its state, the protocol it agreed on.

States and the transitions the coordinator makes (Kafka's ``ClassicGroupState``)::

    Empty ──join──▶ PreparingRebalance ──all joined / timeout──▶ CompletingRebalance
      ▲                 ▲        │                                   │
      │                 │        └─ nobody left ─▶ Empty             │ leader's SyncGroup written
      │                 └── join / leave / expiry ── Stable ◀────────┘
      └── (any state) ──▶ Dead   when the group is deleted (its tombstone replayed)

Empty: no member; offsets may exist (a "simple" group has never had members nor a protocol type).
PreparingRebalance: members are (re)joining; their JoinGroup requests are parked until everyone known
has rejoined or the rebalance timeout expires. CompletingRebalance: JoinGroup answered, waiting for
the leader's assignment in SyncGroup. Stable: assignment handed out; members heartbeat.

The group holds *who is parked where* as waiter ids (``Member.awaiting_join``/``awaiting_sync``): the
coordinator answers a parked request by emitting ``(waiter, result)``; it never holds futures.
"""

from __future__ import annotations

import enum
import struct
from collections import Counter
from dataclasses import dataclass, field

from tidelog.common.errors import ErrorCode
from tidelog.coordinator.messages import JoinedMember, Protocol
from tidelog.coordinator.records import GroupMetadataValue, MemberMetadata

CONSUMER_PROTOCOL_TYPE = "consumer"


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_S = GroupState
VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE}),
    _S.PREPARING_REBALANCE: frozenset({_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY}),
    _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
    _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
    _S.DEAD: frozenset(GroupState),
}


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[Protocol, ...]
    assignment: bytes = b""
    awaiting_join: int | None = None
    awaiting_sync: int | None = None
    # Joined but not yet answered with a generation: its session timer is the new-member join timeout
    # (it has no member id to heartbeat with), and waiting does not count as being alive.
    is_new: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def metadata(self, protocol: str | None) -> bytes:
        for p in self.protocols:
            if p.name == protocol:
                return p.metadata
        return b""

    def matches(self, protocols: tuple[Protocol, ...]) -> bool:
        return protocols == self.protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among ``candidates``."""
        for p in self.protocols:
            if p.name in candidates:
                return p.name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def has_satisfied_heartbeat(self) -> bool:
        """A known member parked in JoinGroup or SyncGroup is alive by definition."""
        if self.is_new:
            return False
        return self.awaiting_join is not None or self.awaiting_sync is not None


class InvalidTransition(RuntimeError):
    """A state change the group state machine does not allow (a coordinator bug)."""


@dataclass
class ClassicGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    current_state_timestamp: int | None = None
    previous_state: GroupState | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    pending_join: set[str] = field(default_factory=set)
    pending_sync: set[str] = field(default_factory=set)
    new_member_added: bool = False
    subscribed_topics: frozenset[str] | None = None
    _supported: Counter[str] = field(default_factory=Counter)

    # -- queries -----------------------------------------------------------------------------------

    def is_state(self, *states: GroupState) -> bool:
        return self.state in states

    @property
    def is_empty(self) -> bool:
        return self.state is GroupState.EMPTY

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    def is_pending(self, member_id: str) -> bool:
        return member_id in self.pending_join

    @property
    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join is not None)

    def all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_join

    def validate_member(self, member_id: str, instance_id: str | None) -> ErrorCode:
        """UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID when the request does not come from a current member."""
        if instance_id is not None:
            existing = self.static_members.get(instance_id)
            if existing is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if existing != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        return ErrorCode.NONE if member_id in self.members else ErrorCode.UNKNOWN_MEMBER_ID

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    @property
    def uses_consumer_protocol(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def is_subscribed_to(self, topic: str) -> bool:
        if self.subscribed_topics is None:
            return self.uses_consumer_protocol
        return topic in self.subscribed_topics

    def supports_protocols(self, protocol_type: str, names: set[str]) -> bool:
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(names)
        return self.protocol_type == protocol_type and any(
            self._supported[name] == len(self.members) for name in names
        )

    def select_protocol(self) -> str:
        """The protocol every member supports that most members prefer (Kafka's vote)."""
        if not self.members:
            raise InvalidTransition(f"group {self.group_id}: no member to select a protocol")
        candidates = {name for name, count in self._supported.items() if count == len(self.members)}
        votes = Counter(m.vote(candidates) for m in self.members.values())
        return max(votes.items(), key=lambda item: item[1])[0]

    def joined_members(self) -> tuple[JoinedMember, ...]:
        """What the leader's JoinGroup response lists: every member with its chosen-protocol metadata."""
        return tuple(
            JoinedMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        )

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if m.awaiting_join is None]

    # -- changes -----------------------------------------------------------------------------------

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS[state]:
            raise InvalidTransition(f"group {self.group_id}: {self.state.value} → {state.value}")
        self.previous_state = self.state
        self.state = state
        self.current_state_timestamp = now_ms

    def add(self, member: Member) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise InvalidTransition(f"instance {member.group_instance_id} is already in {self.group_id}")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self._supported.update(p.name for p in member.protocols)
        self.pending_join.discard(member.member_id)

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._supported.subtract(p.name for p in member.protocols)
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_join.discard(member_id)
        self.pending_sync.discard(member_id)
        return member

    def update_protocols(self, member: Member, protocols: tuple[Protocol, ...]) -> None:
        self._supported.subtract(p.name for p in member.protocols)
        member.protocols = protocols
        self._supported.update(p.name for p in protocols)

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> tuple[Member, Member]:
        """Give the instance's seat (assignment, timeouts, leadership) to ``new_id``; return (old, new)."""
        old = self.members.pop(old_id)
        new = Member(
            new_id, old.group_instance_id, old.client_id, old.client_host, old.rebalance_timeout_ms,
            old.session_timeout_ms, old.protocol_type, old.protocols, old.assignment,
        )
        self.members[new_id] = new
        if self.is_leader(old_id):
            self.leader_id = new_id
        self.static_members[instance_id] = new_id
        return old, new

    def elect_joined_leader(self) -> bool:
        """Make sure the leader is a member that rejoined; False when nobody has."""
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].awaiting_join is not None:
            return True
        for member in self.members.values():
            if member.awaiting_join is not None:
                self.leader_id = member.member_id
                return True
        return False

    def init_next_generation(self, now_ms: int) -> None:
        self.generation += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.EMPTY, now_ms)
        self.pending_sync.clear()

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        """The union of the members' subscriptions when they speak the consumer protocol, else None."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            parsed = subscription_topics(member.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics.update(parsed)
        return frozenset(topics)

    # -- persistence -------------------------------------------------------------------------------

    def to_value(self, assignments: dict[str, bytes] | None = None) -> GroupMetadataValue:
        """The GroupMetadataValue of the group now, with ``assignments`` replacing the members' own."""
        members = tuple(
            MemberMetadata(
                m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                m.session_timeout_ms, m.metadata(self.protocol_name),
                assignments.get(m.member_id, b"") if assignments is not None else m.assignment,
            )
            for m in self.members.values()
        )
        return GroupMetadataValue(
            self.protocol_type or "", self.generation, self.protocol_name, self.leader_id,
            -1 if self.current_state_timestamp is None else self.current_state_timestamp, members,
        )

    @classmethod
    def from_value(cls, group_id: str, value: GroupMetadataValue) -> ClassicGroup:
        """The group as a freshly loaded coordinator sees it: Stable with its members, or Empty."""
        group = cls(
            group_id,
            state=GroupState.STABLE if value.members else GroupState.EMPTY,
            generation=value.generation,
            protocol_type=value.protocol_type or None,
            protocol_name=value.protocol,
            leader_id=value.leader,
            current_state_timestamp=None if value.current_state_timestamp < 0 else value.current_state_timestamp,
        )
        for m in value.members:
            protocols = (Protocol(value.protocol or "", m.subscription),)
            group.add(Member(
                m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout,
                m.session_timeout, value.protocol_type, protocols, m.assignment,
            ))
        group.leader_id = value.leader if value.leader in group.members else group.leader_id
        group.subscribed_topics = group.compute_subscribed_topics()
        return group


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def subscription_topics(metadata: bytes) -> list[str] | None:
    """Topics of a ConsumerProtocolSubscription (any version: they all start ``version int16,
    topics [string]``); None when the bytes are not one."""
    try:
        pos = 2
        (count,) = _I32.unpack_from(metadata, pos)
        pos += 4
        if count < 0:
            return None
        topics = []
        for _ in range(count):
            (length,) = _I16.unpack_from(metadata, pos)
            pos += 2
            if length < 0 or pos + length > len(metadata):
                return None
            topics.append(metadata[pos : pos + length].decode())
            pos += length
        return topics
    except (struct.error, UnicodeDecodeError):
        return None

"""KIP-848 consumer groups (``group.protocol=consumer``): the group, its members, and the heartbeat.

Theory of operation. A member talks to the coordinator with one API, ConsumerGroupHeartbeat, saying
what it subscribes to and (when it changed) which partitions it owns. The coordinator keeps three
levels of epoch:

- the **group epoch** goes up whenever what the assignment depends on changes: a member joins or
  leaves, a subscription or an assignor choice changes, a subscribed topic's partition count changes
  (tracked as ``metadata_hash`` over the subscribed topics' ids and partition counts);
- the **assignment epoch** is the group epoch the **target assignment** was computed for. The
  target is computed at once by the server-side assignor (``assignors.py``) whenever the group epoch
  moves past it, so the two are equal after every call;
- each member's **member epoch** is the assignment epoch it has reconciled to.

Reconciliation, per member, one step per heartbeat (Kafka's member states)::

    STABLE (epoch == assignment epoch, owns its target)
      │ target changed
      ▼
    partitions it owns that are not in its target? ──yes──▶ UNREVOKED_PARTITIONS: it keeps the
      │ no                                                   others, must give those up first;
      │                                                      epoch unchanged. Once a heartbeat
      ▼                                                      reports them gone (or the rebalance
    epoch := assignment epoch; it gets every target          timeout fences it), continue ▼
    partition no other member still owns ──some still owned──▶ UNRELEASED_PARTITIONS (gets them on
      │                                                        a later heartbeat, once released)
      ▼
    STABLE

so a partition is never given to a member while another still owns it (owning = assigned or
pending revocation). A heartbeat from epoch ``e`` is accepted when ``e`` is the member's epoch, or
its previous epoch with owned partitions within what it is assigned (the answer that bumped it was
lost); anything else is FENCED_MEMBER_EPOCH. A member that stops heartbeating for its session
timeout (``group.consumer.session.timeout.ms``) is removed; one that does not revoke within its
rebalance timeout is fenced and removed.

Durability follows STYLE.md: every change is a record (``consumer_group_records.py``), and the group
changes only by :meth:`ConsumerGroup.apply`. A heartbeat builds its records, applies them at once (so
the answer reflects them) and queues them for ``__consumer_offsets``; replaying the topic at start-up
applies the same records to an empty coordinator and rebuilds the same groups. Timers and sessions
are not durable: loading starts a fresh session for every member.

Static membership (``group.instance.id``): a member leaving with epoch -2 keeps its assignment and
its place until its session times out; a member joining with the same instance id takes that place
(same assignment and epoch, no rebalance). An instance id still held by a member that did not leave
is refused with UNRELEASED_INSTANCE_ID.

Topic regexes (``SubscribedTopicRegex``, ``topic_regex.py``): a member subscribes to its topic names
and to every topic whose whole name its regex matches (RE2 syntax, as Kafka's RE2/J). The regex is
resolved against the cluster's topics at every heartbeat (each distinct regex once per change of the
topic set: ``_regex_topics``), so a topic created or deleted later changes the subscribed set, the
metadata hash and so the group epoch at the next heartbeat; Kafka resolves at most every 10 s. An
empty regex clears it (librdkafka sends one when subscribing by name); null leaves it as it was. A
regex that does not compile is INVALID_REGULAR_EXPRESSION. With ACLs, the matches are filtered by
the DESCRIBE permission of the member whose heartbeat resolved them (``topic_visible``), and that
filter is kept for resolutions no heartbeat brings (a session timing out): Kafka, too, resolves a
group's regexes with the context of the member whose heartbeat asked for it.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from tidelog.common.errors import ErrorCode
from tidelog.coordinator import assignors
from tidelog.coordinator.consumer_group_records import (
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    CONSUMER_GROUP_MEMBER_METADATA,
    CONSUMER_GROUP_METADATA,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
    ConsumerGroupRecord,
    CurrentMemberAssignment,
    GroupMetadata,
    MemberMetadata,
    TargetAssignmentMember,
    TargetAssignmentMetadata,
    TopicPartitions,
    current_assignment,
    group_metadata,
    member_metadata,
    target_member,
    target_metadata,
)
from tidelog.coordinator.group import ClassicGroup
from tidelog.coordinator.records import CoordinatorRecord
from tidelog.coordinator.timers import Timers
from tidelog.coordinator.topic_regex import InvalidTopicRegex, compile_topic_regex, topics_matching


class GroupHost(Protocol):
    """What the consumer-group manager needs of the coordinator's shared state (``state.CoordinatorState``):
    the group tables (a group id names a classic group or a consumer group, never both), the timers,
    the clock, member ids, and the log writes. A protocol, so this module does not import ``state``."""

    groups: dict[str, ClassicGroup]
    consumer_groups: dict[str, ConsumerGroup]
    timers: Timers
    now: int
    new_id: Callable[[], str]

    def check(self, group_id: str | None) -> ErrorCode: ...

    def partition_of(self, group_id: str) -> int: ...

    def remove_group(self, group_id: str) -> None: ...

    def write(self, group_id: str, records: list[CoordinatorRecord],
              on_done: Callable[[ErrorCode], None] | None) -> None: ...

log = logging.getLogger(__name__)

CONSUMER_GROUP_TYPE = "consumer"
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2

# Member states, as Kafka numbers them in CurrentMemberAssignment records.
STABLE = 0
UNREVOKED_PARTITIONS = 1
UNRELEASED_PARTITIONS = 2

Assignment = dict[uuid.UUID, frozenset[int]]
TopicFilter = Callable[[str], bool]
TopicsView = Callable[[], Mapping[str, tuple[uuid.UUID, int]]]
"""The cluster's topics now: name → (topic id, partition count)."""


def _no_topics() -> Mapping[str, tuple[uuid.UUID, int]]:
    return {}


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    """The ``group.consumer.*`` broker settings."""

    session_timeout_ms: int = 45_000
    min_session_timeout_ms: int = 45_000
    max_session_timeout_ms: int = 60_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 2**31 - 1
    assignors: tuple[str, ...] = (assignors.UNIFORM, assignors.RANGE)


@dataclass(frozen=True, slots=True)
class ConsumerGroupHeartbeat:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: TopicPartitions | None = None
    client_id: str = ""
    client_host: str = ""
    generates_member_id: bool = True  # v0 clients may join with an empty member id: we pick one
    # With ACLs: may this member DESCRIBE the topic? Regex matches it may not are left out.
    topic_visible: TopicFilter | None = None


@dataclass(frozen=True, slots=True)
class ConsumerGroupHeartbeatResult:
    error: ErrorCode
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: TopicPartitions | None = None


def to_topic_partitions(assignment: Mapping[uuid.UUID, frozenset[int]]) -> TopicPartitions:
    return tuple((t, tuple(sorted(ps))) for t, ps in sorted(assignment.items()) if ps)


def from_topic_partitions(value: TopicPartitions) -> Assignment:
    out: Assignment = {}
    for topic_id, partitions in value:
        out[topic_id] = out.get(topic_id, frozenset()) | frozenset(partitions)
    return {t: ps for t, ps in out.items() if ps}


def _pairs(assignment: Mapping[uuid.UUID, frozenset[int]]) -> set[tuple[uuid.UUID, int]]:
    return {(t, p) for t, ps in assignment.items() for p in ps}


def _from_pairs(pairs: set[tuple[uuid.UUID, int]]) -> Assignment:
    out: dict[uuid.UUID, set[int]] = {}
    for t, p in pairs:
        out.setdefault(t, set()).add(p)
    return {t: frozenset(ps) for t, ps in out.items()}


# ========================================================================================== the group


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: int = STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)

    def metadata(self) -> MemberMetadata:
        return MemberMetadata(self.instance_id, self.rack_id, self.client_id, self.client_host,
                              self.subscribed_topic_names, self.subscribed_topic_regex,
                              self.rebalance_timeout_ms, self.server_assignor)

    def current(self) -> CurrentMemberAssignment:
        return CurrentMemberAssignment(self.member_epoch, self.previous_member_epoch, self.state,
                                       to_topic_partitions(self.assigned), to_topic_partitions(self.pending_revocation))


class ConsumerGroup:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.epoch = 0
        self.metadata_hash = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.target: dict[str, Assignment] = {}

    @property
    def state(self) -> str:
        """Kafka's names: Empty, Assigning, Reconciling, Stable."""
        if not self.members:
            return "Empty"
        if self.assignment_epoch < self.epoch:
            return "Assigning"
        for m in self.members.values():
            if m.member_epoch != self.assignment_epoch or m.state != STABLE:
                return "Reconciling"
        return "Stable"

    def owners(self) -> dict[tuple[uuid.UUID, int], str]:
        """Who owns each partition now: assigned to a member, or still to be revoked by it."""
        out = {}
        for m in self.members.values():
            for tp in _pairs(m.assigned) | _pairs(m.pending_revocation):
                out[tp] = m.member_id
        return out

    def member_by_instance(self, instance_id: str) -> ConsumerMember | None:
        for m in self.members.values():
            if m.instance_id == instance_id:
                return m
        return None

    def preferred_assignor(self, default: str) -> str:
        """The assignor most members ask for (ties: by name), else ``default``."""
        votes: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor:
                votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
        if not votes:
            return default
        return min(votes, key=lambda name: (-votes[name], name))

    # ------------------------------------------------------------------------------------ replay

    def apply(self, record: ConsumerGroupRecord) -> None:
        """Change the group as ``record`` says (the only way it changes)."""
        key, value = record.key, record.value
        if key.kind == CONSUMER_GROUP_METADATA:
            if isinstance(value, GroupMetadata):
                self.epoch, self.metadata_hash = value.epoch, value.metadata_hash
            return
        if key.kind == CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
            if isinstance(value, TargetAssignmentMetadata):
                self.assignment_epoch = value.assignment_epoch
            return
        member_id = getattr(key, "member_id", "")
        if key.kind == CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
            if isinstance(value, TargetAssignmentMember):
                self.target[member_id] = from_topic_partitions(value.partitions)
            else:
                self.target.pop(member_id, None)
        elif key.kind == CONSUMER_GROUP_MEMBER_METADATA:
            if isinstance(value, MemberMetadata):
                self._apply_member(self.members.setdefault(member_id, ConsumerMember(member_id)), value)
            else:
                self.members.pop(member_id, None)
        elif key.kind == CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT and isinstance(value, CurrentMemberAssignment):
            member = self.members.setdefault(member_id, ConsumerMember(member_id))
            member.member_epoch, member.previous_member_epoch = value.member_epoch, value.previous_member_epoch
            member.state = value.state
            member.assigned = from_topic_partitions(value.assigned)
            member.pending_revocation = from_topic_partitions(value.pending_revocation)

    @staticmethod
    def _apply_member(member: ConsumerMember, value: MemberMetadata) -> None:
        member.instance_id, member.rack_id = value.instance_id, value.rack_id
        member.client_id, member.client_host = value.client_id, value.client_host
        member.subscribed_topic_names = value.subscribed_topic_names
        member.subscribed_topic_regex = value.subscribed_topic_regex
        member.rebalance_timeout_ms = value.rebalance_timeout_ms
        member.server_assignor = value.server_assignor


def metadata_hash(topics: Mapping[str, tuple[uuid.UUID, int]], names: set[str]) -> int:
    """A signed 64-bit digest of the subscribed topics' names, ids and partition counts (0 for none)."""
    present = sorted(n for n in names if n in topics)
    if not present:
        return 0
    h = hashlib.blake2b(digest_size=8)
    for name in present:
        topic_id, count = topics[name]
        h.update(f"{name}\0{topic_id}\0{count}\0".encode())
    return int.from_bytes(h.digest(), "big", signed=True) or 1


# ==================================================================================== the heartbeat


class _Call:
    """Records of one decision, applied to the group as they are made."""

    def __init__(self, group: ConsumerGroup) -> None:
        self.group = group
        self.records: list[ConsumerGroupRecord] = []

    def add(self, record: ConsumerGroupRecord) -> None:
        self.group.apply(record)
        self.records.append(record)


class ConsumerGroupManager:
    def __init__(self, state: GroupHost, config: ConsumerGroupConfig | None = None,
                 topics: TopicsView = _no_topics) -> None:
        self.state = state
        self.config = config or ConsumerGroupConfig()
        self.topics = topics
        # Per-group overrides of the session timeout and heartbeat interval (GROUP resource configs
        # consumer.session.timeout.ms / consumer.heartbeat.interval.ms), set by the broker.
        self.group_timeouts: dict[str, tuple[int | None, int | None]] = {}
        # (group, regex) -> (the topic names it was resolved against, the names it matched, the filter)
        self._regexes: dict[tuple[str, str], tuple[frozenset[str], frozenset[str], TopicFilter | None]] = {}

    @property
    def groups(self) -> dict[str, ConsumerGroup]:
        return self.state.consumer_groups

    def set_group_timeouts(self, group_id: str, session_timeout_ms: int | None, heartbeat_interval_ms: int | None) -> None:
        """A group's own session timeout and heartbeat interval (None: the broker's); they apply from
        each member's next heartbeat."""
        if session_timeout_ms is None and heartbeat_interval_ms is None:
            self.group_timeouts.pop(group_id, None)
        else:
            self.group_timeouts[group_id] = (session_timeout_ms, heartbeat_interval_ms)

    def session_timeout_ms(self, group_id: str) -> int:
        own = self.group_timeouts.get(group_id, (None, None))[0]
        return self.config.session_timeout_ms if own is None else own

    def heartbeat_interval_ms(self, group_id: str) -> int:
        own = self.group_timeouts.get(group_id, (None, None))[1]
        return self.config.heartbeat_interval_ms if own is None else own

    # ------------------------------------------------------------------------------ subscriptions

    def _subscribed(self, group: ConsumerGroup, member: ConsumerMember, topics: Mapping[str, object],
                    visible: TopicFilter | None) -> set[str]:
        """The topics ``member`` subscribes to now: its names, and what its regex matches in ``topics``."""
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            names |= self._regex_topics(group.group_id, member.subscribed_topic_regex, topics, visible)
        return names

    def _regex_topics(self, group_id: str, regex: str, topics: Mapping[str, object],
                      visible: TopicFilter | None) -> frozenset[str]:
        """What ``regex`` matches in ``topics`` and ``visible`` lets through (when None, the last filter
        a heartbeat gave for this group's regex). The regex is matched again only when the set of topic
        names changed; the filter is asked each time, about the matches only."""
        key = (group_id, regex)
        cached = self._regexes.get(key)
        if cached is not None and cached[0] == topics.keys():
            names, matched = cached[0], cached[1]
        else:
            names, matched = frozenset(topics), topics_matching(regex, topics)
        if visible is None and cached is not None:
            visible = cached[2]
        if len(self._regexes) >= 4096 and key not in self._regexes:
            self._regexes.clear()
        self._regexes[key] = (names, matched, visible)
        return matched if visible is None else frozenset(name for name in matched if visible(name))

    # ------------------------------------------------------------------------------ validation

    def _validate(self, req: ConsumerGroupHeartbeat) -> tuple[ErrorCode, str | None]:
        if not req.group_id:
            return ErrorCode.INVALID_GROUP_ID, "GroupId can't be empty."
        if req.instance_id == "":
            return ErrorCode.INVALID_REQUEST, "InstanceId can't be empty."
        if req.subscribed_topic_regex:  # an empty regex means none (librdkafka sends one)
            try:
                compile_topic_regex(req.subscribed_topic_regex)
            except InvalidTopicRegex as exc:
                return ErrorCode.INVALID_REGULAR_EXPRESSION, str(exc)
        if req.member_epoch == JOIN_EPOCH:
            if req.rebalance_timeout_ms <= 0:
                return ErrorCode.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request."
            if req.owned:
                return ErrorCode.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining."
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                return ErrorCode.INVALID_REQUEST, "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
            if not req.member_id and not req.generates_member_id:
                return ErrorCode.INVALID_REQUEST, "MemberId can't be empty."
        elif req.member_epoch == STATIC_LEAVE_EPOCH:
            if req.instance_id is None:
                return ErrorCode.INVALID_REQUEST, "InstanceId can't be null when leaving with epoch -2."
        elif req.member_epoch < LEAVE_EPOCH:
            return ErrorCode.INVALID_REQUEST, f"MemberEpoch {req.member_epoch} is invalid."
        if req.member_epoch != JOIN_EPOCH and not req.member_id:
            return ErrorCode.INVALID_REQUEST, "MemberId can't be empty."
        if req.server_assignor is not None and req.server_assignor not in self.config.assignors:
            return ErrorCode.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {req.server_assignor} is not supported."
        return ErrorCode.NONE, None

    # ------------------------------------------------------------------------------- heartbeat

    def heartbeat(self, req: ConsumerGroupHeartbeat) -> ConsumerGroupHeartbeatResult:
        error, message = self._validate(req)
        if error is ErrorCode.NONE:
            error = self.state.check(req.group_id)
        if error is ErrorCode.NONE and req.group_id in self.state.groups:
            error, message = self._classic_in_the_way(req.group_id, req.member_epoch == JOIN_EPOCH)
        if error is not ErrorCode.NONE:
            return ConsumerGroupHeartbeatResult(error, message)
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(req)
        group = self.groups.get(req.group_id)
        if group is None:
            if req.member_epoch != JOIN_EPOCH:
                return ConsumerGroupHeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID, f"Group {req.group_id} has no member {req.member_id}.")
            group = self.groups[req.group_id] = ConsumerGroup(req.group_id)
        call = _Call(group)
        result = self._heartbeat(group, req, call)
        self._commit(group, call)
        return result

    def _classic_in_the_way(self, group_id: str, joining: bool) -> tuple[ErrorCode, str | None]:
        """A classic group with members keeps its id; an empty one becomes a consumer group when someone joins."""
        classic = self.state.groups[group_id]
        if not classic.is_empty or not joining:
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group."
        # An empty classic group has no membership to carry over: only its offsets, which stay.
        self.state.remove_group(group_id)
        return ErrorCode.NONE, None

    def _heartbeat(self, group: ConsumerGroup, req: ConsumerGroupHeartbeat, call: _Call) -> ConsumerGroupHeartbeatResult:
        member = group.members.get(req.member_id) if req.member_id else None
        full = req.member_epoch == JOIN_EPOCH or req.owned is not None
        if req.member_epoch == JOIN_EPOCH:
            if member is None and req.instance_id is not None:
                replaced = group.member_by_instance(req.instance_id)
                if replaced is not None:
                    if replaced.member_epoch != STATIC_LEAVE_EPOCH:
                        return ConsumerGroupHeartbeatResult(
                            ErrorCode.UNRELEASED_INSTANCE_ID,
                            f"Static member {req.instance_id} has not left the group yet.")
                    member = self._replace_static(group, replaced, req.member_id or self.state.new_id(), call)
            if member is None:
                if len(group.members) >= self.config.max_size:
                    return ConsumerGroupHeartbeatResult(
                        ErrorCode.GROUP_MAX_SIZE_REACHED,
                        f"The consumer group has reached its maximum capacity of {self.config.max_size} members.")
                member = ConsumerMember(req.member_id or self.state.new_id())
        else:
            if member is None:
                return ConsumerGroupHeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID,
                                                    f"Member {req.member_id} is not a member of group {group.group_id}.")
            if not self._epoch_acceptable(member, req):
                return ConsumerGroupHeartbeatResult(
                    ErrorCode.FENCED_MEMBER_EPOCH,
                    f"The consumer group member has an epoch ({req.member_epoch}) other than {member.member_epoch}.")
        before = (member.member_epoch, to_topic_partitions(member.assigned))
        self._update_member(group, member, req, call)
        member = group.members[member.member_id]  # a joining member exists once its record is applied
        self._refresh_target(group, call, req.topic_visible)
        self._reconcile(group, member, req.owned, call)
        self._schedule(group, member)
        changed = before != (member.member_epoch, to_topic_partitions(member.assigned))
        return ConsumerGroupHeartbeatResult(
            ErrorCode.NONE, None, member.member_id, member.member_epoch, self.heartbeat_interval_ms(group.group_id),
            to_topic_partitions(member.assigned) if full or changed else None,
        )

    @staticmethod
    def _epoch_acceptable(member: ConsumerMember, req: ConsumerGroupHeartbeat) -> bool:
        if req.member_epoch == member.member_epoch:
            return True
        if req.member_epoch != member.previous_member_epoch:
            return False
        # The answer that moved it to its current epoch was lost: fine if it owns nothing it should not.
        return req.owned is None or _pairs(from_topic_partitions(req.owned)) <= _pairs(member.assigned)

    def _update_member(self, group: ConsumerGroup, member: ConsumerMember, req: ConsumerGroupHeartbeat, call: _Call) -> None:
        new = member.metadata()
        updated = MemberMetadata(
            req.instance_id if req.instance_id is not None else new.instance_id,
            req.rack_id if req.rack_id is not None else new.rack_id,
            req.client_id or new.client_id,
            req.client_host or new.client_host,
            tuple(sorted(set(req.subscribed_topic_names))) if req.subscribed_topic_names is not None else new.subscribed_topic_names,
            (req.subscribed_topic_regex or None) if req.subscribed_topic_regex is not None else new.subscribed_topic_regex,
            req.rebalance_timeout_ms if req.rebalance_timeout_ms > 0 else new.rebalance_timeout_ms,
            req.server_assignor if req.server_assignor is not None else new.server_assignor,
        )
        joining = member.member_id not in group.members
        if joining or updated != new:
            call.add(member_metadata(group.group_id, member.member_id, updated))
        bump = joining or (updated.subscribed_topic_names, updated.subscribed_topic_regex, updated.server_assignor) != (
            new.subscribed_topic_names, new.subscribed_topic_regex, new.server_assignor)
        self._maybe_bump(group, bump, call, req.topic_visible)

    def _maybe_bump(self, group: ConsumerGroup, bump: bool, call: _Call, visible: TopicFilter | None = None) -> None:
        topics = self.topics()
        names = {n for m in group.members.values() for n in self._subscribed(group, m, topics, visible)}
        new_hash = metadata_hash(topics, names)
        if bump or new_hash != group.metadata_hash:
            call.add(group_metadata(group.group_id, GroupMetadata(group.epoch + 1, new_hash)))

    def _refresh_target(self, group: ConsumerGroup, call: _Call, visible: TopicFilter | None = None) -> None:
        """Compute the target assignment if the group epoch moved past it."""
        if group.assignment_epoch >= group.epoch:
            return
        topics = self.topics()
        by_id = {topic_id: count for topic_id, count in topics.values()}
        subscriptions = {
            m.member_id: assignors.MemberSubscription(
                frozenset(topics[n][0] for n in self._subscribed(group, m, topics, visible) if n in topics),
                group.target.get(m.member_id, {}),
            )
            for m in group.members.values()
        }
        assignor = group.preferred_assignor(self.config.assignors[0])
        new_target = assignors.assign(assignor, subscriptions, by_id)
        for member_id, assignment in sorted(new_target.items()):
            if to_topic_partitions(assignment) != to_topic_partitions(group.target.get(member_id, {})) or member_id not in group.target:
                call.add(target_member(group.group_id, member_id, TargetAssignmentMember(to_topic_partitions(assignment))))
        call.add(target_metadata(group.group_id, TargetAssignmentMetadata(group.epoch)))

    def _reconcile(self, group: ConsumerGroup, member: ConsumerMember, owned: TopicPartitions | None, call: _Call) -> None:
        """One step of the member's reconciliation towards its target (see the module docstring)."""
        target = _pairs(group.target.get(member.member_id, {}))
        assigned = _pairs(member.assigned)
        pending = _pairs(member.pending_revocation)
        if member.state == UNREVOKED_PARTITIONS:
            still_owned = owned is None or bool(_pairs(from_topic_partitions(owned)) & pending)
            if still_owned:
                return
            pending = set()
        elif member.member_epoch == group.assignment_epoch and member.state == STABLE:
            return
        revoke = assigned - target
        if revoke:
            self._set_current(group, member, member.member_epoch, member.previous_member_epoch,
                              UNREVOKED_PARTITIONS, assigned & target, revoke, call)
            return
        owners = group.owners()
        free = {tp for tp in target if owners.get(tp, member.member_id) == member.member_id}
        state = STABLE if free == target else UNRELEASED_PARTITIONS
        epoch = group.assignment_epoch
        previous = member.member_epoch if epoch != member.member_epoch else member.previous_member_epoch
        self._set_current(group, member, epoch, previous, state, free, pending, call)

    def _set_current(self, group: ConsumerGroup, member: ConsumerMember, epoch: int, previous: int, state: int,
                     assigned: set[tuple[uuid.UUID, int]], pending: set[tuple[uuid.UUID, int]], call: _Call) -> None:
        value = CurrentMemberAssignment(epoch, previous, state, to_topic_partitions(_from_pairs(assigned)),
                                        to_topic_partitions(_from_pairs(pending)))
        if member.member_id in group.members and value == member.current():
            return
        call.add(current_assignment(group.group_id, member.member_id, value))

    # ---------------------------------------------------------------------------------- leaving

    def _leave(self, req: ConsumerGroupHeartbeat) -> ConsumerGroupHeartbeatResult:
        group = self.groups.get(req.group_id)
        member = None if group is None else group.members.get(req.member_id)
        if group is None or member is None:
            return ConsumerGroupHeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID,
                                                f"Member {req.member_id} is not a member of group {req.group_id}.")
        call = _Call(group)
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            # Keep its place and assignment for a successor with the same instance id.
            call.add(current_assignment(group.group_id, member.member_id, CurrentMemberAssignment(
                STATIC_LEAVE_EPOCH, member.member_epoch, member.state,
                to_topic_partitions(member.assigned), to_topic_partitions(member.pending_revocation))))
            self.state.timers.cancel(("consumer-revocation", group.group_id, member.member_id))
        else:
            self._remove(group, member, call)
        self._commit(group, call)
        return ConsumerGroupHeartbeatResult(ErrorCode.NONE, None, member.member_id, req.member_epoch,
                                            self.heartbeat_interval_ms(group.group_id))

    def _remove(self, group: ConsumerGroup, member: ConsumerMember, call: _Call) -> None:
        """Tombstone a member (current assignment, target, metadata, Kafka's order), then re-target the rest."""
        call.add(current_assignment(group.group_id, member.member_id, None))
        call.add(target_member(group.group_id, member.member_id, None))
        call.add(member_metadata(group.group_id, member.member_id, None))
        self.state.timers.cancel(("consumer-session", group.group_id, member.member_id))
        self.state.timers.cancel(("consumer-revocation", group.group_id, member.member_id))
        self._maybe_bump(group, True, call)
        self._refresh_target(group, call)

    def _replace_static(self, group: ConsumerGroup, old: ConsumerMember, member_id: str, call: _Call) -> ConsumerMember:
        """A static member's successor takes its assignment and epoch; the group epoch does not move."""
        metadata = old.metadata()
        target = group.target.get(old.member_id, {})
        current = CurrentMemberAssignment(old.previous_member_epoch, old.previous_member_epoch, old.state,
                                          to_topic_partitions(old.assigned), to_topic_partitions(old.pending_revocation))
        for record in (current_assignment(group.group_id, old.member_id, None),
                       target_member(group.group_id, old.member_id, None),
                       member_metadata(group.group_id, old.member_id, None),
                       member_metadata(group.group_id, member_id, metadata),
                       target_member(group.group_id, member_id, TargetAssignmentMember(to_topic_partitions(target))),
                       current_assignment(group.group_id, member_id, current)):
            call.add(record)
        self.state.timers.cancel(("consumer-session", group.group_id, old.member_id))
        return group.members[member_id]

    # ----------------------------------------------------------------------------------- timers

    def _schedule(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        timers, group_id, member_id = self.state.timers, group.group_id, member.member_id
        session_timeout_ms = self.session_timeout_ms(group_id)
        timers.schedule(("consumer-session", group_id, member_id), self.state.now + session_timeout_ms,
                        lambda: self._expire(group_id, member_id, "session timeout"))
        key = ("consumer-revocation", group_id, member_id)
        if member.state == UNREVOKED_PARTITIONS:
            if timers.deadline(key) is None:
                timeout = member.rebalance_timeout_ms if member.rebalance_timeout_ms > 0 else session_timeout_ms
                timers.schedule(key, self.state.now + timeout,
                                lambda: self._expire(group_id, member_id, "rebalance timeout while revoking"))
        else:
            timers.cancel(key)

    def _expire(self, group_id: str, member_id: str, why: str) -> None:
        group = self.groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        if group is None or member is None:
            return
        log.info("consumer group %s: member %s removed (%s)", group_id, member_id, why)
        call = _Call(group)
        self._remove(group, member, call)
        self._commit(group, call)

    def start_sessions(self, partition: int) -> None:
        """A loaded partition: every member of its groups gets a fresh session."""
        for group in self.groups.values():
            if self.state.partition_of(group.group_id) == partition:
                for member in group.members.values():
                    self._schedule(group, member)

    def _commit(self, group: ConsumerGroup, call: _Call) -> None:
        if call.records:
            self.state.write(group.group_id, list(call.records), None)

    # ----------------------------------------------------------------------------------- replay

    def replay(self, record: ConsumerGroupRecord) -> None:
        """A record read while loading (a live partition's records were applied when written)."""
        group_id = record.key.group
        group = self.groups.get(group_id)
        if record.key.kind == CONSUMER_GROUP_METADATA and record.value is None:
            self.groups.pop(group_id, None)
            return
        if group is None:
            if record.value is None:
                return
            group = self.groups[group_id] = ConsumerGroup(group_id)
        group.apply(record)

    # -------------------------------------------------------------------------------- offsets

    def validate_commit(self, group: ConsumerGroup, member_id: str, member_epoch: int) -> ErrorCode:
        """OffsetCommit against a consumer group (Kafka's checks): admins commit only to an empty group."""
        if member_epoch < 0 and not member_id:
            return ErrorCode.NONE if not group.members else ErrorCode.UNKNOWN_MEMBER_ID
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    def subscribed_topics(self, group: ConsumerGroup) -> set[str]:
        """Every topic a member of ``group`` subscribes to now (names and regex matches)."""
        topics = self.topics()
        return {n for m in group.members.values() for n in self._subscribed(group, m, topics, None)}

    def tombstones(self, group: ConsumerGroup) -> list[ConsumerGroupRecord]:
        """Every record that deletes ``group`` (members first, the group metadata last)."""
        out = []
        for member_id in sorted(group.members):
            out.append(current_assignment(group.group_id, member_id, None))
            out.append(target_member(group.group_id, member_id, None))
            out.append(member_metadata(group.group_id, member_id, None))
        out.append(target_metadata(group.group_id, None))
        out.append(group_metadata(group.group_id, None))
        return out

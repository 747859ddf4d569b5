"""The classic group membership protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, and the
timers that drive rebalances (Kafka's ``GroupMetadataManager``, classic part).

A rebalance, in the order things happen::

    JoinGroup (member id required first, KIP-394)      member parked in JoinGroup
    PreparingRebalance: wait for every known member     timer: initial delay (new group) or the
                                                          largest rebalance timeout
    join phase completes: members that did not rejoin are dropped (static members are kept), the
    generation increments, a protocol is voted, every parked JoinGroup is answered (the leader's
    with the member list)                               timer: sync timeout (rebalance timeout)
    CompletingRebalance: SyncGroups parked until the leader's arrives with the assignment
    the assignment is written (GroupMetadata record); once appended every parked SyncGroup gets
    its part and the group is Stable                    timer per member: session timeout

Session timers run for every member except while it is parked in a rebalance (a known member
waiting there is alive by definition). A member whose session expires is removed, which starts a
rebalance. Static members (``group.instance.id``, KIP-345) keep their seat across restarts: a
static member joining with an unknown member id replaces its old id; if the group's protocol would
not change, no rebalance happens, only a GroupMetadata write with the new id.
"""

from __future__ import annotations

import logging

from tidelog.common.errors import ErrorCode
from tidelog.coordinator.group import ClassicGroup, GroupState, Member
from tidelog.coordinator.messages import (
    UNKNOWN_MEMBER_ID,
    Heartbeat,
    JoinGroup,
    JoinGroupResult,
    LeaveGroupResult,
    LeavingMember,
    Protocol,
    SyncGroup,
    SyncGroupResult,
)
from tidelog.coordinator.records import GroupMetadataKey, GroupMetadataRecord, GroupMetadataValue
from tidelog.coordinator.state import CoordinatorState, append_error_to_response_error

log = logging.getLogger(__name__)


class ClassicGroupManager:
    def __init__(self, state: CoordinatorState) -> None:
        self.state = state

    # ================================================================================== JoinGroup

    def join_group(self, req: JoinGroup, waiter: int) -> None:
        """Handle a JoinGroup; its answer, now or after the rebalance, is a completion for ``waiter``."""
        error = self.state.check(req.group_id)
        if error is ErrorCode.NONE and not (
            self.state.config.min_session_timeout_ms <= req.session_timeout_ms <= self.state.config.max_session_timeout_ms
        ):
            error = ErrorCode.INVALID_SESSION_TIMEOUT
        if error is not ErrorCode.NONE:
            self._answer_join(waiter, JoinGroupResult(error, req.member_id))
            return
        group = self.state.groups.get(req.group_id)
        is_unknown = req.member_id == UNKNOWN_MEMBER_ID
        created = group is None
        if group is None:
            if not is_unknown:
                self._answer_join(waiter, JoinGroupResult(ErrorCode.UNKNOWN_MEMBER_ID, req.member_id))
                return
            group = self.state.groups[req.group_id] = ClassicGroup(req.group_id)
        if not self._accepts_joining(group, req.member_id):
            group.remove(req.member_id)
            self._answer_join(waiter, JoinGroupResult(ErrorCode.GROUP_MAX_SIZE_REACHED, UNKNOWN_MEMBER_ID))
        elif is_unknown:
            self._join_new_member(group, req, waiter)
        else:
            self._join_existing_member(group, req, waiter)
        if created and not self._writes_for(group.group_id):
            self._write_new_group(group)

    def _writes_for(self, group_id: str) -> bool:
        return any(
            isinstance(r, GroupMetadataRecord) and r.key.group == group_id
            for w in self.state.out.writes for r in w.records
        )

    def _write_new_group(self, group: ClassicGroup) -> None:
        """Make a group created by JoinGroup durable at once (Kafka's empty group record)."""
        value = GroupMetadataValue("", 0, None, None, group.current_state_timestamp or -1, ())

        def done(error: ErrorCode) -> None:
            if error is not ErrorCode.NONE and self.state.groups.get(group.group_id) is group:
                log.warning("writing new group %s failed (%s): dropping it", group.group_id, error.name)
                answer = append_error_to_response_error(error)
                for member in group.members.values():
                    self.complete_join(member, JoinGroupResult(answer, member.member_id))
                self.state.remove_group(group.group_id)

        self.state.write(group.group_id, [GroupMetadataRecord(GroupMetadataKey(group.group_id), value)], done)

    def _accepts_joining(self, group: ClassicGroup, member_id: str) -> bool:
        limit = self.state.config.max_group_size
        if group.is_state(GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.is_state(GroupState.PREPARING_REBALANCE):
            member = group.members.get(member_id)
            # Counting the members that rejoined (not all members) lets a lowered limit take effect.
            return (member is not None and member.awaiting_join is not None) or group.num_awaiting_join < limit
        return group.has_member(member_id) or len(group.members) < limit

    def _join_new_member(self, group: ClassicGroup, req: JoinGroup, waiter: int) -> None:
        if group.is_state(GroupState.DEAD):
            self._answer_join(waiter, JoinGroupResult(ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(req.protocol_type, {p.name for p in req.protocols}):
            self._answer_join(waiter, JoinGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        new_id = f"{req.group_instance_id or req.client_id}-{self.state.new_id()}"
        if req.group_instance_id is not None:
            existing = group.static_members.get(req.group_instance_id)
            if existing is not None:
                self._replace_static_member(group, req, existing, new_id, waiter)
            else:
                self._add_member_and_rebalance(group, req, new_id, waiter)
        elif req.require_known_member_id:
            # KIP-394: hand out the id first; the member joins for real with it. Until then it is
            # "pending" and expires after its session timeout.
            group.pending_join.add(new_id)
            self.state.timers.schedule(
                ("heartbeat", group.group_id, new_id), self.state.now + req.session_timeout_ms,
                lambda: self._expire_heartbeat(group.group_id, new_id),
            )
            self._answer_join(waiter, JoinGroupResult(ErrorCode.MEMBER_ID_REQUIRED, new_id))
        else:
            self._add_member_and_rebalance(group, req, new_id, waiter)

    def _join_existing_member(self, group: ClassicGroup, req: JoinGroup, waiter: int) -> None:
        member_id = req.member_id
        if group.is_state(GroupState.DEAD):
            self._answer_join(waiter, JoinGroupResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id))
            return
        if not group.supports_protocols(req.protocol_type, {p.name for p in req.protocols}):
            self._answer_join(waiter, JoinGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id))
            return
        if group.is_pending(member_id):
            if req.group_instance_id is not None:
                # A pending id was handed to a dynamic member; Kafka fails such a request outright.
                self._answer_join(waiter, JoinGroupResult(ErrorCode.UNKNOWN_SERVER_ERROR, member_id))
                return
            self._add_member_and_rebalance(group, req, member_id, waiter)
            return
        error = group.validate_member(member_id, req.group_instance_id)
        if error is not ErrorCode.NONE:
            self._answer_join(waiter, JoinGroupResult(error, member_id))
            return
        member = group.members[member_id]
        if group.is_state(GroupState.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, req, waiter)
        elif group.is_state(GroupState.COMPLETING_REBALANCE):
            if member.matches(req.protocols):
                # The member lost its JoinGroup response: send the current generation again.
                self._answer_join(waiter, self._generation_result(group, member_id, with_members=group.is_leader(member_id)))
            else:
                self._update_member_and_rebalance(group, member, req, waiter)
        elif group.is_state(GroupState.STABLE):
            if group.is_leader(member_id) or not member.matches(req.protocols):
                # A leader rejoining asks for a new assignment (its topics' metadata changed).
                self._update_member_and_rebalance(group, member, req, waiter)
            else:
                self._answer_join(waiter, self._generation_result(group, member_id, with_members=False))
        else:
            self._answer_join(waiter, JoinGroupResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))

    def _generation_result(self, group: ClassicGroup, member_id: str, *, with_members: bool,
                           leader: str | None = None, skip_assignment: bool = False) -> JoinGroupResult:
        return JoinGroupResult(
            ErrorCode.NONE, member_id, group.generation, group.protocol_type, group.protocol_name,
            (leader if leader is not None else group.leader_id) or "", skip_assignment,
            group.joined_members() if with_members else (),
        )

    def _add_member_and_rebalance(self, group: ClassicGroup, req: JoinGroup, member_id: str, waiter: int) -> None:
        member = Member(
            member_id, req.group_instance_id, req.client_id, req.client_host, req.rebalance_timeout_ms,
            req.session_timeout_ms, req.protocol_type, req.protocols, is_new=True,
        )
        if group.is_state(GroupState.PREPARING_REBALANCE) and group.previous_state is GroupState.EMPTY:
            group.new_member_added = True
        group.add(member)
        member.awaiting_join = waiter
        # A new member cannot heartbeat (it has no id yet) and its socket is parked: bound its wait
        # by the new-member join timeout rather than its session timeout.
        self.schedule_heartbeat(group, member, self.state.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance_or_complete_join(group)

    def _update_member_and_rebalance(self, group: ClassicGroup, member: Member, req: JoinGroup, waiter: int) -> None:
        group.update_protocols(member, req.protocols)
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        self._park_join(member, waiter)
        self._maybe_prepare_rebalance_or_complete_join(group)

    def _replace_static_member(self, group: ClassicGroup, req: JoinGroup, old_id: str, new_id: str, waiter: int) -> None:
        """A static member restarted (unknown member id, known instance id): it takes its old seat."""
        instance_id = req.group_instance_id
        assert instance_id is not None
        current_leader = group.leader_id
        old, new = group.replace_static_member(instance_id, old_id, new_id)
        self.complete_join(old, JoinGroupResult(ErrorCode.FENCED_INSTANCE_ID, old_id))
        self.complete_sync(old, SyncGroupResult(ErrorCode.FENCED_INSTANCE_ID))
        self.state.timers.cancel(("heartbeat", group.group_id, old_id))
        self.schedule_heartbeat(group, new)
        previous = (new.protocols, new.rebalance_timeout_ms, new.session_timeout_ms)
        group.update_protocols(new, req.protocols)
        new.rebalance_timeout_ms, new.session_timeout_ms = req.rebalance_timeout_ms, req.session_timeout_ms
        new.awaiting_join = waiter
        if group.is_state(GroupState.STABLE):
            if group.select_protocol() == group.protocol_name:
                self._persist_static_replacement(group, new, old, previous, current_leader, req)
            else:
                self._maybe_prepare_rebalance_or_complete_join(group)
        elif group.is_state(GroupState.COMPLETING_REBALANCE):
            # The leader may already be assigning with the old id: assign again.
            self.prepare_rebalance(group)
        else:
            self._maybe_complete_join_phase(group)

    def _persist_static_replacement(
        self, group: ClassicGroup, new: Member, old: Member, previous: tuple[tuple[Protocol, ...], int, int],
        current_leader: str | None, req: JoinGroup,
    ) -> None:
        """Same protocol: no rebalance; write the new member id and answer once it is durable."""
        new_id, old_id = new.member_id, old.member_id

        def done(error: ErrorCode) -> None:
            if error is not ErrorCode.NONE:
                waiter = new.awaiting_join
                new.awaiting_join = None
                group.update_protocols(new, previous[0])
                new.rebalance_timeout_ms, new.session_timeout_ms = previous[1], previous[2]
                _, restored = group.replace_static_member(new.group_instance_id or "", new_id, old_id)
                self.state.timers.cancel(("heartbeat", group.group_id, new_id))
                self.schedule_heartbeat(group, restored)
                if waiter is not None:
                    self._answer_join(waiter, JoinGroupResult(
                        append_error_to_response_error(error), UNKNOWN_MEMBER_ID, group.generation,
                        group.protocol_type, group.protocol_name, current_leader or "",
                    ))
            elif req.supports_skip_assignment:
                # The leader gets the member list but must not reassign: the group stays as it is.
                is_leader = group.is_leader(new_id)
                self.complete_join(new, self._generation_result(
                    group, new_id, with_members=is_leader, skip_assignment=is_leader))
            else:
                # Older clients would reassign if told they lead: name the old leader id instead, so
                # the new member acts as a follower and fetches its assignment with SyncGroup.
                self.complete_join(new, self._generation_result(
                    group, new_id, with_members=False, leader=current_leader or ""))

        assignments = {m.member_id: m.assignment for m in group.members.values()}
        self.state.write(group.group_id, [GroupMetadataRecord(GroupMetadataKey(group.group_id), group.to_value(assignments))], done)

    # ---------------------------------------------------------------------------- rebalancing

    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup) -> None:
        if group.can_rebalance():
            self.prepare_rebalance(group)
        else:
            self._maybe_complete_join_phase(group)

    def prepare_rebalance(self, group: ClassicGroup) -> None:
        if group.is_state(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment(group, ErrorCode.REBALANCE_IN_PROGRESS)
        group.pending_sync.clear()
        self.state.timers.cancel(("sync", group.group_id))
        initial = group.is_state(GroupState.EMPTY)
        if initial:
            delay = self.state.config.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self._schedule_initial_join(group.group_id, delay, delay, remaining)
        group.transition_to(GroupState.PREPARING_REBALANCE, self.state.now)
        log.info("group %s preparing to rebalance (generation %d, %d members)",
                 group.group_id, group.generation, len(group.members))
        if not initial:
            self._maybe_complete_join_else_schedule(group)

    def _schedule_initial_join(self, group_id: str, after_ms: int, delay_ms: int, remaining_ms: int) -> None:
        self.state.timers.schedule(
            ("join", group_id), self.state.now + after_ms,
            lambda: self._try_complete_initial_join(group_id, delay_ms, remaining_ms),
        )

    def _try_complete_initial_join(self, group_id: str, delay_ms: int, remaining_ms: int) -> None:
        """``group.initial.rebalance.delay.ms``: wait while members keep arriving, up to the rebalance timeout."""
        group = self.state.groups.get(group_id)
        if group is None:
            return
        if group.new_member_added and remaining_ms != 0:
            group.new_member_added = False
            next_delay = min(self.state.config.initial_rebalance_delay_ms, remaining_ms)
            self._schedule_initial_join(group_id, next_delay, next_delay, max(remaining_ms - delay_ms, 0))
        else:
            self._complete_join_phase(group)

    def _maybe_complete_join_else_schedule(self, group: ClassicGroup) -> None:
        if group.all_members_joined():
            self._complete_join_phase(group)
        else:
            self._schedule_join_timeout(group)

    def _schedule_join_timeout(self, group: ClassicGroup) -> None:
        group_id = group.group_id
        self.state.timers.schedule(("join", group_id), self.state.now + group.rebalance_timeout_ms(),
                             lambda: self._complete_join_by_id(group_id))

    def _complete_join_by_id(self, group_id: str) -> None:
        group = self.state.groups.get(group_id)
        if group is not None:
            self._complete_join_phase(group)

    def _maybe_complete_join_phase(self, group: ClassicGroup) -> None:
        if (
            group.is_state(GroupState.PREPARING_REBALANCE)
            and group.previous_state is not GroupState.EMPTY
            and group.all_members_joined()
        ):
            self._complete_join_phase(group)

    def _complete_join_phase(self, group: ClassicGroup) -> None:
        """End the join phase: drop dynamic members that did not rejoin, start the next generation."""
        self.state.timers.cancel(("join", group.group_id))
        for member in group.not_yet_rejoined():
            if not member.is_static:
                group.remove(member.member_id)
                self.state.timers.cancel(("heartbeat", group.group_id, member.member_id))
        if group.is_state(GroupState.DEAD):
            return
        if not group.elect_joined_leader() and group.members:
            # Only static members remain and none rejoined: wait another rebalance timeout for
            # their sessions to expire.
            self._schedule_join_timeout(group)
            return
        group.init_next_generation(self.state.now)
        if group.is_state(GroupState.EMPTY):
            log.info("group %s is empty at generation %d", group.group_id, group.generation)
            self.state.write(group.group_id, [GroupMetadataRecord(GroupMetadataKey(group.group_id), group.to_value({}))],
                        lambda error: self._log_failed_write(group.group_id, error))
            return
        log.info("group %s: generation %d with %d members, protocol %s",
                 group.group_id, group.generation, len(group.members), group.protocol_name)
        for member in group.members.values():
            self.complete_join(member, self._generation_result(
                group, member.member_id, with_members=group.is_leader(member.member_id)))
            self.schedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync.add(member.member_id)
        generation = group.generation
        group_id = group.group_id
        self.state.timers.schedule(("sync", group_id), self.state.now + group.rebalance_timeout_ms(),
                             lambda: self._expire_pending_sync(group_id, generation))

    def _log_failed_write(self, group_id: str, error: ErrorCode) -> None:
        if error is not ErrorCode.NONE:
            log.warning("writing group %s to __consumer_offsets failed: %s", group_id, error.name)

    def _expire_pending_sync(self, group_id: str, generation: int) -> None:
        """Members that never sent SyncGroup within the rebalance timeout are removed."""
        group = self.state.groups.get(group_id)
        if group is None or group.generation != generation:
            return
        if group.is_state(GroupState.COMPLETING_REBALANCE, GroupState.STABLE) and group.pending_sync:
            missing = sorted(group.pending_sync)
            log.info("group %s: removing %s, which sent no SyncGroup in time", group_id, missing)
            for member_id in missing:
                member = group.remove(member_id)
                if member is not None:
                    self.complete_sync(member, SyncGroupResult(ErrorCode.UNKNOWN_MEMBER_ID))
                self.state.timers.cancel(("heartbeat", group_id, member_id))
            self.prepare_rebalance(group)

    # -------------------------------------------------------------------------------- sessions

    def schedule_heartbeat(self, group: ClassicGroup, member: Member, timeout_ms: int | None = None) -> None:
        group_id, member_id = group.group_id, member.member_id
        self.state.timers.schedule(
            ("heartbeat", group_id, member_id), self.state.now + (member.session_timeout_ms if timeout_ms is None else timeout_ms),
            lambda: self._expire_heartbeat(group_id, member_id),
        )

    def _expire_heartbeat(self, group_id: str, member_id: str) -> None:
        group = self.state.groups.get(group_id)
        if group is None or group.is_state(GroupState.DEAD):
            return
        if group.is_pending(member_id):
            group.remove(member_id)
            if group.is_state(GroupState.PREPARING_REBALANCE) and group.all_members_joined():
                self._complete_join_phase(group)
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        log.info("group %s: member %s session expired", group_id, member_id)
        self._remove_member_and_update_group(group, member)

    def _remove_member_and_update_group(self, group: ClassicGroup, member: Member) -> None:
        self.complete_join(member, JoinGroupResult(ErrorCode.UNKNOWN_MEMBER_ID, UNKNOWN_MEMBER_ID))
        self.complete_sync(member, SyncGroupResult(ErrorCode.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        if group.is_state(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group)
        elif group.is_state(GroupState.PREPARING_REBALANCE) and group.all_members_joined():
            self._complete_join_phase(group)

    # ================================================================================== SyncGroup

    def sync_group(self, req: SyncGroup, waiter: int) -> None:
        error = self.state.check(req.group_id)
        group = self.state.groups.get(req.group_id) if error is ErrorCode.NONE else None
        if error is ErrorCode.NONE and (group is None or group.is_empty):
            error = ErrorCode.UNKNOWN_MEMBER_ID
        if error is ErrorCode.NONE and group is not None:
            error = self._validate_sync(group, req)
        if error is not ErrorCode.NONE or group is None:
            self._answer_sync(waiter, SyncGroupResult(error))
            return
        if group.is_state(GroupState.PREPARING_REBALANCE):
            self._answer_sync(waiter, SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS))
            return
        member = group.members[req.member_id]
        if group.is_state(GroupState.STABLE):
            self._remove_pending_sync(group, req.member_id)
            self._answer_sync(waiter, SyncGroupResult(ErrorCode.NONE, group.protocol_type, group.protocol_name,
                                                      member.assignment))
            return
        self._park_sync(member, waiter)
        self._remove_pending_sync(group, req.member_id)
        if group.is_leader(req.member_id):
            self._store_assignment(group, req)

    def _validate_sync(self, group: ClassicGroup, req: SyncGroup) -> ErrorCode:
        if group.is_state(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = group.validate_member(req.member_id, req.group_instance_id)
        if error is not ErrorCode.NONE:
            return error
        if req.generation_id != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        if _inconsistent(req.protocol_type, group.protocol_type) or _inconsistent(req.protocol_name, group.protocol_name):
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        return ErrorCode.NONE

    def _store_assignment(self, group: ClassicGroup, req: SyncGroup) -> None:
        """The leader's assignment: write it, then hand it out and become Stable."""
        log.info("group %s: assignment from leader %s for generation %d", group.group_id, req.member_id,
                 group.generation)
        assignments = dict(req.assignments)
        for member_id in group.members:
            assignments.setdefault(member_id, b"")
        generation = req.generation_id

        def done(error: ErrorCode) -> None:
            # Another member may have joined meanwhile: act only if this generation is still completing.
            if self.state.groups.get(group.group_id) is not group or group.generation != generation:
                return
            if not group.is_state(GroupState.COMPLETING_REBALANCE):
                return
            if error is not ErrorCode.NONE:
                self._reset_and_propagate_assignment(group, append_error_to_response_error(error))
                self._maybe_prepare_rebalance_or_complete_join(group)
            else:
                for member in group.members.values():
                    member.assignment = assignments.get(member.member_id, b"")
                self._propagate_assignment(group, ErrorCode.NONE)
                group.transition_to(GroupState.STABLE, self.state.now)

        self.state.write(group.group_id, [GroupMetadataRecord(GroupMetadataKey(group.group_id), group.to_value(assignments))], done)

    def _remove_pending_sync(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if group.is_state(GroupState.DEAD, GroupState.EMPTY, GroupState.PREPARING_REBALANCE) or not group.pending_sync:
            self.state.timers.cancel(("sync", group.group_id))

    def _reset_and_propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        ok = error is ErrorCode.NONE
        for member in group.members.values():
            answered = self.complete_sync(member, SyncGroupResult(
                error, group.protocol_type if ok else None, group.protocol_name if ok else None, member.assignment,
            ))
            if answered:
                # Its session was not running while it waited; restart it from now.
                self.schedule_heartbeat(group, member)

    # ================================================================================== Heartbeat

    def heartbeat(self, req: Heartbeat) -> ErrorCode:
        error = self.state.check(req.group_id)
        if error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            return ErrorCode.NONE  # Kafka answers blindly while loading: the session is not at risk yet
        if error is not ErrorCode.NONE:
            return error
        group = self.state.groups.get(req.group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_state(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = group.validate_member(req.member_id, req.group_instance_id)
        if error is not ErrorCode.NONE:
            return error
        if req.generation_id != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        if group.is_state(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        self.schedule_heartbeat(group, group.members[req.member_id])
        if group.is_state(GroupState.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    # ================================================================================= LeaveGroup

    def leave_group(self, group_id: str, leaving: tuple[LeavingMember, ...]) -> LeaveGroupResult:
        error = self.state.check(group_id)
        if error is not ErrorCode.NONE:
            return LeaveGroupResult(error)
        group = self.state.groups.get(group_id)
        if group is None:
            return LeaveGroupResult(ErrorCode.NONE, tuple((m, ErrorCode.UNKNOWN_MEMBER_ID) for m in leaving))
        if group.is_state(GroupState.DEAD):
            return LeaveGroupResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        results = tuple((m, self._leave_one(group, m)) for m in leaving)
        if any(e is ErrorCode.NONE for _, e in results):
            if group.is_state(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(group)
            elif group.is_state(GroupState.PREPARING_REBALANCE):
                self._maybe_complete_join_phase(group)
        return LeaveGroupResult(ErrorCode.NONE, results)

    def _leave_one(self, group: ClassicGroup, leaving: LeavingMember) -> ErrorCode:
        if leaving.member_id == UNKNOWN_MEMBER_ID:
            # An admin removing a static member by instance id alone.
            member_id = group.static_members.get(leaving.group_instance_id or "") if leaving.group_instance_id else None
            if member_id is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            self._remove_current_member(group, member_id, leaving.reason)
            return ErrorCode.NONE
        if group.is_pending(leaving.member_id):
            group.remove(leaving.member_id)
            self.state.timers.cancel(("heartbeat", group.group_id, leaving.member_id))
            return ErrorCode.NONE
        error = group.validate_member(leaving.member_id, leaving.group_instance_id)
        if error is ErrorCode.NONE:
            self._remove_current_member(group, leaving.member_id, leaving.reason)
        return error

    def _remove_current_member(self, group: ClassicGroup, member_id: str, reason: str | None) -> None:
        log.info("group %s: member %s leaves (reason: %s)", group.group_id, member_id, reason or "not provided")
        self.state.timers.cancel(("heartbeat", group.group_id, member_id))
        member = group.members[member_id]
        self.complete_join(member, JoinGroupResult(ErrorCode.UNKNOWN_MEMBER_ID, UNKNOWN_MEMBER_ID))
        self.complete_sync(member, SyncGroupResult(ErrorCode.UNKNOWN_MEMBER_ID))
        group.remove(member_id)

    # ================================================================================ OffsetCommit

    # ==================================================================================== helpers

    def _answer_join(self, waiter: int, result: JoinGroupResult) -> None:
        self.state.out.completions.append((waiter, result))

    def _answer_sync(self, waiter: int, result: SyncGroupResult) -> None:
        self.state.out.completions.append((waiter, result))

    def _park_join(self, member: Member, waiter: int) -> None:
        if member.awaiting_join is not None and member.awaiting_join != waiter:
            # The client gave up on its earlier JoinGroup and sent another: release the old one.
            self._answer_join(member.awaiting_join, JoinGroupResult(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))
        member.awaiting_join = waiter

    def _park_sync(self, member: Member, waiter: int) -> None:
        if member.awaiting_sync is not None and member.awaiting_sync != waiter:
            self._answer_sync(member.awaiting_sync, SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS))
        member.awaiting_sync = waiter

    def complete_join(self, member: Member, result: JoinGroupResult) -> bool:
        if member.awaiting_join is None:
            return False
        self._answer_join(member.awaiting_join, result)
        member.awaiting_join = None
        return True

    def complete_sync(self, member: Member, result: SyncGroupResult) -> bool:
        if member.awaiting_sync is None:
            return False
        self._answer_sync(member.awaiting_sync, result)
        member.awaiting_sync = None
        return True


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current

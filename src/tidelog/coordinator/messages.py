"""What the coordinator takes and answers, independent of any wire version.

The broker's handlers translate each Kafka request version to these values and back; the
coordinator never sees a version number except as the two capabilities that change its behaviour
(``require_known_member_id`` from JoinGroup v4, ``supports_skip_assignment`` from JoinGroup v9).
"""

from __future__ import annotations

from dataclasses import dataclass

from tidelog.common.errors import ErrorCode

UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1


@dataclass(frozen=True, slots=True)
class Protocol:
    """One protocol a member can use (an assignor for consumers), with its opaque metadata."""

    name: str
    metadata: bytes


# --------------------------------------------------------------------------- membership (classic)


@dataclass(frozen=True, slots=True)
class JoinGroup:
    group_id: str
    member_id: str
    group_instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[Protocol, ...]
    client_id: str = ""
    client_host: str = ""
    reason: str | None = None
    require_known_member_id: bool = True
    supports_skip_assignment: bool = True


@dataclass(frozen=True, slots=True)
class JoinedMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResult:
    error: ErrorCode
    member_id: str = UNKNOWN_MEMBER_ID
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: tuple[JoinedMember, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncGroup:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class SyncGroupResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class Heartbeat:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class LeavingMember:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroupResult:
    error: ErrorCode
    members: tuple[tuple[LeavingMember, ErrorCode], ...] = ()


# ----------------------------------------------------------------------------------------- offsets


@dataclass(frozen=True, slots=True)
class CommitPartition:
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    topics: tuple[tuple[str, tuple[CommitPartition, ...]], ...]
    retention_ms: int = -1
    # OffsetCommit v9+ answers GROUP_ID_NOT_FOUND where older versions answer ILLEGAL_GENERATION.
    group_id_not_found_error: bool = False


@dataclass(frozen=True, slots=True)
class PartitionErrors:
    topics: tuple[tuple[str, tuple[tuple[int, ErrorCode], ...]], ...]

    def with_error(self, error: ErrorCode) -> PartitionErrors:
        """Every partition that had succeeded now carries ``error`` (a failed write)."""
        return PartitionErrors(
            tuple(
                (topic, tuple((p, error if e is ErrorCode.NONE else e) for p, e in parts))
                for topic, parts in self.topics
            )
        )


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    partition: int
    offset: int = -1
    leader_epoch: int = -1
    metadata: str = ""
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class OffsetFetchResult:
    error: ErrorCode
    topics: tuple[tuple[str, tuple[FetchedOffset, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetDeleteResult:
    error: ErrorCode
    topics: tuple[tuple[str, tuple[tuple[int, ErrorCode], ...]], ...] = ()


# ------------------------------------------------------------------------------------------- admin


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    group_id: str
    error: ErrorCode
    state: str
    protocol_type: str = ""
    protocol_data: str = ""
    members: tuple[DescribedMember, ...] = ()
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str

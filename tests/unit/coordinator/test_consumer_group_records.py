"""KIP-848 records of __consumer_offsets: Kafka's byte layout, round trips, and damage detected."""

from __future__ import annotations

import uuid

import pytest

from tidelog.coordinator.consumer_group_records import (
    ConsumerGroupRecord,
    CurrentMemberAssignment,
    GroupMetadata,
    InvalidConsumerGroupRecord,
    MemberMetadata,
    TargetAssignmentMember,
    TargetAssignmentMetadata,
    current_assignment,
    group_metadata,
    member_metadata,
    target_member,
    target_metadata,
)
from tidelog.coordinator.records import InvalidRecord, decode, encode_key, encode_value

T1 = uuid.UUID("00000000-0000-0000-0000-000000000001")
T2 = uuid.UUID("00000000-0000-0000-0000-000000000002")

RECORDS = [
    group_metadata("g", GroupMetadata(7)),
    group_metadata("g", GroupMetadata(7, metadata_hash=-12345)),
    member_metadata("g", "m1", MemberMetadata("inst", None, "client", "/127.0.0.1", ("a", "b"), None, 30000, "uniform")),
    member_metadata("g", "m1", MemberMetadata(None, "rack", "", "", (), None, -1, None)),
    target_metadata("g", TargetAssignmentMetadata(7)),
    target_member("g", "m1", TargetAssignmentMember(((T1, (0, 2)), (T2, (1,))))),
    current_assignment("g", "m1", CurrentMemberAssignment(7, 6, 1, ((T1, (0,)),), ((T2, (3, 4)),))),
    group_metadata("g", None),
    target_member("g", "m1", None),
]


@pytest.mark.parametrize("record", RECORDS)
def test_every_kind_round_trips_through_the_coordinator_codec(record: ConsumerGroupRecord) -> None:
    assert decode(encode_key(record), encode_value(record)) == record


def test_group_metadata_is_written_in_kafkas_layout() -> None:
    record = group_metadata("g", GroupMetadata(5))
    assert encode_key(record) == b"\x00\x03\x00\x01g"
    # version 0, epoch int32, no tagged fields
    assert encode_value(record) == b"\x00\x00\x00\x00\x00\x05\x00"


def test_member_keys_carry_the_member_id_after_the_group() -> None:
    assert encode_key(current_assignment("g", "m", None)) == b"\x00\x08\x00\x01g\x00\x01m"
    assert encode_key(target_member("g", "m", None)) == b"\x00\x07\x00\x01g\x00\x01m"
    assert encode_key(member_metadata("g", "m", None)) == b"\x00\x05\x00\x01g\x00\x01m"


def test_target_assignment_member_layout() -> None:
    value = encode_value(target_member("g", "m", TargetAssignmentMember(((T1, (0, 1)),))))
    assert value == b"\x00\x00" + b"\x02" + T1.bytes + b"\x03" + b"\x00\x00\x00\x00\x00\x00\x00\x01" + b"\x00" + b"\x00"


def test_unknown_tagged_fields_are_skipped() -> None:
    value = b"\x00\x00\x00\x00\x00\x05" + b"\x01" + b"\x05\x02zz"  # one tag (5) of 2 bytes
    assert decode(b"\x00\x03\x00\x01g", value) == group_metadata("g", GroupMetadata(5))


@pytest.mark.parametrize(
    "key, value",
    [
        (b"\x00\x03\x00\x01g", b"\x00\x01\x00\x00\x00\x05\x00"),  # unknown value version
        (b"\x00\x08\x00\x01g", None),  # member key without its member id
        (b"\x00\x06\x00\x01g", b"\x00\x00\x00\x00"),  # truncated epoch
        (b"\x00\x03\x00\x01g", b"\x00\x00\x00\x00\x00\x05\x00\x00"),  # bytes after the end
    ],
)
def test_damaged_records_are_refused(key: bytes, value: bytes | None) -> None:
    with pytest.raises(InvalidRecord):
        decode(key, value)


def test_a_value_under_the_wrong_key_kind_is_refused() -> None:
    with pytest.raises(InvalidConsumerGroupRecord):
        ConsumerGroupRecord(group_metadata("g", None).key, TargetAssignmentMetadata(1))

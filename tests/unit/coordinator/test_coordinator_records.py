"""__consumer_offsets formats: byte layouts Kafka tools can read, every version decodes, Kafka's partitioning."""

from __future__ import annotations

import struct

import pytest

from tidelog.coordinator.persistence import decode_batches, encode_batch
from tidelog.coordinator.records import (
    GroupMetadataKey,
    GroupMetadataRecord,
    GroupMetadataValue,
    InvalidRecord,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitRecord,
    OffsetCommitValue,
    decode,
    encode_key,
    encode_value,
    java_string_hashcode,
    partition_for,
)
from tidelog.protocol.compression import Compression
from tidelog.protocol.records import ControlType, Record, build_batch, build_control_batch

OFFSET_KEY = OffsetCommitKey("g", "t", 7)
OFFSET_VALUE = OffsetCommitValue(42, "meta", 1_700_000_000_000, leader_epoch=5)
MEMBER = MemberMetadata("m-1", "inst", "client", "/10.0.0.1", 30_000, 10_000, b"\x00\x01sub", b"\x00\x01asg")
GROUP_VALUE = GroupMetadataValue("consumer", 3, "range", "m-1", 1_700_000_000_123, (MEMBER,))


def test_offset_commit_key_is_kafkas_version_1_layout() -> None:
    record = OffsetCommitRecord(OFFSET_KEY, OFFSET_VALUE)
    assert encode_key(record) == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x07"


def test_offset_commit_value_is_written_as_version_3() -> None:
    value = encode_value(OffsetCommitRecord(OFFSET_KEY, OFFSET_VALUE))
    assert value == (
        struct.pack(">hqi", 3, 42, 5) + b"\x00\x04meta" + struct.pack(">q", 1_700_000_000_000)
    )


def test_a_commit_with_expiry_is_written_as_version_1() -> None:
    value = OffsetCommitValue(1, "", 10, expire_timestamp=99)
    encoded = encode_value(OffsetCommitRecord(OFFSET_KEY, value))
    assert encoded == struct.pack(">hq", 1, 1) + b"\x00\x00" + struct.pack(">qq", 10, 99)


def test_group_metadata_key_and_value_layout() -> None:
    record = GroupMetadataRecord(GroupMetadataKey("grp"), GROUP_VALUE)
    assert encode_key(record) == b"\x00\x02\x00\x03grp"
    expected = (
        struct.pack(">h", 3) + b"\x00\x08consumer" + struct.pack(">i", 3) + b"\x00\x05range" + b"\x00\x03m-1"
        + struct.pack(">q", 1_700_000_000_123) + struct.pack(">i", 1)
        + b"\x00\x03m-1" + b"\x00\x04inst" + b"\x00\x06client" + b"\x00\x09/10.0.0.1"
        + struct.pack(">ii", 30_000, 10_000) + struct.pack(">i", 5) + b"\x00\x01sub" + struct.pack(">i", 5) + b"\x00\x01asg"
    )
    assert encode_value(record) == expected


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_every_offset_value_version_decodes(version: int) -> None:
    value = OffsetCommitValue(42, "meta", 1000, leader_epoch=5 if version >= 3 else -1,
                              expire_timestamp=2000 if version == 1 else -1)
    record = OffsetCommitRecord(OFFSET_KEY, value)
    assert decode(encode_key(record), encode_value(record, version)) == record


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_every_group_value_version_decodes(version: int) -> None:
    member = MemberMetadata(
        "m-1", "inst" if version >= 3 else None, "client", "/h", 30_000 if version >= 1 else 10_000, 10_000, b"s", b"a"
    )
    value = GroupMetadataValue("consumer", 3, "range", None, 77 if version >= 2 else -1, (member,))
    record = GroupMetadataRecord(GroupMetadataKey("grp"), value)
    assert decode(encode_key(record), encode_value(record, version)) == record


def test_tombstones_have_no_value() -> None:
    record = GroupMetadataRecord(GroupMetadataKey("grp"), None)
    assert encode_value(record) is None
    assert decode(encode_key(record), None) == record


def test_legacy_offset_key_version_0_still_decodes() -> None:
    key = b"\x00\x00\x00\x01g\x00\x01t\x00\x00\x00\x02"
    decoded = decode(key, None)
    assert decoded == OffsetCommitRecord(OffsetCommitKey("g", "t", 2), None)


def test_record_kinds_not_kept_are_skipped_not_misread() -> None:
    # 4: KIP-848 partition metadata (Kafka before 4.1); 11: a share-group record.
    assert decode(b"\x00\x04\x00\x01g", b"\x00\x00anything") is None
    assert decode(b"\x00\x0b\x00\x01g", b"\x00\x00anything") is None


@pytest.mark.parametrize(
    "key, value",
    [
        (b"\x00", None),  # key shorter than its version
        (b"\x00\x02\x00\x05ab", None),  # string longer than the key
        (b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x02extra", None),  # bytes after the key
        (b"\x00\x02\x00\x01g", b"\x00\x09"),  # unknown value version
        (b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x02", b"\x00\x03\x00"),  # truncated value
    ],
)
def test_malformed_records_raise_invalid_record(key: bytes, value: bytes | None) -> None:
    with pytest.raises(InvalidRecord):
        decode(key, value)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("Hello World", -862545276),
        ("polygenelubricants", -(2**31)),  # the classic Integer.MIN_VALUE hash
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # one code point, two UTF-16 units
    ],
)
def test_java_string_hashcode(text: str, expected: int) -> None:
    assert java_string_hashcode(text) == expected


@pytest.mark.parametrize(
    "group, partitions, expected",
    [
        ("Hello World", 50, 862545276 % 50),
        ("polygenelubricants", 50, 0),  # Utils.abs(MIN_VALUE) is 0, not MIN_VALUE
        ("hello", 7, 99162322 % 7),
        ("", 50, 0),
    ],
)
def test_group_partition_matches_kafka(group: str, partitions: int, expected: int) -> None:
    assert partition_for(group, partitions) == expected


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.GZIP, Compression.ZSTD])
def test_a_write_is_one_batch_that_decodes_back_in_order(compression: Compression) -> None:
    records = [
        OffsetCommitRecord(OFFSET_KEY, OFFSET_VALUE),
        GroupMetadataRecord(GroupMetadataKey("grp"), GROUP_VALUE),
        OffsetCommitRecord(OffsetCommitKey("g", "t", 8), None),
    ]
    batch = encode_batch(records, now_ms=123, compression=compression)
    assert decode_batches(batch) == records


def test_control_batches_and_undecodable_records_are_skipped() -> None:
    good = OffsetCommitRecord(OFFSET_KEY, OFFSET_VALUE)
    junk = build_batch([Record(0, 1, b"\x00\x02\x00\x09short", b"x")])
    marker = build_control_batch(ControlType.COMMIT, producer_id=7, producer_epoch=0, coordinator_epoch=0, timestamp=1)
    data = junk + marker + encode_batch([good], 5)
    assert decode_batches(data) == [good]

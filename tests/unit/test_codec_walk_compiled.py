"""The compiled body check (``codec._check``) does exactly what the ``_Walker`` interpreter does.

For kio-written requests of many keys and versions, and for every prefix and many single-byte
corruptions of them, both must return the same (end, unknown tags) or raise the same error.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.request_header.v1.header import RequestHeader as KioHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as KioHeaderV2
from kio.serial import entity_writer
from kio.static.primitive import Records, i8, i16, i32, i64

from tidelog.protocol import apis
from tidelog.protocol.codec import _check, _plan, _Walker
from tidelog.protocol.headers import parse_request_header

st.register_type_strategy(Records, st.binary(max_size=64))  # type: ignore[type-abstract]

ALL_CASES = [
    (key, version) for key, (low, high) in sorted(apis.ACCEPTED.items()) for version in range(low, high + 1)
]
REPRESENTATIVE = {
    apis.ApiKey.PRODUCE,
    apis.ApiKey.FETCH,
    apis.ApiKey.METADATA,
    apis.ApiKey.JOIN_GROUP,
    apis.ApiKey.SYNC_GROUP,
    apis.ApiKey.OFFSET_COMMIT,
    apis.ApiKey.CREATE_TOPICS,
    apis.ApiKey.API_VERSIONS,
}
CASES = [(key, version) for key, version in ALL_CASES if key in REPRESENTATIVE]
SPECIAL_BYTES = (0x00, 0x01, 0x7F, 0x80, 0xFF)
MAX_POSITIONS = 300


def write(entity: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def frame_for(request: Any) -> bytes:
    header_cls = KioHeaderV2 if type(request).__flexible__ else KioHeaderV1
    header = header_cls(
        request_api_key=i16(request.__api_key__),
        request_api_version=i16(request.__version__),
        correlation_id=i32(1),
        client_id="walk",
    )
    return write(header) + write(request)


def outcome_of(run: Any) -> object:
    try:
        return run()
    except Exception as error:
        return (type(error).__name__, str(error))


def interpreted(cls: type[Any], buf: bytes | bytearray | memoryview, offset: int) -> object:
    def run() -> tuple[int, bool]:
        walker = _Walker(buf, strip=False)
        end = walker.walk(_plan(cls), offset)
        return end, walker.unknown_tags

    return outcome_of(run)


def compiled(cls: type[Any], buf: bytes | bytearray | memoryview, offset: int) -> object:
    return outcome_of(lambda: _check(cls)(buf, offset))


def assert_same(cls: type[Any], buf: bytes | bytearray | memoryview, offset: int) -> object:
    expected = interpreted(cls, buf, offset)
    assert compiled(cls, buf, offset) == expected, (cls, bytes(buf[offset:]).hex())
    return expected


def assert_equivalent(request: Any, seed: int, corruptions_per_byte: int = 1) -> None:
    """The whole frame, each of its prefixes, and single-byte corruptions of its body.

    Bodies longer than ``MAX_POSITIONS`` (hypothesis draws a few) get that many random positions.
    """
    cls = type(request)
    frame = frame_for(request)
    offset = parse_request_header(frame).body_offset
    whole = assert_same(cls, frame, offset)
    assert isinstance(whole, tuple) and isinstance(whole[0], int), whole  # kio's bytes walk cleanly
    assert_same(cls, memoryview(frame), offset)
    assert_same(cls, bytearray(frame), offset)
    rng = random.Random(seed)
    positions = range(offset, len(frame))
    if len(positions) > MAX_POSITIONS:
        positions = sorted(rng.sample(positions, MAX_POSITIONS))  # type: ignore[assignment]
    for size in positions:
        assert_same(cls, frame[:size], offset)
    corrupted = bytearray(frame)
    for position in positions:
        original = corrupted[position]
        values = [SPECIAL_BYTES[position % len(SPECIAL_BYTES)]]
        values += [rng.randrange(256) for _ in range(corruptions_per_byte)]
        for value in values:
            if value != original:
                corrupted[position] = value
                assert_same(cls, bytes(corrupted), offset)
        corrupted[position] = original


@pytest.mark.parametrize(("key", "version"), CASES, ids=[f"{k.name}-v{v}" for k, v in CASES])
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_representative_requests_every_version(key: int, version: int, data: st.DataObject) -> None:
    request = data.draw(st.from_type(apis.request_class(key, version)))
    assert_equivalent(request, seed=data.draw(st.integers(0, 2**32)), corruptions_per_byte=2)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(ALL_CASES), data=st.data())
def test_any_accepted_request(case: tuple[int, int], data: st.DataObject) -> None:
    request = data.draw(st.from_type(apis.request_class(*case)))
    assert_equivalent(request, seed=data.draw(st.integers(0, 2**32)))


FETCH = FetchRequest(
    replica_id=i32(-1),
    max_wait=datetime.timedelta(milliseconds=500),
    min_bytes=i32(1),
    max_bytes=i32(52_428_800),
    isolation_level=i8(0),
    session_id=i32(0),
    session_epoch=i32(-1),
    topics=(
        FetchTopic(
            topic="lat",
            partitions=(
                FetchPartition(
                    partition=i32(0),
                    current_leader_epoch=i32(0),
                    fetch_offset=i64(100),
                    last_fetched_epoch=i32(0),
                    log_start_offset=i64(-1),
                    partition_max_bytes=i32(1_048_576),
                ),
            ),
        ),
    ),
    forgotten_topics_data=(),
    rack_id="",
)


def test_known_tag_is_walked_by_both() -> None:
    request = dataclasses.replace(FETCH, cluster_id="cluster")  # tag 0 of FetchRequest v12
    frame = frame_for(request)
    offset = parse_request_header(frame).body_offset
    assert assert_same(FetchRequest, frame, offset) == (len(frame), False)
    assert_equivalent(request, seed=1, corruptions_per_byte=4)


@pytest.mark.parametrize(
    "tags",
    [b"\x01\x63\x02ab", b"\x02\x05\x00\x63\x01z", b"\x01\x63\x05ab", b"\x05\x63\x00", b"\x81"],
    ids=["unknown", "two-unknown", "tag-past-end", "count-past-end", "truncated-count"],
)
def test_top_level_tag_sections(tags: bytes) -> None:
    frame = frame_for(ApiVersionsRequest(client_software_name="kcat", client_software_version="1.7"))
    assert frame.endswith(b"\x00")
    frame = frame[:-1] + tags
    offset = parse_request_header(frame).body_offset
    assert_same(ApiVersionsRequest, frame, offset)


def test_unknown_tag_in_a_nested_entity_is_reported() -> None:
    frame = frame_for(FETCH)
    offset = parse_request_header(frame).body_offset
    # The partition's empty tag section is the byte before the topic's (both 0) and the
    # forgotten-topics array, rack id and top-level tags (1, 1, 0) that end the body.
    assert frame.endswith(b"\x00\x00\x01\x01\x00")
    nested = frame[:-5] + b"\x01\x63\x01z" + frame[-4:]
    expected = assert_same(FetchRequest, nested, offset)
    assert expected == (len(nested), True)


def test_hostile_counts_raise_the_same_error() -> None:
    frame = frame_for(FETCH)
    offset = parse_request_header(frame).body_offset
    topics_at = offset + 4 + 4 + 4 + 4 + 1 + 4 + 4  # replica_id .. session_epoch
    for count in (b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x01", b"\xff\xff\xff\xff\xff"):
        hostile = frame[:topics_at] + count + frame[topics_at + 1 :]
        outcome = assert_same(FetchRequest, hostile, offset)
        assert isinstance(outcome, tuple) and outcome[0] == "InvalidRequest"

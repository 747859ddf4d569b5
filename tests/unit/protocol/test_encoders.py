"""The hand-written encoders write exactly the bytes kio's entity_writer writes, at every version."""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import io
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.primitive import Records, i32Timedelta

from tidelog.protocol.encoders import HAND_WRITTEN
from tidelog.protocol.encoders import fetch as fetch_encoder
from tidelog.protocol.encoders import produce as produce_encoder
from tidelog.protocol.encoders.fetch import FetchResult
from tidelog.protocol.encoders.produce import ProduceResult

st.register_type_strategy(Records, st.binary(max_size=300))  # type: ignore[type-abstract]

VERSIONS = {0: range(3, 14), 1: range(4, 18), 3: range(4, 14), 18: range(0, 5)}
CASES = [(key, version) for key, versions in VERSIONS.items() for version in versions]


def kio_bytes(response: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(response))(buffer, response)
    return buffer.getvalue()


def ours(response: Any) -> bytes:
    return b"".join(bytes(part) for part in HAND_WRITTEN[response.__api_key__](response))


@st.composite
def with_some_tags_at_default(draw: st.DrawFn, value: Any) -> Any:
    """Reset a random subset of tagged fields (at any depth) to their defaults, like real responses."""
    if isinstance(value, tuple):
        return tuple([draw(with_some_tags_at_default(item)) for item in value])
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return value
    changes = {}
    for field in dataclasses.fields(value):
        current = getattr(value, field.name)
        if "tag" in field.metadata and draw(st.booleans()):
            changes[field.name] = field.default
        else:
            changes[field.name] = draw(with_some_tags_at_default(current))
    return dataclasses.replace(value, **changes)


def responses(key: int, version: int) -> st.SearchStrategy[Any]:
    cls = load_response_schema(key, version)
    return st.from_type(cls).flatmap(with_some_tags_at_default)


@pytest.mark.parametrize(("key", "version"), CASES)
@settings(max_examples=20)
@given(data=st.data())
def test_generated_responses_encode_exactly_like_kio(key: int, version: int, data: st.DataObject) -> None:
    response = data.draw(responses(key, version))
    assert ours(response) == kio_bytes(response)


def _fetch(version: int, records: bytes | None, **partition_fields: Any) -> Any:
    module = load_response_schema(1, version)
    mod = importlib.import_module(module.__module__)
    partition = mod.PartitionData(
        partition_index=0,
        error_code=ErrorCode.none,
        high_watermark=10,
        aborted_transactions=None,
        records=records,
        **partition_fields,
    )
    topic_key = {"topic_id": uuid.UUID(int=7)} if version >= 13 else {"topic": "events"}
    topic = mod.FetchableTopicResponse(partitions=(partition,), **topic_key)
    extra = {"error_code": ErrorCode.none} if version >= 7 else {}
    return module(throttle_time=i32Timedelta.parse(datetime.timedelta(0)), responses=(topic,), **extra)


@pytest.mark.parametrize("version", range(4, 18))
@pytest.mark.parametrize("records", [None, b"", b"\x00" * 70_000])
def test_fetch_null_empty_and_large_records_match_kio(version: int, records: bytes | None) -> None:
    response = _fetch(version, records)
    assert ours(response) == kio_bytes(response)


def test_fetch_records_are_passed_through_without_copy() -> None:
    records = b"batch" * 1000
    parts = HAND_WRITTEN[1](_fetch(12, records))
    assert any(part is records for part in parts)


@pytest.mark.parametrize("version", range(12, 18))
def test_fetch_tagged_partition_fields_are_written_only_when_set(version: int) -> None:
    mod = importlib.import_module(load_response_schema(1, version).__module__)
    plain = _fetch(version, b"x")
    leader = _fetch(version, b"x", current_leader=mod.LeaderIdAndEpoch(leader_id=1, leader_epoch=4))
    assert ours(leader) == kio_bytes(leader)
    assert len(ours(leader)) == len(ours(plain)) + 2 + 9  # tag, size, two int32 and empty tags


def test_api_versions_v3_without_features_has_empty_tag_section() -> None:
    module = load_response_schema(18, 3)
    mod = importlib.import_module(module.__module__)
    response = module(
        error_code=ErrorCode.none,
        api_keys=(mod.ApiVersion(api_key=18, min_version=0, max_version=4),),
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
    )
    body = ours(response)
    assert body == kio_bytes(response)
    assert body.endswith(b"\x00\x00\x00\x00\x00")  # throttle 0, then no tagged fields


def _all_tags_at_default(value: Any) -> Any:
    """The same response with every tagged field (at any depth) at its default."""
    if isinstance(value, tuple):
        return tuple(_all_tags_at_default(item) for item in value)
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return value
    changes = {
        field.name: field.default if "tag" in field.metadata else _all_tags_at_default(getattr(value, field.name))
        for field in dataclasses.fields(value)
    }
    return dataclasses.replace(value, **changes)


def _light(response: Any) -> Any:
    """The light form the broker's handlers build (``ProduceResult``/``FetchResult``) of a kio response."""
    version = response.__version__
    if response.__api_key__ == 0:
        return ProduceResult(version, [
            (getattr(t, "name", ""), getattr(t, "topic_id", None),
             [produce_encoder._from_kio(p, version) for p in t.partition_responses])
            for t in response.responses
        ], throttle_ms=round(response.throttle_time.total_seconds() * 1000))
    topics = [
        (getattr(t, "topic", ""), getattr(t, "topic_id", None), [fetch_encoder._from_kio(p, version) for p in t.partitions])
        for t in response.responses
    ]
    return FetchResult(version, getattr(response, "error_code", 0), getattr(response, "session_id", 0), topics,
                       throttle_ms=round(response.throttle_time.total_seconds() * 1000))


@pytest.mark.parametrize(("key", "version"), [case for case in CASES if case[0] in (0, 1)])
@settings(max_examples=20)
@given(data=st.data())
def test_the_handlers_light_results_encode_exactly_like_kio(key: int, version: int, data: st.DataObject) -> None:
    """ProduceResult and FetchResult (no kio objects, no tagged fields) give kio's bytes for the same
    response with its tagged fields at their defaults."""
    response = _all_tags_at_default(data.draw(st.from_type(load_response_schema(key, version))))
    assert ours(_light(response)) == kio_bytes(response)

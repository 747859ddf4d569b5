"""Fetch and ListOffsets corners that clients rely on, checked over a raw socket.

Whole batches within the size limits (but never nothing when the first batch alone is too big),
max_wait honoured on an empty partition, incremental fetch sessions (KIP-227), and ListOffsets'
special timestamps.
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.list_offsets.v8.request import ListOffsetsPartition as P8
from kio.schema.list_offsets.v8.request import ListOffsetsRequest as R8
from kio.schema.list_offsets.v8.request import ListOffsetsTopic as T8

from helpers.broker_process import BrokerProcess
from helpers.clients import produce_all, producer
from helpers.raw_client import RawClient, decode_batches

LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3


@pytest.fixture
def raw(broker: BrokerProcess) -> Iterator[RawClient]:
    with RawClient(broker.host, broker.port) as client:
        yield client


def fetch(raw: RawClient, topic: str, offset: int = 0, *, partition_max_bytes: int = 1 << 20,
          max_bytes: int = 50 << 20, max_wait_ms: int = 50, min_bytes: int = 1, session_id: int = 0,
          session_epoch: int = -1, offsets: dict[int, int] | None = None) -> Any:
    """One FetchRequest v12; ``offsets`` (partition -> fetch offset) defaults to {0: offset}."""
    offsets = {0: offset} if offsets is None else offsets
    request = FetchRequest(
        max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=min_bytes, max_bytes=max_bytes,
        session_id=session_id, session_epoch=session_epoch,
        topics=(FetchTopic(topic=topic, partitions=tuple(
            FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=partition_max_bytes)
            for p, o in offsets.items())),) if offsets else (),
        forgotten_topics_data=(),
    )
    response = raw.call(request)
    assert response.error_code == ErrorCode.none
    return response


def only_partition(response: Any) -> Any:
    (topic_response,) = response.responses
    (partition,) = topic_response.partitions
    assert partition.error_code == ErrorCode.none
    return partition


def produce_batches(bootstrap: str, topic: str, count: int, size: int) -> None:
    """``count`` batches of one ``size``-byte record each (a flush per record keeps them apart)."""
    prod = producer(bootstrap, {"linger.ms": 0})
    for i in range(count):
        produce_all(prod, topic, [bytes([65 + i]) * size])


def test_fetch_returns_whole_batches_within_the_partition_limit(bootstrap: str, topic: str,
                                                                raw: RawClient) -> None:
    produce_batches(bootstrap, topic, 6, 10_000)

    partition = only_partition(fetch(raw, topic, 0, partition_max_bytes=35_000))

    records = decode_batches(partition.records)  # whole batches only; a cut last one is ignored
    assert [r.offset for r in records] == [0, 1, 2]
    assert all(r.value == bytes([65 + r.offset]) * 10_000 for r in records)
    assert len(partition.records) <= 35_000
    assert partition.high_watermark == 6


def test_first_batch_larger_than_the_limits_is_still_returned(bootstrap: str, topic: str, raw: RawClient) -> None:
    produce_batches(bootstrap, topic, 2, 100_000)

    partition = only_partition(fetch(raw, topic, 0, partition_max_bytes=1_000, max_bytes=1_000))

    records = decode_batches(partition.records)
    assert [(r.offset, len(r.value or b"")) for r in records] == [(0, 100_000)]


def test_fetch_from_the_middle_of_a_batch_returns_that_batch(bootstrap: str, topic: str, raw: RawClient) -> None:
    produce_all(producer(bootstrap, {"linger.ms": 50}), topic, [f"r{i}".encode() for i in range(10)])

    records = decode_batches(only_partition(fetch(raw, topic, 4)).records)

    assert 4 in [r.offset for r in records]
    assert [r.value for r in records if r.offset >= 4] == [f"r{i}".encode() for i in range(4, 10)]


def test_empty_fetch_waits_for_max_wait_before_answering(topic: str, raw: RawClient) -> None:
    started = time.monotonic()
    partition = only_partition(fetch(raw, topic, 0, max_wait_ms=400))
    elapsed = time.monotonic() - started

    assert not partition.records
    assert 0.35 <= elapsed < 1.5, f"answered after {elapsed:.3f} s for max_wait 400 ms"


def test_fetch_waits_until_min_bytes_are_available(bootstrap: str, topic: str, raw: RawClient) -> None:
    produce_all(producer(bootstrap), topic, [b"small"])
    started = time.monotonic()
    partition = only_partition(fetch(raw, topic, 0, max_wait_ms=300, min_bytes=10_000_000))
    elapsed = time.monotonic() - started

    assert [r.value for r in decode_batches(partition.records)] == [b"small"]  # what there is, at the deadline
    assert elapsed >= 0.25


def test_incremental_fetch_session_reports_only_partitions_with_news(
    bootstrap: str, new_topic: Callable[..., str], raw: RawClient
) -> None:
    topic = new_topic(partitions=2)
    produce_all(producer(bootstrap), topic, [b"p0"], partition=0)
    first = fetch(raw, topic, session_id=0, session_epoch=0, offsets={0: 0, 1: 0})
    assert first.session_id > 0, "a full fetch with epoch 0 must open a session"
    assert sorted(p.partition_index for p in first.responses[0].partitions) == [0, 1]

    produce_all(producer(bootstrap), topic, [b"p1"], partition=1)
    # incremental: only partition 0 moved on (to offset 1); partition 1 stays at 0 in the session
    second = fetch(raw, topic, session_id=first.session_id, session_epoch=1, offsets={0: 1}, max_wait_ms=500)

    assert second.session_id == first.session_id
    changed = [(p.partition_index, [r.value for r in decode_batches(p.records or b"")])
               for t in second.responses for p in t.partitions]
    assert changed == [(1, [b"p1"])]


@pytest.mark.parametrize(("spec", "expected"), [(EARLIEST, (0, -1)), (LATEST, (3, -1))],
                         ids=["earliest", "latest"])
def test_list_offsets_special_timestamps(bootstrap: str, topic: str, raw: RawClient, spec: int,
                                         expected: tuple[int, int]) -> None:
    produce_all(producer(bootstrap), topic, [b"a", b"b", b"c"])

    request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(
        ListOffsetsTopic(name=topic, partitions=(ListOffsetsPartition(partition_index=0, timestamp=spec),)),))
    (topic_response,) = raw.call(request).topics
    (partition,) = topic_response.partitions

    assert partition.error_code == ErrorCode.none
    assert (partition.offset, partition.timestamp) == expected


def test_list_offsets_max_timestamp_names_the_record_with_the_largest_timestamp(
    bootstrap: str, topic: str, raw: RawClient
) -> None:
    t0 = int(time.time() * 1000) - 20_000
    prod = producer(bootstrap)
    for i, ts in enumerate([t0, t0 + 500, t0 + 100]):
        prod.produce(topic, value=f"r{i}".encode(), timestamp=ts)
        assert prod.flush(10) == 0

    request = R8(replica_id=-1, isolation_level=0, topics=(
        T8(name=topic, partitions=(P8(partition_index=0, timestamp=MAX_TIMESTAMP),)),))
    (topic_response,) = raw.call(request).topics
    (partition,) = topic_response.partitions

    assert (partition.error_code, partition.offset, partition.timestamp) == (ErrorCode.none, 1, t0 + 500)


def test_fetch_of_two_partitions_is_cut_by_the_request_max_bytes(
    bootstrap: str, new_topic: Callable[..., str], raw: RawClient
) -> None:
    topic = new_topic(partitions=2)
    for p in (0, 1):
        prod = producer(bootstrap, {"linger.ms": 0})
        for _ in range(4):
            produce_all(prod, topic, [os.urandom(20_000)], partition=p)

    response = fetch(raw, topic, partition_max_bytes=1 << 20, max_bytes=50_000, offsets={0: 0, 1: 0})

    total = sum(len(p.records or b"") for t in response.responses for p in t.partitions)
    assert total <= 50_000
    whole = sum(len(decode_batches(p.records or b"")) for t in response.responses for p in t.partitions)
    assert whole == 2  # two 20 kB batches fit in 50 kB, a third does not

"""Fetch against Apache Kafka: out-of-range offsets, the high watermark, byte limits, sessions, topic ids."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from compat_harness.entities import request
from compat_harness.scenario import Broker, Result, ScenarioFn, scenario_params
from compat_harness.steps import BASE_TS, batch, create_topic, fetch, metadata, produce

from tidelog.protocol.apis import ApiKey


def _three_batches(b: Broker, name: str) -> None:
    for i in range(3):
        produce(b, None, name, batch([b"value-%d-%d" % (i, j) for j in range(2)], timestamp_ms=BASE_TS + i))


def scenario_fetch_offset_out_of_range(b: Broker) -> None:
    """Fetch beyond the log end (offset 100 of 6) and before the log start (-5): OFFSET_OUT_OF_RANGE
    with the partition's high watermark and log start offset."""
    name = b.topic()
    create_topic(b, name, 1)
    _three_batches(b, name)
    fetch(b, "fetch offset 100", name, 100)
    fetch(b, "fetch offset -5", name, -5)
    fetch(b, "fetch offset 7 (end + 1)", name, 7)


def scenario_fetch_at_high_watermark(b: Broker) -> None:
    """Fetch exactly at the high watermark: no error, no records (with max_wait 0)."""
    name = b.topic()
    create_topic(b, name, 1)
    _three_batches(b, name)
    fetch(b, "fetch at hw", name, 6, max_wait_ms=0, min_bytes=1)


def scenario_fetch_empty_topic(b: Broker) -> None:
    """Fetch offset 0 of a topic that has never had a record."""
    name = b.topic()
    create_topic(b, name, 1)
    fetch(b, "fetch offset 0", name, 0, max_wait_ms=0)
    fetch(b, "fetch offset 1", name, 1, max_wait_ms=0)


def scenario_fetch_mid_batch_offset(b: Broker) -> None:
    """Fetch from an offset inside a batch (1 of batch 0-1): the whole batch comes back (clients skip
    the records before their offset)."""
    name = b.topic()
    create_topic(b, name, 1)
    _three_batches(b, name)
    fetch(b, "fetch offset 1", name, 1)


def scenario_fetch_partition_max_bytes_smaller_than_batch(b: Broker) -> None:
    """partition_max_bytes of 10, below the first batch's size: the first batch is still returned
    whole (KIP-74) so that a consumer always makes progress."""
    name = b.topic()
    create_topic(b, name, 1)
    _three_batches(b, name)
    fetch(b, "partition max 10", name, 0, partition_max_bytes=10)
    fetch(b, "partition max 10 at offset 2", name, 2, partition_max_bytes=10)


def scenario_fetch_max_bytes_smaller_than_batch(b: Broker) -> None:
    """Response-level max_bytes of 10 (partition limit large): the first batch is still returned."""
    name = b.topic()
    create_topic(b, name, 1)
    _three_batches(b, name)
    fetch(b, "max bytes 10", name, 0, max_bytes=10)


def scenario_fetch_limit_between_batches(b: Broker) -> None:
    """partition_max_bytes that covers one batch and a part of the next: what comes after the
    first whole batch (nothing, or a partial batch clients drop)."""
    name = b.topic()
    create_topic(b, name, 1)
    _three_batches(b, name)
    whole = fetch(b, None, name, 0, partition_max_bytes=1 << 20)
    records = whole.responses[0].partitions[0].records or b""
    first_batch = 12 + int.from_bytes(records[8:12], "big")
    fetch(b, "first batch + 20 bytes", name, 0, partition_max_bytes=first_batch + 20)
    fetch(b, "exactly two batches", name, 0, partition_max_bytes=2 * first_batch)


def scenario_fetch_unknown_topic_and_partition(b: Broker) -> None:
    """Fetch from a topic that does not exist, and from partition 3 of a one-partition topic."""
    name = b.topic()
    create_topic(b, name, 1)
    fetch(b, "unknown topic", b.topic("-missing"), 0)
    fetch(b, "unknown partition", name, 0, partition=3)


def scenario_fetch_by_topic_id(b: Broker) -> None:
    """Fetch v13+ names topics by id: the right id returns the records, an unknown id returns
    UNKNOWN_TOPIC_ID."""
    name = b.topic()
    create_topic(b, name, 1)
    _three_batches(b, name)
    topic_id = metadata(b, None, [name]).topics[0].topic_id
    for version, tid in ((13, topic_id), (16, topic_id), (16, uuid.UUID(int=12345))):
        label = f"fetch v{version} {'known' if tid == topic_id else 'unknown'} id"
        b.call(label, request(
            ApiKey.FETCH, version, max_wait=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
            session_id=0, session_epoch=-1, forgotten_topics_data=[],
            topics=[{"topic_id": tid, "partitions": [{"partition": 0, "fetch_offset": 2, "partition_max_bytes": 1 << 20}]}],
        ))


def scenario_fetch_versions(b: Broker) -> None:
    """The same fetch at v4 (oldest accepted), v7 (sessions), v11 and v12 (first flexible)."""
    name = b.topic()
    create_topic(b, name, 1)
    _three_batches(b, name)
    for version in (4, 7, 11, 12):
        fields = {"max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0}
        partition = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
        if version >= 7:
            fields.update(session_id=0, session_epoch=-1, forgotten_topics_data=[])
        if version >= 11:
            fields["rack_id"] = ""
        if version >= 9:
            partition["current_leader_epoch"] = -1
        if version >= 5:
            partition["log_start_offset"] = -1
        b.call(f"fetch v{version}", request(ApiKey.FETCH, version, **fields,
                                            topics=[{"topic": name, "partitions": [partition]}]))


def scenario_fetch_session(b: Broker) -> None:
    """A full fetch that opens a session (epoch 0), then incremental fetches: with nothing new the
    partition is left out; after a produce it is back with the new records; a wrong epoch is
    INVALID_FETCH_SESSION_EPOCH; an unknown session id is FETCH_SESSION_ID_NOT_FOUND."""
    name = b.topic()
    create_topic(b, name, 1)
    produce(b, None, name, batch([b"one"]))

    def session_fetch(label: str, session_id: int, epoch: int, offset: int | None) -> object:
        partitions = [] if offset is None else [{"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}]
        topics = [{"topic": name, "partitions": partitions}] if partitions else []
        return b.call(label, request(ApiKey.FETCH, 12, max_wait=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                                     session_id=session_id, session_epoch=epoch, topics=topics,
                                     forgotten_topics_data=[]))

    opened = session_fetch("open session", 0, 0, 0)
    session_id = int(getattr(opened, "session_id", 0))
    session_fetch("incremental, offset moved to 1", session_id, 1, 1)
    session_fetch("incremental, nothing new", session_id, 2, None)
    produce(b, None, name, batch([b"two"]))
    session_fetch("incremental after produce", session_id, 3, None)
    session_fetch("wrong epoch", session_id, 7, None)
    session_fetch("unknown session id", session_id + 1, 1, None)


@pytest.mark.parametrize("scenario", scenario_params(globals()))
def test_same_as_kafka(scenario: ScenarioFn, compare_with_kafka: Callable[[ScenarioFn], Result]) -> None:
    compare_with_kafka(scenario)

"""ListOffsets, OffsetForLeaderEpoch and DeleteRecords against Apache Kafka."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from compat_harness.entities import request
from compat_harness.scenario import Broker, Result, ScenarioFn, scenario_params
from compat_harness.steps import (
    BASE_TS,
    batch,
    create_topic,
    delete_records,
    fetch,
    list_offsets,
    produce,
)

from tidelog.protocol.apis import ApiKey

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5


def _three_batches(b: Broker, name: str) -> None:
    """Offsets 0-1 at BASE_TS, 2-3 at BASE_TS+1000, 4-5 at BASE_TS+2000."""
    for i in range(3):
        produce(b, "produce", name, batch([b"a%d" % i, b"b%d" % i], timestamp_ms=BASE_TS + 1000 * i))


def scenario_list_offsets_by_timestamp(b: Broker) -> None:
    """ListOffsets v9 by timestamp: before the first record, exactly a batch's timestamp, between
    two batches, after the last; and the special values -1 (latest), -2 (earliest), -3 (max
    timestamp), -4 (earliest local), -5 (latest tiered)."""
    name = b.topic()
    create_topic(b, name, 1)
    _three_batches(b, name)
    for label, ts in (
        ("before first", BASE_TS - 5000), ("exact first", BASE_TS), ("exact second", BASE_TS + 1000),
        ("between second and third", BASE_TS + 1500), ("exact last", BASE_TS + 2000),
        ("after last", BASE_TS + 5000), ("latest (-1)", LATEST), ("earliest (-2)", EARLIEST),
        ("max timestamp (-3)", MAX_TIMESTAMP), ("earliest local (-4)", EARLIEST_LOCAL),
        ("latest tiered (-5)", LATEST_TIERED),
    ):
        list_offsets(b, label, name, ts)


def scenario_list_offsets_empty_topic(b: Broker) -> None:
    """ListOffsets on a topic with no records: latest, earliest, max timestamp, and a timestamp."""
    name = b.topic()
    create_topic(b, name, 1)
    for label, ts in (("latest", LATEST), ("earliest", EARLIEST), ("max timestamp", MAX_TIMESTAMP),
                      ("timestamp", BASE_TS)):
        list_offsets(b, label, name, ts)


def scenario_list_offsets_versions(b: Broker) -> None:
    """Latest, earliest and a timestamp at v1 (oldest), v4 (leader epochs), v6 (flexible), v7 (max
    timestamp) and v10 (timeout field)."""
    name = b.topic()
    create_topic(b, name, 1)
    _three_batches(b, name)
    for version in (1, 4, 6, 7, 10):
        for label, ts in (("latest", LATEST), ("earliest", EARLIEST), ("ts", BASE_TS + 1000)):
            fields = {"replica_id": -1, "topics": [{"name": name, "partitions": [
                {"partition_index": 0, "timestamp": ts, **({"current_leader_epoch": -1} if version >= 4 else {})},
            ]}]}
            if version >= 2:
                fields["isolation_level"] = 0
            if version >= 10:
                fields["timeout"] = 10_000
            b.call(f"v{version} {label}", request(ApiKey.LIST_OFFSETS, version, **fields))
    list_offsets(b, "v9 max timestamp", name, MAX_TIMESTAMP)


def scenario_list_offsets_unknown_topic_and_partition(b: Broker) -> None:
    """ListOffsets for a missing topic and for partition 4 of a one-partition topic."""
    name = b.topic()
    create_topic(b, name, 1)
    list_offsets(b, "unknown topic", b.topic("-missing"), LATEST)
    list_offsets(b, "unknown partition", name, LATEST, partition=4)


def scenario_list_offsets_read_committed(b: Broker) -> None:
    """ListOffsets latest with isolation READ_COMMITTED (no transactions: the last stable offset is
    the high watermark)."""
    name = b.topic()
    create_topic(b, name, 1)
    _three_batches(b, name)
    list_offsets(b, "latest read_committed", name, LATEST, isolation_level=1)


def scenario_offset_for_leader_epoch(b: Broker) -> None:
    """OffsetForLeaderEpoch v4 (consumer form, replica_id -2): epoch 0 ends at the log end; an
    epoch above the current one; an unknown topic and partition."""
    name = b.topic()
    create_topic(b, name, 1)
    _three_batches(b, name)

    def ask(label: str, topic: str, partition: int, epoch: int, current: int = -1) -> None:
        b.call(label, request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, replica_id=-2, topics=[
            {"topic": topic, "partitions": [{"partition": partition, "current_leader_epoch": current,
                                             "leader_epoch": epoch}]},
        ]))

    ask("epoch 0", name, 0, 0)
    ask("epoch 0 with current epoch 0", name, 0, 0, current=0)
    ask("epoch 5", name, 0, 5)
    ask("fenced: current epoch 3", name, 0, 0, current=3)
    ask("unknown topic", b.topic("-missing"), 0, 0)
    ask("unknown partition", name, 7, 0)


def scenario_delete_records(b: Broker) -> None:
    """DeleteRecords up to 3 moves the log start (low watermark); beyond the high watermark is
    OFFSET_OUT_OF_RANGE; -1 means the high watermark; afterwards earliest offsets and fetches below
    the log start follow."""
    name = b.topic()
    create_topic(b, name, 1)
    _three_batches(b, name)
    delete_records(b, "delete before 3", name, 3)
    delete_records(b, "delete before 100 (beyond hw)", name, 100)
    delete_records(b, "delete before 1 (below log start)", name, 1)
    list_offsets(b, "earliest", name, EARLIEST)
    fetch(b, "fetch offset 0", name, 0)
    fetch(b, "fetch offset 3", name, 3)
    delete_records(b, "delete before -1 (hw)", name, -1)
    list_offsets(b, "earliest after -1", name, EARLIEST)
    list_offsets(b, "latest after -1", name, LATEST)
    delete_records(b, "unknown partition", name, 0, partition=9)
    delete_records(b, "unknown topic", b.topic("-missing"), 0)


@pytest.mark.parametrize("scenario", scenario_params(globals()))
def test_same_as_kafka(scenario: ScenarioFn, compare_with_kafka: Callable[[ScenarioFn], Result]) -> None:
    compare_with_kafka(scenario)

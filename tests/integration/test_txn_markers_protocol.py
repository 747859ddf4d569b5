"""WriteTxnMarkers (API 27) on one broker, over a raw socket: what a coordinator on another broker
would send. The cluster behaviour (followers, coordinator epochs, failover) is in
test_cluster_transactions.py."""

from __future__ import annotations

from collections.abc import Callable

from kio.schema.types import ProducerId, TopicName
from kio.schema.write_txn_markers.v1 import request as wtm
from kio.static.primitive import i16, i32

from helpers.broker_process import BrokerProcess
from helpers.clients import create_topic, unique_topic
from helpers.raw_client import RawClient

NONE, UNKNOWN_TOPIC_OR_PARTITION, CLUSTER_AUTHORIZATION_FAILED = 0, 3, 31


def send_markers(broker: BrokerProcess, *targets: tuple[str, int], producer_id: int = 777) -> list[tuple[str, int, int]]:
    with RawClient(broker.host, broker.port) as client:
        response = client.call(wtm.WriteTxnMarkersRequest(markers=(wtm.WritableTxnMarker(
            producer_id=ProducerId(producer_id), producer_epoch=i16(0), transaction_result=True,
            coordinator_epoch=i32(0),
            topics=tuple(wtm.WritableTxnMarkerTopic(name=TopicName(t), partition_indexes=(i32(p),)) for t, p in targets),
        ),)))
    return [(str(t.name), int(p.partition_index), int(p.error_code))
            for m in response.markers for t in m.topics for p in t.partitions]


def test_markers_are_written_per_partition_and_unknown_partitions_refused(fresh_broker: Callable[..., BrokerProcess]) -> None:
    broker = fresh_broker()
    topic = create_topic(broker.bootstrap, unique_topic(), 2)
    assert send_markers(broker, (topic, 1), ("no-such-topic", 0)) == [
        (topic, 1, NONE), ("no-such-topic", 0, UNKNOWN_TOPIC_OR_PARTITION)]


def test_markers_need_cluster_action(fresh_broker: Callable[..., BrokerProcess]) -> None:
    broker = fresh_broker({"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"})
    assert send_markers(broker, ("anything", 0)) == [("anything", 0, CLUSTER_AUTHORIZATION_FAILED)]

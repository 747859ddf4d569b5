"""Transaction APIs on the wire: error codes per version, DescribeTransactions, ListTransactions.

Driven with kio requests over a raw socket, so each answer is the broker's own, not a client's
interpretation of it.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator

import pytest
from kio.schema.add_partitions_to_txn.v1.request import AddPartitionsToTxnRequest as AddPartitionsV1
from kio.schema.add_partitions_to_txn.v1.request import AddPartitionsToTxnTopic as AddTopicV1
from kio.schema.add_partitions_to_txn.v3.request import AddPartitionsToTxnRequest as AddPartitionsV3
from kio.schema.add_partitions_to_txn.v3.request import AddPartitionsToTxnTopic as AddTopicV3
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.end_txn.v1.request import EndTxnRequest as EndTxnV1
from kio.schema.end_txn.v3.request import EndTxnRequest as EndTxnV3
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.static.primitive import i8, i16, i32, i64

from helpers.broker_process import BrokerProcess
from helpers.clients import create_topic, unique_topic
from helpers.raw_client import RawClient

NONE, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, INVALID_PRODUCER_ID_MAPPING = 0, 47, 48, 49
INVALID_TRANSACTION_TIMEOUT, CONCURRENT_TRANSACTIONS, PRODUCER_FENCED = 50, 51, 90
UNKNOWN_TOPIC_OR_PARTITION, OPERATION_NOT_ATTEMPTED = 3, 55


@pytest.fixture
def txn_broker(fresh_broker: Callable[..., BrokerProcess]) -> BrokerProcess:
    return fresh_broker({"transaction.state.log.num.partitions": "2", "transaction.max.timeout.ms": "60000"})


@pytest.fixture
def client(txn_broker: BrokerProcess) -> Iterator[RawClient]:
    with RawClient(txn_broker.host, txn_broker.port) as raw:
        found = raw.call(FindCoordinatorRequest(key_type=i8(1), coordinator_keys=("warm-up",)))
        assert [int(c.error_code) for c in found.coordinators] == [NONE]
        yield raw


def init(client: RawClient, txn: str, timeout_ms: int = 30_000, pid: int = -1, epoch: int = -1) -> tuple[int, int, int]:
    r = client.call(InitProducerIdRequest(transactional_id=TransactionalId(txn),
                                          transaction_timeout=datetime.timedelta(milliseconds=timeout_ms),
                                          producer_id=ProducerId(pid), producer_epoch=i16(epoch)))
    return int(r.error_code), int(r.producer_id), int(r.producer_epoch)


def add(client: RawClient, txn: str, pid: int, epoch: int, topic: str, partitions: tuple[int, ...] = (0,)) -> list[int]:
    r = client.call(AddPartitionsV3(v3_and_below_transactional_id=TransactionalId(txn),
                                    v3_and_below_producer_id=ProducerId(pid), v3_and_below_producer_epoch=i16(epoch),
                                    v3_and_below_topics=(AddTopicV3(name=TopicName(topic), partitions=tuple(i32(p) for p in partitions)),)))
    return [int(p.partition_error_code) for t in r.results_by_topic_v3_and_below for p in t.results_by_partition]


def test_transaction_apis_are_advertised_within_kafkas_client_ranges(client: RawClient) -> None:
    keys = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in client.call(
        ApiVersionsRequest(client_software_name="t", client_software_version="1")).api_keys}
    assert keys[22] == (0, 5) and keys[24] == (0, 3) and keys[25] == (0, 4)
    assert keys[26] == (0, 5) and keys[28] == (0, 5) and keys[65] == (0, 0) and keys[66] == (0, 1)


def test_init_refuses_timeouts_above_the_maximum_and_unknown_producers(client: RawClient) -> None:
    assert init(client, "a", timeout_ms=60_001)[0] == INVALID_TRANSACTION_TIMEOUT
    error, pid, epoch = init(client, "a", pid=12345, epoch=0)  # unknown id: starts afresh, as in Kafka
    assert (error, epoch) == (NONE, 0) and pid not in (-1, 12345)
    assert init(client, "a", pid=12345, epoch=0)[0] == PRODUCER_FENCED


def test_add_partitions_and_end_txn_errors(client: RawClient, txn_broker: BrokerProcess) -> None:
    topic = create_topic(txn_broker.bootstrap, unique_topic(), 2)
    _, pid, epoch = init(client, "b")
    assert add(client, "b", pid, epoch, topic, (0, 7)) == [OPERATION_NOT_ATTEMPTED, UNKNOWN_TOPIC_OR_PARTITION]
    end = client.call(EndTxnV3(transactional_id=TransactionalId("b"), producer_id=ProducerId(pid),
                               producer_epoch=i16(epoch), committed=True))
    assert int(end.error_code) == INVALID_TXN_STATE  # nothing was added
    assert add(client, "b", pid + 1, epoch, topic) == [INVALID_PRODUCER_ID_MAPPING]
    assert add(client, "b", pid, epoch, topic, (0, 1)) == [NONE, NONE]
    # A second producer fences the first: PRODUCER_FENCED from v2, INVALID_PRODUCER_EPOCH before.
    assert init(client, "b")[0] == CONCURRENT_TRANSACTIONS
    assert init(client, "b")[2] == epoch + 2
    assert add(client, "b", pid, epoch, topic) == [PRODUCER_FENCED]
    old = client.call(AddPartitionsV1(v3_and_below_transactional_id=TransactionalId("b"),
                                      v3_and_below_producer_id=ProducerId(pid), v3_and_below_producer_epoch=i16(epoch),
                                      v3_and_below_topics=(AddTopicV1(name=TopicName(topic), partitions=(i32(0),)),)))
    assert [int(p.partition_error_code) for t in old.results_by_topic_v3_and_below for p in t.results_by_partition] == [INVALID_PRODUCER_EPOCH]
    end_v1 = client.call(EndTxnV1(transactional_id=TransactionalId("b"), producer_id=ProducerId(pid),
                                  producer_epoch=i16(epoch), committed=True))
    assert int(end_v1.error_code) == INVALID_PRODUCER_EPOCH


def test_describe_and_list_transactions(client: RawClient, txn_broker: BrokerProcess) -> None:
    topic = create_topic(txn_broker.bootstrap, unique_topic(), 2)
    _, pid, epoch = init(client, "open-one", timeout_ms=45_000)
    assert add(client, "open-one", pid, epoch, topic, (1, 0)) == [NONE, NONE]
    init(client, "idle-one")
    # Only ids with a start time: an unknown id is answered, as by Kafka, with start time -1, which
    # kio refuses to decode (it has no negative timestamps).
    described = client.call(DescribeTransactionsRequest(transactional_ids=(TransactionalId("open-one"),)))
    [first] = described.transaction_states
    assert (int(first.error_code), first.transaction_state, int(first.producer_id)) == (NONE, "Ongoing", pid)
    assert first.transaction_timeout == datetime.timedelta(milliseconds=45_000)
    assert [(t.topic, tuple(int(p) for p in t.partitions)) for t in first.topics] == [(topic, (0, 1))]
    every = client.call(ListTransactionsRequest(state_filters=(), producer_id_filters=(), duration_filter=i64(-1)))
    assert {(t.transactional_id, t.transaction_state) for t in every.transaction_states} == {
        ("open-one", "Ongoing"), ("idle-one", "Empty")}
    ongoing = client.call(ListTransactionsRequest(state_filters=("Ongoing", "Nonsense"), producer_id_filters=(),
                                                  duration_filter=i64(-1)))
    assert [t.transactional_id for t in ongoing.transaction_states] == ["open-one"]
    assert list(ongoing.unknown_state_filters) == ["Nonsense"]
    old_enough = client.call(ListTransactionsRequest(state_filters=(), producer_id_filters=(), duration_filter=i64(3_600_000)))
    assert list(old_enough.transaction_states) == []

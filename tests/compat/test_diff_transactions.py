"""Transaction coordinator errors against Apache Kafka: timeouts, unknown producers, empty
transactions, unverified produce, unknown partitions, fencing.

A whole commit is not compared: the reference Kafka of this tier answers EndTxn and then leaves the
transaction in PrepareCommit (its markers never complete here), which says more about the test
cluster than about Kafka. tests/integration/test_transactions_*.py cover commits with real clients.

Versions are those of a transactions-v1 client (InitProducerId v4, AddPartitionsToTxn v3, EndTxn v3),
what librdkafka and kafka-python send.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from compat_harness.entities import build, request
from compat_harness.scenario import Broker, Result, ScenarioFn, scenario_params
from compat_harness.steps import BASE_TS, create_topic
from kio.index import load_request_schema

from tidelog.protocol.apis import ApiKey
from tidelog.protocol.records import Record, build_batch

CONCURRENT_TRANSACTIONS, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR = 51, 15, 14, 16
RETRIED = (CONCURRENT_TRANSACTIONS, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR)


def _quietly(b: Broker, req: Any) -> Any:
    """Send until the answer is not one clients retry (the coordinator starting, markers going out)."""
    for _ in range(150):
        response = b.quiet(req)
        if getattr(response, "error_code", 0) not in RETRIED:
            return response
        time.sleep(0.1)
    return response


def _find_coordinator(b: Broker, txn: str) -> None:
    # (entities.request takes ``key`` for the API key, hence build().)
    _quietly(b, build(load_request_schema(int(ApiKey.FIND_COORDINATOR), 3), {"key": txn, "key_type": 1}))


def _init(b: Broker, label: str | None, txn: str, timeout_ms: int = 60_000, pid: int = -1, epoch: int = -1) -> tuple[int, int]:
    response = _quietly(b, request(ApiKey.INIT_PRODUCER_ID, 4, transactional_id=txn, transaction_timeout=timeout_ms,
                                   producer_id=pid, producer_epoch=epoch))
    if label is not None:
        b.record(label, response)
    return int(response.producer_id), int(response.producer_epoch)


def _add(b: Broker, label: str, txn: str, pid: int, epoch: int, topic: str, partitions: list[int]) -> None:
    b.call(label, request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, v3_and_below_transactional_id=txn,
                          v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
                          v3_and_below_topics=[{"name": topic, "partitions": partitions}]))


def _end(b: Broker, label: str, txn: str, pid: int, epoch: int, commit: bool) -> None:
    b.record(label, _quietly(b, request(ApiKey.END_TXN, 3, transactional_id=txn, producer_id=pid,
                                        producer_epoch=epoch, committed=commit)))


def _produce(b: Broker, label: str, txn: str, topic: str, pid: int, epoch: int, sequence: int, values: list[bytes]) -> None:
    records = build_batch([Record(i, BASE_TS, None, v) for i, v in enumerate(values)], producer_id=pid,
                          producer_epoch=epoch, base_sequence=sequence, transactional=True)
    b.call(label, request(ApiKey.PRODUCE, 9, transactional_id=txn, acks=-1, timeout=10_000, topic_data=[
        {"name": topic, "partition_data": [{"index": 0, "records": records}]},
    ]))


def scenario_txn_init_errors(b: Broker) -> None:
    """InitProducerId with a transactional id: a timeout above transaction.max.timeout.ms, an unknown
    producer id named (KIP-360), then a fresh producer (epoch 0) and a second one (epoch 1)."""
    txn = b.topic("-txn")
    _find_coordinator(b, txn)
    _init(b, "timeout too long", txn, timeout_ms=900_001)
    _init(b, "unknown producer named", txn, pid=123_456, epoch=0)
    _init(b, "first", txn)
    _init(b, "second", txn)


def scenario_txn_request_errors(b: Broker) -> None:
    """EndTxn with nothing added; a transactional Produce to a partition not added; AddPartitionsToTxn with an unknown partition, with a wrong producer
    id; a second InitProducerId fencing an open transaction, then the fenced producer's requests."""
    name, txn = b.topic(), b.topic("-txn")
    create_topic(b, name, 2)
    _find_coordinator(b, txn)
    pid, epoch = _init(b, None, txn)
    _end(b, "end with nothing added", txn, pid, epoch, True)
    _produce(b, "produce before add", txn, name, pid, epoch, 0, [b"x"])
    _add(b, "unknown partition", txn, pid, epoch, name, [0, 9])
    _add(b, "wrong producer id", txn, pid + 1, epoch, name, [0])
    _add(b, "add", txn, pid, epoch, name, [0, 1])
    _, new_epoch = _init(b, "fencing init", txn)
    b.note("epoch bumped twice", new_epoch - epoch)
    _add(b, "fenced add", txn, pid, epoch, name, [0])
    _end(b, "fenced end", txn, pid, epoch, True)


@pytest.mark.parametrize("scenario", scenario_params(globals()))
def test_same_as_kafka(scenario: ScenarioFn, compare_with_kafka: Callable[[ScenarioFn], Result]) -> None:
    compare_with_kafka(scenario)

"""Idempotent producers against Apache Kafka: InitProducerId, sequence gaps, duplicates, epochs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from compat_harness.scenario import Broker, Result, ScenarioFn, scenario_params
from compat_harness.steps import batch, create_topic, fetch, init_producer_id, list_offsets, produce


def _producer(b: Broker, label: str = "init producer id") -> tuple[int, int]:
    response: Any = init_producer_id(b, label)
    return int(response.producer_id), int(response.producer_epoch)


def scenario_idempotent_sequence_in_order(b: Broker) -> None:
    """InitProducerId (non-transactional), then batches with sequences 0 and 3: appended at 0 and 3;
    the fetched batches keep producer id, epoch and base sequence."""
    name = b.topic()
    create_topic(b, name, 1)
    pid, epoch = _producer(b)
    produce(b, "seq 0", name, batch([b"a", b"b", b"c"], producer_id=pid, producer_epoch=epoch, base_sequence=0))
    produce(b, "seq 3", name, batch([b"d"], producer_id=pid, producer_epoch=epoch, base_sequence=3))
    fetch(b, "fetch", name, 0)


def scenario_idempotent_duplicate(b: Broker) -> None:
    """A retried batch (same producer, epoch and sequence) is not appended again; the answer carries
    the offset of the original."""
    name = b.topic()
    create_topic(b, name, 1)
    pid, epoch = _producer(b)
    first = batch([b"a", b"b"], producer_id=pid, producer_epoch=epoch, base_sequence=0)
    produce(b, "seq 0", name, first)
    produce(b, "seq 2", name, batch([b"c"], producer_id=pid, producer_epoch=epoch, base_sequence=2))
    produce(b, "seq 0 again", name, first)
    produce(b, "seq 2 again", name, batch([b"c"], producer_id=pid, producer_epoch=epoch, base_sequence=2))
    list_offsets(b, "latest", name, -1)


def scenario_idempotent_sequence_gap(b: Broker) -> None:
    """A sequence that skips ahead (0, then 10) is OUT_OF_ORDER_SEQUENCE_NUMBER; the expected next
    sequence still works afterwards."""
    name = b.topic()
    create_topic(b, name, 1)
    pid, epoch = _producer(b)
    produce(b, "seq 0", name, batch([b"a"], producer_id=pid, producer_epoch=epoch, base_sequence=0))
    produce(b, "seq 10", name, batch([b"b"], producer_id=pid, producer_epoch=epoch, base_sequence=10))
    produce(b, "seq 1", name, batch([b"c"], producer_id=pid, producer_epoch=epoch, base_sequence=1))
    list_offsets(b, "latest", name, -1)


def scenario_idempotent_first_sequence_not_zero(b: Broker) -> None:
    """A new producer's first batch with sequence 5 instead of 0."""
    name = b.topic()
    create_topic(b, name, 1)
    pid, epoch = _producer(b)
    produce(b, "seq 5 first", name, batch([b"a"], producer_id=pid, producer_epoch=epoch, base_sequence=5))
    list_offsets(b, "latest", name, -1)


def scenario_idempotent_old_epoch(b: Broker) -> None:
    """A producer that bumps its own epoch (the Java client does after an unresolved sequence error,
    KIP-360) starts again at sequence 0; a batch from the old epoch is then refused and the new
    epoch carries on."""
    name = b.topic()
    create_topic(b, name, 1)
    pid, epoch = _producer(b)
    produce(b, "epoch 0 seq 0", name, batch([b"a"], producer_id=pid, producer_epoch=epoch, base_sequence=0))
    produce(b, "epoch 1 seq 0", name, batch([b"b"], producer_id=pid, producer_epoch=epoch + 1, base_sequence=0))
    produce(b, "epoch 0 seq 1", name, batch([b"c"], producer_id=pid, producer_epoch=epoch, base_sequence=1))
    produce(b, "epoch 1 seq 1", name, batch([b"d"], producer_id=pid, producer_epoch=epoch + 1, base_sequence=1))
    produce(b, "epoch 3 seq 5", name, batch([b"e"], producer_id=pid, producer_epoch=epoch + 3, base_sequence=5))
    list_offsets(b, "latest", name, -1)


def scenario_idempotent_init_with_current_id(b: Broker) -> None:
    """InitProducerId without a transactional id but naming the current producer id and epoch
    (what a KIP-360 client sends to recover): the answer, and a produce with what it returned."""
    name = b.topic()
    create_topic(b, name, 1)
    pid, epoch = _producer(b)
    produce(b, "seq 0", name, batch([b"a"], producer_id=pid, producer_epoch=epoch, base_sequence=0))
    again: Any = init_producer_id(b, "init with current id", producer_id=pid, producer_epoch=epoch)
    new_pid, new_epoch = int(getattr(again, "producer_id", pid)), int(getattr(again, "producer_epoch", epoch))
    produce(b, "seq 0 as returned", name, batch([b"b"], producer_id=new_pid, producer_epoch=new_epoch, base_sequence=0))
    list_offsets(b, "latest", name, -1)


def scenario_idempotent_wrong_epoch_in_init(b: Broker) -> None:
    """InitProducerId naming a producer id with an epoch that is not its current one."""
    pid, epoch = _producer(b)
    init_producer_id(b, "init with stale epoch + 5", producer_id=pid, producer_epoch=epoch + 5)


def scenario_idempotent_init_versions(b: Broker) -> None:
    """InitProducerId v0 (oldest), v2 (flexible) and v4: one fresh producer each, epoch 0."""
    for version in (0, 2, 4):
        init_producer_id(b, f"init v{version}", version=version)


@pytest.mark.parametrize("scenario", scenario_params(globals()))
def test_same_as_kafka(scenario: ScenarioFn, compare_with_kafka: Callable[[ScenarioFn], Result]) -> None:
    compare_with_kafka(scenario)

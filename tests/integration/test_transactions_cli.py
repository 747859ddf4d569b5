"""`tidelog transactions list|describe|abort` against a broker: finding and aborting a hanging transaction."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from helpers.broker_process import BrokerProcess
from helpers.cli_runner import run_cli
from helpers.clients import create_topic, unique_topic


@pytest.fixture
def txn_broker(fresh_broker: Callable[..., BrokerProcess]) -> BrokerProcess:
    return fresh_broker({"transaction.state.log.num.partitions": "2"})


def run(capsys: pytest.CaptureFixture[str], bootstrap: str, *argv: str) -> tuple[int, str, str]:
    result = run_cli(capsys, *argv, "-b", bootstrap)
    return result.code, result.out, result.err


def test_find_describe_and_abort_a_hanging_transaction(txn_broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    bootstrap = txn_broker.bootstrap
    topic = create_topic(bootstrap, unique_topic(), 2)
    hanging = Producer({"bootstrap.servers": bootstrap, "transactional.id": "hanging", "transaction.timeout.ms": 600_000})
    hanging.init_transactions(20)
    hanging.begin_transaction()
    hanging.produce(topic, b"stuck", partition=1)
    hanging.flush(10)
    idle = Producer({"bootstrap.servers": bootstrap, "transactional.id": "idle"})
    idle.init_transactions(20)

    code, out, _ = run(capsys, bootstrap, "transactions", "list", "--json")
    assert code == 0
    assert {(t["transactional_id"], t["state"]) for t in json.loads(out)} == {("hanging", "Ongoing"), ("idle", "Empty")}
    code, out, _ = run(capsys, bootstrap, "transactions", "list", "--state", "Ongoing")
    assert code == 0 and "hanging" in out and "idle" not in out

    code, out, _ = run(capsys, bootstrap, "transactions", "describe", "hanging", "idle", "nobody", "--json")
    described = {d["transactional_id"]: d for d in json.loads(out)}
    assert code == 1  # "nobody" is unknown
    assert described["hanging"]["state"] == "Ongoing"
    assert described["hanging"]["partitions"] == [f"{topic}-1"]
    assert described["hanging"]["timeout_ms"] == 600_000 and described["hanging"]["start_ms"] > 0
    assert described["idle"]["state"] == "Empty" and described["idle"]["start_ms"] == -1
    assert described["nobody"]["error"] == "TRANSACTIONAL_ID_NOT_FOUND"

    code, _, err = run(capsys, bootstrap, "transactions", "abort", "hanging")
    assert code == 0 and "aborted" in err
    code, out, _ = run(capsys, bootstrap, "transactions", "describe", "hanging", "--json")
    assert json.loads(out)[0]["state"] in ("CompleteAbort", "Empty")
    # The partition is stable again and the old producer is fenced.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, 1, 0)])
    seen = [m for m in (consumer.poll(0.3) for _ in range(10)) if m is not None and m.error() is None]
    position = consumer.position([TopicPartition(topic, 1)])[0].offset
    consumer.close()
    assert seen == [] and position == 2  # past the aborted record and its marker
    with pytest.raises(KafkaException):
        hanging.commit_transaction(10)

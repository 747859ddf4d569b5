"""Exactly-once copying through SIGKILLs of the copier and of the broker.

A confluent-kafka consume-transform-produce loop (a subprocess) copies every record of a 2-partition
input topic to an output topic, one transaction per batch: the records it produced and the input
offsets it consumed (``send_offsets_to_transaction``) commit together. The test kills the copier
with SIGKILL at random moments and starts it again (its ``init_transactions`` fences and aborts the
transaction the dead one left open); in the second test the broker is killed too. At the end a
read_committed consumer sees every input record in the output exactly once, in input order per
partition.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from helpers.broker_process import BrokerProcess
from helpers.clients import create_topic, unique_topic

PARTITIONS = 2
RECORDS = 16000
BROKER = {
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
    "group.initial.rebalance.delay.ms": "0",
}

# The copier: assigns itself the input partitions at the group's committed offsets (read with
# require_stable, so an offset a transaction still holds is waited for), then loops: consume a batch,
# produce it to the same output partition, send the consumed positions, commit, pause 10 ms (about
# 640 transactions: the copy lasts longer than the kills). Any error ends it; the test starts it again.
COPIER = """
import sys
import time
from confluent_kafka import Consumer, Producer, TopicPartition
bootstrap, source, target, partitions = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "copier", "isolation.level": "read_committed",
                     "enable.auto.commit": False, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 50})
producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "copier-tx", "linger.ms": 2,
                     "transaction.timeout.ms": 10000})
producer.init_transactions(30)
committed = consumer.committed([TopicPartition(source, p) for p in range(partitions)], 30)
consumer.assign([TopicPartition(source, tp.partition, max(tp.offset, 0)) for tp in committed])
print("copier started at", [(tp.partition, tp.offset) for tp in committed], flush=True)
while True:
    messages = [m for m in consumer.consume(25, 0.3) if m.error() is None]
    if not messages:
        continue
    producer.begin_transaction()
    for m in messages:
        producer.produce(target, m.value(), m.key(), partition=m.partition())
    producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                         consumer.consumer_group_metadata(), 30)
    producer.commit_transaction(30)
    time.sleep(0.01)  # paced, so that the test's kills land mid-copy however fast the broker commits
"""


class Copier:
    def __init__(self, workdir: Path, bootstrap: str, source: str, target: str) -> None:
        self.args = [sys.executable, "-c", COPIER, bootstrap, source, target, str(PARTITIONS)]
        self.log = (workdir / "copier.log").open("ab")
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        self.log.write(f"=== copier start #{self.starts} ===\n".encode())
        self.log.flush()
        self.process = subprocess.Popen(self.args, stdout=self.log, stderr=self.log)

    def ensure_running(self) -> None:
        if self.process is None or self.process.poll() is not None:
            self.start()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def close(self) -> None:
        self.kill()
        self.log.close()


def fill_input(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    sent: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for i in range(RECORDS):
        partition = i % PARTITIONS
        value = f"record-{i:05d}".encode()
        producer.produce(topic, value, partition=partition)
        sent[partition].append(value)
    assert producer.flush(30) == 0
    return sent


def read_output(bootstrap: str, topic: str, expected: int, timeout: float) -> dict[int, list[bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + timeout
    count = 0
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None or message.error() is not None:
                if count >= expected and message is None:
                    break
                continue
            got[message.partition()].append(message.value())
            count += 1
    finally:
        consumer.close()
    return got


def copy_with_kills(tmp_path: Path, broker: BrokerProcess, kill_broker: bool) -> None:
    source, target = unique_topic("in"), unique_topic("out")
    create_topic(broker.bootstrap, source, PARTITIONS)
    create_topic(broker.bootstrap, target, PARTITIONS)
    sent = fill_input(broker.bootstrap, source)
    copier = Copier(tmp_path, broker.bootstrap, source, target)
    rng = random.Random(20261129)
    progress_at_kills = []
    try:
        copier.start()
        for round_ in range(5):
            time.sleep(rng.uniform(0.8, 1.8))
            if kill_broker and round_ in (1, 3):
                broker.kill9()  # the copier keeps running: its open transaction dies with the broker
                broker.start()
            else:
                copier.kill()
            progress_at_kills.append(_committed_total(broker.bootstrap, source))
            copier.ensure_running()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            # The last copier finishes the copy; restart it if it stopped on an error.
            copier.ensure_running()
            if _committed_total(broker.bootstrap, source) >= RECORDS:
                break
            time.sleep(0.5)
    finally:
        copier.close()
    assert copier.starts >= (4 if kill_broker else 6)
    mid_copy = [n for n in progress_at_kills if 0 < n < RECORDS]
    assert len(mid_copy) >= 3, f"the kills must land mid-copy (committed at each kill: {progress_at_kills})"
    got = read_output(broker.bootstrap, target, RECORDS, timeout=20)
    for partition in range(PARTITIONS):
        assert len(got[partition]) == len(sent[partition]), f"partition {partition}: duplicates or losses"
        assert got[partition] == sent[partition], f"partition {partition}: out of order"


def _committed_total(bootstrap: str, topic: str) -> int:
    # read_uncommitted: no require_stable, so offsets a killed copier's open transaction holds do not
    # make this wait (read_committed consumers get UNSTABLE_OFFSET_COMMIT until the abort).
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "copier", "enable.auto.commit": False,
                         "isolation.level": "read_uncommitted"})
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 10)
    finally:
        consumer.close()
    return sum(max(tp.offset, 0) for tp in committed)


def test_copier_killed_repeatedly_copies_every_record_exactly_once(
    tmp_path: Path, fresh_broker: Callable[..., BrokerProcess],
) -> None:
    copy_with_kills(tmp_path, fresh_broker(BROKER), kill_broker=False)


def test_broker_killed_mid_transaction_leaves_every_transaction_whole(
    tmp_path: Path, fresh_broker: Callable[..., BrokerProcess],
) -> None:
    copy_with_kills(tmp_path, fresh_broker(BROKER), kill_broker=True)

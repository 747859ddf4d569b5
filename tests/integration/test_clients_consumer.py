"""LogConsumer against a real broker: worker pool, exact commits, back-pressure, exactly-once
transforms, the process/commit/rollback interface and the dead-letter topic."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from helpers.broker_process import GROUP_TEST_BROKER, REPO_ROOT, BrokerProcess, module_broker, wait_until
from helpers.clients import FAST_CLIENT, consume, create_topic, producer, unique_topic
from helpers.flaky_handler import FlakyHandler
from helpers.ledger import check_exactly_once
from tidelog.clients import ConsumedRecord, HandlerError, LogConsumer, OutputRecord
from tidelog.common.errors import ConfigError

PARTITIONS = 3
group_broker = module_broker("group_broker", {
    **GROUP_TEST_BROKER, "transaction.state.log.num.partitions": 3, "auto.create.topics.enable": "false",
})


def consumer_config(bootstrap: str, group: str, **extra: object) -> dict[str, object]:
    return {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "fetch.wait.max.ms": 50, **FAST_CLIENT, **extra}


def fill(bootstrap: str, topic: str, count: int, keys: int = 30) -> dict[bytes, int]:
    """``count`` records ``k<i % keys>`` -> per-key sequence numbers; returns records per key."""
    prod = producer(bootstrap, {"enable.idempotence": True})
    sent: dict[bytes, int] = {}
    for i in range(count):
        key = f"k{i % keys}".encode()
        prod.produce(topic, str(sent.get(key, 0)).encode(), key)
        sent[key] = sent.get(key, 0) + 1
        prod.poll(0)
    assert prod.flush(30) == 0
    return sent


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    cons = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = cons.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        cons.close()


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    cons = Consumer({"bootstrap.servers": bootstrap, "group.id": "x"})
    try:
        return {p: cons.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
    finally:
        cons.close()


@pytest.fixture
def topic_in(group_broker: BrokerProcess) -> str:
    return create_topic(group_broker.bootstrap, unique_topic("in"), PARTITIONS)


@pytest.fixture
def running() -> Iterator[list[LogConsumer]]:
    consumers: list[LogConsumer] = []
    yield consumers
    for c in consumers:
        try:
            c.stop(10)
        except HandlerError:
            pass


def test_out_of_order_finishes_commit_only_the_done_prefix_and_every_record_is_handled(
    group_broker: BrokerProcess, topic_in: str, running: list[LogConsumer]
) -> None:
    bootstrap = group_broker.bootstrap
    sent = fill(bootstrap, topic_in, 3000)
    handler = FlakyHandler(seed=7)
    handled = handler.handled

    group = unique_topic("g")
    lc = LogConsumer(consumer_config(bootstrap, group), [topic_in], handler, workers=4, retry_backoff_ms=1)
    running.append(lc.start())
    ends = end_offsets(bootstrap, topic_in)
    wait_until(lambda: committed(bootstrap, group, topic_in) == ends, timeout=60, interval=0.3,
               message="every offset committed")
    assert sorted(handled) == sorted((k, s) for k, n in sent.items() for s in range(n))
    metrics = lc.metrics()
    assert metrics.handled_total == 3000 and metrics.retries_total > 0
    assert all(lag == 0 for lag in metrics.lag.values())
    by_key: dict[bytes, list[int]] = {}
    for key, seq in handled:
        by_key.setdefault(key, []).append(seq)
    assert all(seqs == sorted(seqs) for seqs in by_key.values()), "ordering=key: one key at a time, in order"


# The child: a LogConsumer whose handler notes each record and never finishes partition 0's offset 10.
CHILD = """
import sys, threading, time
from tidelog.clients import LogConsumer
bootstrap, topic, group, notes = sys.argv[1:5]
def handler(record):
    if record.partition == 0 and record.offset == 10:
        threading.Event().wait()  # stuck forever: a slow call the process is killed in
    with open(notes, "a") as f:
        f.write(f"{record.partition} {record.offset}\\n")
LogConsumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
             "session.timeout.ms": 6000}, [topic], handler, workers=4, ordering="none", commit_interval_ms=100).run()
"""


def test_a_record_still_running_is_never_committed_and_comes_back_after_a_kill(
    group_broker: BrokerProcess, topic_in: str, tmp_path: Path, running: list[LogConsumer]
) -> None:
    bootstrap = group_broker.bootstrap
    fill(bootstrap, topic_in, 600)
    group, notes = unique_topic("g"), tmp_path / "notes"
    child = subprocess.Popen([sys.executable, "-c", CHILD, bootstrap, topic_in, group, str(notes)],
                             env={"PYTHONPATH": str(REPO_ROOT / "src")}, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: notes.exists() and len(notes.read_text().split("\n")) > 590, timeout=60,
                   message="all but the stuck record handled")
        wait_until(lambda: committed(bootstrap, group, topic_in)[1] == end_offsets(bootstrap, topic_in)[1],
                   timeout=20, message="other partitions committed")
        time.sleep(0.5)  # several commit intervals
        assert committed(bootstrap, group, topic_in)[0] == 10, "partition 0 committed up to the stuck record only"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    redelivered: list[tuple[int, int]] = []
    lock = threading.Lock()

    def note(record: ConsumedRecord) -> None:
        with lock:
            redelivered.append((record.partition, record.offset))

    lc = LogConsumer(consumer_config(bootstrap, group, **{"session.timeout.ms": 6000}), [topic_in], note)
    running.append(lc.start())
    wait_until(lambda: any(r == (0, 10) for r in redelivered), timeout=30, message="offset 10 redelivered")
    assert min(o for p, o in redelivered if p == 0) == 10


def test_slow_workers_pause_partitions_instead_of_missing_polls(
    group_broker: BrokerProcess, topic_in: str, running: list[LogConsumer]
) -> None:
    bootstrap = group_broker.bootstrap
    fill(bootstrap, topic_in, 600)
    paused_seen: list[int] = []
    count = [0]

    def slow(record: ConsumedRecord) -> None:
        time.sleep(0.005)
        count[0] += 1

    group = unique_topic("g")
    # 600 records x 5 ms on one worker is 3 s: past max.poll.interval.ms if polls stopped.
    lc = LogConsumer(consumer_config(bootstrap, group, **{"max.poll.interval.ms": 2000, "session.timeout.ms": 2000}),
                     [topic_in], slow, workers=1, queue_size=10)
    running.append(lc.start())
    deadline = time.monotonic() + 30
    while count[0] < 600 and time.monotonic() < deadline:
        metrics = lc.metrics()
        paused_seen.append(metrics.paused_partitions)
        assert metrics.queued <= 10
        time.sleep(0.05)
    assert count[0] == 600
    assert max(paused_seen) > 0, "the reader paused partitions while the worker was behind"
    assert lc.metrics().rebalances_total == 1, "no rebalance beyond the first assignment"


def test_poison_record_goes_to_the_dead_letter_topic_with_its_story(
    group_broker: BrokerProcess, topic_in: str, running: list[LogConsumer]
) -> None:
    bootstrap = group_broker.bootstrap
    dlq = create_topic(bootstrap, unique_topic("dlq"), 1)
    prod = producer(bootstrap)
    for i in range(100):
        prod.produce(topic_in, b"poison" if i == 42 else str(i).encode(), b"k", partition=1)
    prod.flush(10)
    handled: list[bytes] = []

    def handler(record: ConsumedRecord) -> None:
        if record.value == b"poison":
            raise ValueError("cannot parse")
        handled.append(record.value or b"")

    group = unique_topic("g")
    lc = LogConsumer(consumer_config(bootstrap, group), [topic_in], handler, dlq_topic=dlq, max_retries=2,
                     retry_backoff_ms=1)
    running.append(lc.start())
    wait_until(lambda: committed(bootstrap, group, topic_in).get(1) == 100, timeout=30, message="all committed")
    assert len(handled) == 99
    [dead] = consume(bootstrap, dlq, 1)
    headers = dict(dead.headers() or [])
    assert dead.value() == b"poison"
    assert headers["tidelog.dlq.error"] == b"ValueError('cannot parse')"
    assert (headers["tidelog.dlq.topic"], headers["tidelog.dlq.partition"], headers["tidelog.dlq.offset"],
            headers["tidelog.dlq.attempts"]) == (topic_in.encode(), b"1", b"42", b"3")
    assert lc.metrics().dlq_total == 1


def test_without_a_dead_letter_topic_a_poison_record_stops_the_consumer_before_it(
    group_broker: BrokerProcess, topic_in: str
) -> None:
    bootstrap = group_broker.bootstrap
    prod = producer(bootstrap)
    for i in range(50):
        prod.produce(topic_in, b"poison" if i == 20 else b"ok", partition=2)
    prod.flush(10)

    def handler(record: ConsumedRecord) -> None:
        if record.value == b"poison":
            raise ValueError("bad")

    group = unique_topic("g")
    lc = LogConsumer(consumer_config(bootstrap, group), [topic_in], handler, max_retries=1, retry_backoff_ms=1)
    with pytest.raises(HandlerError, match="failed 2 times"):
        lc.run()
    assert committed(bootstrap, group, topic_in)[2] <= 20


def test_exactly_once_transform_with_a_rebalance_counts_each_output_once(
    group_broker: BrokerProcess, topic_in: str, running: list[LogConsumer]
) -> None:
    bootstrap = group_broker.bootstrap
    sent = fill(bootstrap, topic_in, 3000)
    topic_out = create_topic(bootstrap, unique_topic("out"), PARTITIONS)
    rng = random.Random(3)

    def transform(record: ConsumedRecord) -> list[OutputRecord]:
        if rng.random() < 0.03:
            raise RuntimeError("transient")
        return [OutputRecord(topic_out, record.value, record.key, partition=record.partition)]

    group = unique_topic("g")
    config = consumer_config(bootstrap, group)
    first = LogConsumer(config, [topic_in], transform, mode="exactly-once", retry_backoff_ms=1,
                        commit_interval_ms=200, producer_config={"transactional.id": f"{group}-a"})
    running.append(first.start())
    wait_until(lambda: sum(v for v in committed(bootstrap, group, topic_in).values() if v > 0) > 500,
               timeout=30, message="some transactions committed")
    second = LogConsumer(config, [topic_in], transform, mode="exactly-once", retry_backoff_ms=1,
                         commit_interval_ms=200, producer_config={"transactional.id": f"{group}-b"})
    running.append(second.start())  # the group rebalances: partitions move with their done prefix
    ends = end_offsets(bootstrap, topic_in)
    wait_until(lambda: committed(bootstrap, group, topic_in) == ends, timeout=60, interval=0.3,
               message="every input offset committed")
    out = consume(bootstrap, topic_out, 3000, partitions=range(PARTITIONS), settle=0.5,
                  config={"isolation.level": "read_committed"})
    check_exactly_once([(m.key() or b"", int(m.value() or b"-1")) for m in out], sent)


class StagingHandler:
    """process() stages, commit() makes final (failing once), rollback() throws the stage away."""

    def __init__(self) -> None:
        self.staged: dict[tuple[int, int], bytes] = {}
        self.final: list[tuple[int, int]] = []
        self.fail_next_commit = True
        self.rollbacks = 0
        self.lock = threading.Lock()

    def process(self, record: ConsumedRecord) -> None:
        with self.lock:
            self.staged[(record.partition, record.offset)] = record.value or b""

    def commit(self, records: Sequence[ConsumedRecord]) -> None:
        with self.lock:
            if self.fail_next_commit:
                self.fail_next_commit = False
                raise OSError("the database went away")
            for r in records:
                self.final.append((r.partition, r.offset))
                del self.staged[(r.partition, r.offset)]

    def rollback(self, records: Sequence[ConsumedRecord]) -> None:
        with self.lock:
            self.rollbacks += 1
            for r in records:
                self.staged.pop((r.partition, r.offset), None)


def test_process_commit_rollback_handler_is_rolled_back_and_sees_every_record_once_final(
    group_broker: BrokerProcess, topic_in: str, running: list[LogConsumer]
) -> None:
    bootstrap = group_broker.bootstrap
    fill(bootstrap, topic_in, 900)
    handler = StagingHandler()
    group = unique_topic("g")
    lc = LogConsumer(consumer_config(bootstrap, group), [topic_in], handler, mode="transactional",
                     commit_interval_ms=100)
    running.append(lc.start())
    ends = end_offsets(bootstrap, topic_in)
    wait_until(lambda: committed(bootstrap, group, topic_in) == ends, timeout=30, message="all committed")
    assert handler.rollbacks == 1 and lc.metrics().rollbacks_total == 1
    assert sorted(handler.final) == sorted((p, o) for p in range(PARTITIONS) for o in range(ends[p]))
    assert not handler.staged


def test_bad_arguments_are_refused_by_name(group_broker: BrokerProcess) -> None:
    with pytest.raises(ConfigError, match="mode"):
        LogConsumer({"group.id": "g", "bootstrap.servers": group_broker.bootstrap}, ["t"], print, mode="twice")
    with pytest.raises(ConfigError, match=r"group\.id"):
        LogConsumer({"bootstrap.servers": group_broker.bootstrap}, ["t"], print)
    with pytest.raises(ConfigError, match="process, commit and rollback"):
        LogConsumer({"group.id": "g", "bootstrap.servers": group_broker.bootstrap}, ["t"], print,
                    mode="transactional")

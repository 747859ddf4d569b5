"""The gateway's pull reads side by side with a direct confluent-kafka consumer.

    python bench/gateway_read_bench.py                 # starts a broker and a gateway of its own
    python bench/gateway_read_bench.py --records 50000 --size 1024 --polls 30

Two figures, on one fresh broker:

1. **throughput**: ``records`` records of ``size`` bytes are produced to a 4-partition topic, then
   read to the end by a direct confluent-kafka consumer (read_committed) and by one gateway read
   session (JSON polls of ``--batch`` records, committing every batch), each in a group of its own;
2. **long-poll latency**: ``polls`` times, a poll waits in the session while one record is produced
   (directly, acks=all); latency = poll answered - produce acknowledged.

Load generator, broker and gateway share this machine (two cores): the figures are a floor.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from helpers.broker_process import BrokerProcess  # noqa: E402
from helpers.gateway_process import GATEWAY_TEST_BROKER, GatewayProcess  # noqa: E402

PARTITIONS = 4


def create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    admin.create_topics([NewTopic(topic, partitions)])[topic].result()
    time.sleep(0.5)  # the metadata lists the partitions


def fill(bootstrap: str, topic: str, records: int, size: int) -> None:
    create(bootstrap, topic, PARTITIONS)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "queue.buffering.max.kbytes": 262144})
    for i in range(records):
        producer.produce(topic, b"%08d" % i + b"x" * (size - 8))
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(60)


def direct_rate(bootstrap: str, topic: str, records: int) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    got, start = 0, 0.0
    while got < records:
        for message in consumer.consume(1000, 5):
            if message.error() is None or message.error().code() != KafkaError._PARTITION_EOF:
                start = start or time.monotonic()
                got += 1
    rate = records / (time.monotonic() - start)
    consumer.close()
    return rate


def session(url: str, topic: str) -> str:
    answer = httpx.post(f"{url}/v1/sessions", timeout=30, json={
        "group": f"bench-{uuid.uuid4().hex[:8]}", "topics": [topic], "autoOffsetReset": "earliest"})
    answer.raise_for_status()
    session_url: str = answer.json()["url"]
    return session_url


def gateway_rate(url: str, topic: str, records: int, batch: int) -> float:
    session_url = session(url, topic)
    got, start = 0, 0.0
    with httpx.Client(timeout=60) as client:
        while got < records:
            body = client.get(f"{session_url}/records", params={"waitMs": 5000, "maxRecords": batch}).json()
            if body["records"]:
                start = start or time.monotonic()
                got += len(body["records"])
                client.post(f"{session_url}/commit", json={"offsets": body["next"]}).raise_for_status()
    rate = records / (time.monotonic() - start)
    httpx.delete(session_url, timeout=30)
    return rate


def latencies(bootstrap: str, url: str, polls: int) -> list[float]:
    topic = f"latency-{uuid.uuid4().hex[:8]}"
    create(bootstrap, topic, 1)
    session_url = session(url, topic)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
    out: list[float] = []
    with httpx.Client(timeout=60) as client:
        client.get(f"{session_url}/records", params={"waitMs": 2000})  # joined, assigned
        for _ in range(polls):
            answered: list[float] = []

            def wait(answered: list[float] = answered) -> None:
                client.get(f"{session_url}/records", params={"waitMs": 10_000}).raise_for_status()
                answered.append(time.monotonic())

            waiter = threading.Thread(target=wait)
            waiter.start()
            time.sleep(0.2)
            producer.produce(topic, b"ping")
            producer.flush(10)
            acked = time.monotonic()
            waiter.join(15)
            out.append(answered[0] - acked)
    httpx.delete(session_url, timeout=30)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--polls", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch, \
            BrokerProcess(Path(scratch) / "broker", GATEWAY_TEST_BROKER) as broker, \
            GatewayProcess(Path(scratch) / "gateway", broker.bootstrap) as gateway:
        topic = f"read-bench-{uuid.uuid4().hex[:8]}"
        fill(broker.bootstrap, topic, args.records, args.size)
        direct = direct_rate(broker.bootstrap, topic, args.records)
        pulled = gateway_rate(gateway.url, topic, args.records, args.batch)
        waits = sorted(latencies(broker.bootstrap, gateway.url, args.polls))
    p50, p99 = statistics.median(waits), waits[min(len(waits) - 1, int(len(waits) * 0.99))]
    print("| direct consumer | gateway session | gateway / direct | long-poll latency p50 / max |")
    print("|---|---|---|---|")
    print(f"| {direct:,.0f} records/s | {pulled:,.0f} records/s ({pulled * args.size / 1e6:.0f} MB/s) | "
          f"{pulled / direct:.0%} | {p50 * 1000:.0f} ms / {p99 * 1000:.0f} ms |")


if __name__ == "__main__":
    main()

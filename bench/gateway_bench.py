"""The HTTP gateway side by side with direct confluent-kafka production (issue 18's speed targets).

    python bench/gateway_bench.py                 # starts a broker and a gateway of its own
    python bench/gateway_bench.py --seconds 10 --clients 16 --records 100 --size 1024

Three figures, each on the same fresh broker:

1. **direct**: one confluent-kafka producer (idempotent, acks=all, linger.ms=5) producing
   ``records``-sized batches of ``size``-byte records as fast as it can for ``seconds``;
2. **gateway**: ``clients`` concurrent HTTP clients (one source each), each request one chunk of
   ``records`` records of ``size`` bytes, JSON body, next request on the previous answer; the rate
   counts acknowledged records (written exactly once, in a transaction with the source's state);
3. **latency**: requests of one small record sent at ``--rate`` requests/s over 32 connections
   while a read_committed consumer reads the topic; write-to-readable latency = time the record is
   consumed - time its request was sent, percentiles over the run.

The load generator runs on the same machine as the broker and the gateway (two cores), so the
figures are a floor. Results go to stdout as a Markdown table (bench/RESULTS.md keeps past runs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from helpers.broker_process import BrokerProcess  # noqa: E402
from helpers.gateway_process import GATEWAY_TEST_BROKER, GatewayProcess  # noqa: E402


def create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions)])[topic].result()


def direct(bootstrap: str, topic: str, seconds: float, records: int, size: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "queue.buffering.max.kbytes": 262144})
    value = b"x" * size
    sent, deadline = 0, time.monotonic() + seconds
    start = time.monotonic()
    while time.monotonic() < deadline:
        for _ in range(records):
            while True:
                try:
                    producer.produce(topic, value)
                    break
                except BufferError:
                    producer.poll(0.01)
        sent += records
        producer.poll(0)
    producer.flush(60)
    return sent / (time.monotonic() - start)


class Http11:
    """A minimal keep-alive HTTP/1.1 client: the load generator must cost far less than the gateway."""

    def __init__(self, url: str) -> None:
        host, _, port = url.removeprefix("http://").partition(":")
        self.host, self.port = host, int(port)
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes, content_type: str = "application/json") -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(b"POST %s HTTP/1.1\r\nhost: %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n" % (
            path.encode(), self.host.encode(), content_type.encode(), len(body)))
        self.writer.write(body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = next(int(line.split(b":")[1]) for line in head.lower().split(b"\r\n")
                      if line.startswith(b"content-length:"))
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def gateway_load(url: str, topic: str, seconds: float, clients: int, records: int, size: int,
                       body: str = "json") -> float:
    value = "x" * size
    done = [0]
    refused: dict[int, int] = {}
    deadline = time.monotonic() + seconds

    async def client(n: int) -> None:
        # The body is encoded once: the load generator shares the two cores with what it measures.
        head, _, tail = json.dumps({"sourceId": f"bench-{n}", "chunks": [
            {"seqno": 999, "records": [{"value": value}] * records}]}).encode().partition(b"999")
        lines = (value + "\n").encode() * records
        http = Http11(url)
        seqno = 0
        try:
            while time.monotonic() < deadline:
                seqno += 1
                if body == "raw":  # one line per record, sourceId and seqno in the query string
                    status, _ = await http.post(f"/v1/topics/{topic}/write?sourceId=bench-{n}&seqno={seqno}", lines,
                                                "text/plain")
                else:
                    status, _ = await http.post(f"/v1/topics/{topic}/write", b"%s%d%s" % (head, seqno, tail))
                if status == 200:
                    done[0] += records
                else:
                    refused[status] = refused.get(status, 0) + 1
                    seqno -= 1
                    await asyncio.sleep(0.05)
        finally:
            http.close()

    start = time.monotonic()
    await asyncio.gather(*(client(n) for n in range(clients)))
    if refused:
        print(f"gateway answers other than 200: {refused}", file=sys.stderr)
    return done[0] / (time.monotonic() - start)


async def paced(url: str, topic: str, seconds: float, rate: int, connections: int = 32,
                answers: list[float] | None = None) -> int:
    """``rate`` requests/s spread over ``connections`` keep-alive connections (one source each); a
    connection whose answer comes late sends its next request at once (the rate is then not reached)."""
    sent = [0]

    async def connection(n: int) -> None:
        http = Http11(url)
        interval = connections / rate
        start = time.monotonic() + n * interval / connections
        seqno = 0
        try:
            while time.monotonic() - start < seconds:
                seqno += 1
                delay = start + (seqno - 1) * interval - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                body = json.dumps({"sourceId": f"lat-{n}", "chunks": [
                    {"seqno": seqno, "records": [{"value": repr(time.time())}]}]}).encode()
                asked = time.monotonic()
                status, _ = await http.post(f"/v1/topics/{topic}/write", body)
                if status == 200:
                    sent[0] += 1
                    if answers is not None:
                        answers.append(time.monotonic() - asked)
                else:
                    seqno -= 1
        finally:
            http.close()

    await asyncio.gather(*(connection(n) for n in range(connections)))
    return sent[0]


def read_latencies(bootstrap: str, topic: str, partitions: int, stop: threading.Event, out: list[float]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-latency", "isolation.level":
                         "read_committed", "fetch.wait.max.ms": 5, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    while not stop.is_set():
        # poll, not consume(n, timeout): consume waits until it has n records or the timeout passed,
        # which at 1,000 records/s adds its own tens of milliseconds to every figure.
        message = consumer.poll(0.1)
        if message is not None and message.error() is None:
            out.append(time.time() - float(message.value() or b"0"))
    consumer.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--records", type=int, default=100)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rate", type=int, default=1000, help="requests/s of the latency run")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--shards", type=int, default=4, help="gateway.state.partitions")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        broker = BrokerProcess(Path(work) / "broker", GATEWAY_TEST_BROKER).start()
        gateway = GatewayProcess(Path(work) / "gateway", broker.bootstrap,
                                 {"gateway.state.partitions": args.shards}).start()
        try:
            for topic in ("direct", "via-gateway", "latency"):
                create(broker.bootstrap, topic, args.partitions)
            gateway_rate = asyncio.run(gateway_load(gateway.url, "via-gateway", args.seconds, args.clients,
                                                    args.records, args.size))
            direct_rate = direct(broker.bootstrap, "direct", args.seconds, args.records, args.size)
            # The broker makes transaction markers durable (fsync): write back what the direct run left
            # dirty first, or the gateway's next commits wait for it.
            os.sync()
            latencies: list[float] = []
            stop = threading.Event()
            reader = threading.Thread(target=read_latencies, args=(broker.bootstrap, "latency", args.partitions,
                                                                   stop, latencies))
            reader.start()
            time.sleep(1)
            answers: list[float] = []
            sent = asyncio.run(paced(gateway.url, "latency", args.seconds, args.rate, answers=answers))
            time.sleep(1)
            stop.set()
            reader.join()
        finally:
            metrics = httpx.get(f"{gateway.url}/metrics").text
            print("\n".join(line for line in metrics.splitlines() if line.startswith(("gateway_transaction_seconds_",
                  "gateway_transaction_requests_", "gateway_chunks_total"))), file=sys.stderr)
            gateway.close()
            broker.close()
    mb = args.size / 1e6
    print(f"| figure | value |\n|---|---|\n"
          f"| direct confluent-kafka | {direct_rate:,.0f} records/s ({direct_rate * mb:.1f} MB/s) |\n"
          f"| gateway, {args.clients} clients x {args.records} records of {args.size} B per request | "
          f"{gateway_rate:,.0f} records/s ({gateway_rate * mb:.1f} MB/s), "
          f"{gateway_rate / direct_rate:.0%} of direct |\n"
          f"| write-to-readable latency at {args.rate} req/s asked ({sent / args.seconds:.0f} req/s done) | "
          f"p50 {percentile(latencies, 0.5) * 1000:.1f} ms, p99 {percentile(latencies, 0.99) * 1000:.1f} ms, "
          f"max {max(latencies or [float('nan')]) * 1000:.1f} ms |\n"
          f"| the same requests' answer latency (sent to 200) | p50 {percentile(answers, 0.5) * 1000:.1f} ms, "
          f"p99 {percentile(answers, 0.99) * 1000:.1f} ms |\n"
          f"| machine | {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end |")


if __name__ == "__main__":
    main()

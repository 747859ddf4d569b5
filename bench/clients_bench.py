"""Client frameworks' figures: LogProducer against a bare confluent-kafka producer, the spool's write
and replay rates, and the LogConsumer's cost per record beyond the handler.

Not a test: it prints numbers. A tidelog broker is started as a subprocess (tests/helpers) on a free
port in a temporary folder and stopped at the end. Usage::

    python bench/clients_bench.py [--records 200000] [--size 200]

* live: records of ``--size`` bytes, 50 keys, 3 partitions, idempotent, linger.ms 5, sent as fast as
  ``send``/``produce`` take them, then flushed; bare and LogProducer runs alternate, twice each, best kept.
* spool write: :class:`~tidelog.clients.spool.Spool` encode + append of 1 MiB batches of 1 KiB records,
  no fsync (MB/s of record payload).
* replay: the broker is stopped, ``--records`` records are sent (spooled), the broker restarted; the
  figure is records/s from the restart until the spool is empty.
* consumer: ``--records`` records read by a bare confluent-kafka ``consume`` loop and by a LogConsumer
  with a handler that does nothing (4 workers); the difference per record is the framework's cost.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from confluent_kafka import Consumer, Producer

from helpers.broker_process import BrokerProcess
from helpers.clients import create_topic
from tidelog.clients import ConsumedRecord, LogConsumer, LogProducer
from tidelog.clients.spool import Spool, SpooledRecord

KEYS = 50
MIB = 1024 * 1024


def bare_produce(bootstrap: str, topic: str, records: int, value: bytes) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    keys = [f"k{i}".encode() for i in range(KEYS)]
    started = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value, keys[i % KEYS])
                break
            except BufferError:
                producer.poll(0.005)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(60)
    return records / (time.perf_counter() - started)


def log_produce(bootstrap: str, topic: str, records: int, value: bytes, spool: Path) -> float:
    producer = LogProducer({"bootstrap.servers": bootstrap, "linger.ms": 5, "spool.dir": str(spool)})
    keys = [f"k{i}".encode() for i in range(KEYS)]
    started = time.perf_counter()
    for i in range(records):
        producer.send(topic, value, keys[i % KEYS])
    assert producer.flush(60)
    rate = records / (time.perf_counter() - started)
    assert producer.metrics().spooled_total == 0, "a healthy run must not spool"
    producer.close()
    return rate


def spool_write(folder: Path, total_bytes: int) -> float:
    spool = Spool(folder, segment_bytes=256 * MIB)
    batch = [SpooledRecord("t", os.urandom(1000), b"key-%04d" % i, (), -1, 0) for i in range(1024)]
    payload = sum(len(r.value or b"") + len(r.key or b"") for r in batch)
    rounds = max(1, total_bytes // payload)
    started = time.perf_counter()
    for _ in range(rounds):
        spool.append(spool.encode(batch))
    elapsed = time.perf_counter() - started
    spool.close()
    return rounds * payload / elapsed / 1e6


def replay(broker: BrokerProcess, topic: str, records: int, value: bytes, spool: Path) -> float:
    broker.stop()
    producer = LogProducer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "spool.dir": str(spool),
                            "spool.outage.ms": 1000, "spool.probe.interval.ms": 100,
                            "reconnect.backoff.max.ms": 100})
    for i in range(records):
        producer.send(topic, value, f"k{i % KEYS}".encode())
    assert producer.flush(120)
    assert producer.metrics().spooled == records, producer.metrics()
    broker.start()
    started = time.perf_counter()
    while producer.metrics().spooled:
        time.sleep(0.01)
    rate = records / (time.perf_counter() - started)
    producer.close()
    return rate


def bare_consume(bootstrap: str, topic: str, records: int) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bare-{time.time()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen = 0
    started = 0.0
    while seen < records:
        batch = [m for m in consumer.consume(1000, 1) if m.error() is None]
        if batch and not started:
            started = time.perf_counter()
        seen += len(batch)
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def framework_consume(bootstrap: str, topic: str, records: int) -> float:
    done = threading.Event()
    count = [0]
    first = [0.0]
    lock = threading.Lock()

    def handler(record: ConsumedRecord) -> None:
        with lock:
            if not count[0]:
                first[0] = time.perf_counter()
            count[0] += 1
            if count[0] >= records:
                done.set()

    consumer = LogConsumer({"bootstrap.servers": bootstrap, "group.id": f"lc-{time.time()}",
                            "auto.offset.reset": "earliest"}, [topic], handler, workers=4, queue_size=4000)
    consumer.start()
    done.wait(120)
    elapsed = time.perf_counter() - first[0]
    consumer.stop()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=200)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="clients-bench-"))
    broker = BrokerProcess(workdir / "broker").start()
    value = os.urandom(args.size)
    try:
        topic = create_topic(broker.bootstrap, "bench-live", 3)
        bare, framed = [], []
        for run in range(2):
            bare.append(bare_produce(broker.bootstrap, topic, args.records, value))
            framed.append(log_produce(broker.bootstrap, topic, args.records, value, workdir / f"spool-live-{run}"))
        print(f"live produce, {args.records} x {args.size} B: bare confluent-kafka {max(bare):,.0f} rec/s, "
              f"LogProducer {max(framed):,.0f} rec/s ({max(framed) / max(bare):.0%} of bare)")
        write = spool_write(workdir / "spool-write", 256 * MIB)
        print(f"spool write (1 KiB records, 1 MiB batches, no fsync): {write:,.0f} MB/s")
        replay_topic = create_topic(broker.bootstrap, "bench-replay", 3)
        rate = replay(broker, replay_topic, args.records, value, workdir / "spool-replay")
        print(f"replay of {args.records} spooled records: {rate:,.0f} rec/s ({rate / max(framed):.0%} of live)")
        bare_s = bare_consume(broker.bootstrap, topic, args.records)
        framed_s = framework_consume(broker.bootstrap, topic, args.records)
        print(f"consume {args.records}: bare {bare_s:.2f} s, LogConsumer (no-op handler, 4 workers) {framed_s:.2f} s: "
              f"{(framed_s - bare_s) / args.records * 1e6:.1f} us per record beyond the handler")
    finally:
        broker.close()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()

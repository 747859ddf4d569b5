"""Fetch long-poll: a waiting fetch must be answered as soon as an append makes data available.

The consumer asks the broker to wait up to 500 ms (``fetch.wait.max.ms``). A broker that wakes
waiting fetches on append answers within a few milliseconds of the produce; one that polls, or
only answers at the deadline, takes on average a quarter of a second and fails here. The bound
(100 ms) leaves room for a loaded CI machine (a run with both cores busy saw 45-70 ms); the latency
itself is bench/wake_latency.py's figure.
"""

from __future__ import annotations

import random
import statistics
import time

from confluent_kafka import TopicPartition

from helpers.clients import consumer, produce_all, producer

ROUNDS = 5
BOUND_S = 0.100


def test_consumer_waiting_on_an_empty_partition_gets_a_new_record_within_100_ms(bootstrap: str, topic: str) -> None:
    prod = producer(bootstrap, {"linger.ms": 0, "acks": "1"})
    produce_all(prod, topic, [b"warm-up"])  # connections and metadata ready before timing anything
    cons = consumer(bootstrap, {"fetch.wait.max.ms": 500, "fetch.min.bytes": 1})
    latencies: list[float] = []
    try:
        cons.assign([TopicPartition(topic, 0, 1)])
        assert cons.poll(0.7) is None  # the consumer is connected, caught up, and its fetch is waiting
        rng = random.Random(7)
        for i in range(ROUNDS):
            time.sleep(rng.uniform(0.05, 0.3))  # land the produce at different points of the 500 ms wait
            started = time.perf_counter()
            prod.produce(topic, value=f"wake {i}".encode())
            prod.poll(0)
            message = cons.poll(2.0)
            latencies.append(time.perf_counter() - started)
            assert message is not None and message.error() is None, f"round {i}: {message and message.error()}"
            assert message.value() == f"wake {i}".encode()
            assert prod.flush(5) == 0
    finally:
        cons.close()

    shown = ", ".join(f"{s * 1000:.1f} ms" for s in latencies)
    assert sum(s <= BOUND_S for s in latencies) >= ROUNDS - 1, f"produce-to-receive latencies: {shown}"
    assert statistics.median(latencies) <= BOUND_S, f"produce-to-receive latencies: {shown}"

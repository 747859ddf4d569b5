"""LogProducer against a real broker subprocess: live sending, outages (broker stopped, link cut),
the spool's replay, restart recovery, torn tails and the spool.full.policy choices.

Every record is counted: keys ``k0..kN`` carry values ``0, 1, 2...`` per key, and the topic is read
back whole to check that each one is there, with first appearances in send order per key.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Message

from helpers.broker_process import BrokerProcess, wait_until
from helpers.clients import FAST_CLIENT, consume, create_topic, unique_topic
from helpers.ledger import check_at_least_once
from helpers.link_proxy import LinkProxy
from tidelog.clients import (
    FailedRecord,
    LogProducer,
    QueueFullError,
    SpoolFullError,
    SpoolLockedError,
)
from tidelog.common.errors import ConfigError

PARTITIONS = 3
QUICK_OUTAGE = {"spool.outage.ms": 1000, "spool.probe.interval.ms": 200, "message.timeout.ms": 60_000}


def producer_config(bootstrap: str, spool: Path, **extra: object) -> dict[str, object]:
    return {"bootstrap.servers": bootstrap, "spool.dir": str(spool), "linger.ms": 5, **FAST_CLIENT,
            **QUICK_OUTAGE, **extra}


class Sender:
    """Sends ``k<i % keys>`` / per-key sequence numbers and remembers how many went per key."""

    def __init__(self, producer: LogProducer, topic: str, keys: int = 20) -> None:
        self.producer = producer
        self.topic = topic
        self.keys = keys
        self.sent: dict[bytes, int] = {}
        self.total = 0

    def send(self, count: int, headers: dict[str, bytes] | None = None) -> None:
        for _ in range(count):
            self.total += 1
            key = f"k{self.total % self.keys}".encode()
            seq = self.sent.get(key, 0)
            self.producer.send(self.topic, str(seq).encode(), key, headers)
            self.sent[key] = seq + 1  # counted once taken: a refused send is not a sent record


def pairs(messages: list[Message]) -> list[tuple[bytes, int]]:
    return [(m.key() or b"", int(m.value() or b"-1")) for m in messages]


def read_topic(bootstrap: str, topic: str, count: int, timeout: float = 30.0) -> list[Message]:
    return consume(bootstrap, topic, count, partitions=range(PARTITIONS), timeout=timeout, settle=0.3)


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path / "broker") as process:
        yield process


@pytest.fixture
def make_producer(tmp_path: Path) -> Iterator[Callable[..., LogProducer]]:
    made: list[LogProducer] = []

    def make(config: dict[str, object], **kwargs: object) -> LogProducer:
        producer = LogProducer(config, **kwargs)  # type: ignore[arg-type]
        made.append(producer)
        return producer

    yield make
    for producer in made:
        producer.close(timeout=5)


def test_records_go_live_with_key_headers_and_timestamp(
    broker: BrokerProcess, tmp_path: Path, make_producer: Callable[..., LogProducer]
) -> None:
    topic = create_topic(broker.bootstrap, unique_topic("lp"), PARTITIONS)
    # A first produce waits for a producer id and metadata: more than QUICK_OUTAGE's second on a busy box.
    producer = make_producer(producer_config(broker.bootstrap, tmp_path / "spool", **{"spool.outage.ms": 15_000}))
    sender = Sender(producer, topic)
    sender.send(5000, headers={"app": b"billing"})
    producer.send(topic, b"last", b"stamp", {"h": "v"}, timestamp=1_700_000_000_000)
    assert producer.flush(20)
    metrics = producer.metrics()
    assert (metrics.mode, metrics.delivered_total, metrics.spooled_total) == ("live", 5001, 0)
    messages = read_topic(broker.bootstrap, topic, 5001)
    check_at_least_once(pairs([m for m in messages if m.key() != b"stamp"]), sender.sent)
    stamped = next(m for m in messages if m.key() == b"stamp")
    assert stamped.timestamp()[1] == 1_700_000_000_000
    assert stamped.headers() == [("h", b"v")]
    assert all(m.headers() == [("app", b"billing")] for m in messages if m.key() != b"stamp")


def test_stopped_broker_spools_then_replays_every_record_in_key_order(
    own_broker: BrokerProcess, tmp_path: Path, make_producer: Callable[..., LogProducer]
) -> None:
    topic = create_topic(own_broker.bootstrap, unique_topic("lp"), PARTITIONS)
    producer = make_producer(producer_config(own_broker.bootstrap, tmp_path / "spool"))
    sender = Sender(producer, topic)
    sender.send(10_000)
    own_broker.stop()
    sender.send(20_000, headers={"during": b"outage"})
    wait_until(lambda: producer.metrics().mode == "spooling", timeout=15, message="spooling")
    assert producer.flush(15), "records sent during the outage are spooled and fsynced"
    metrics = producer.metrics()
    assert metrics.spooled > 0 and metrics.outages_total == 1
    assert metrics.oldest_spooled_age_ms > 0
    own_broker.start()
    wait_until(lambda: producer.metrics().spooled == 0 and producer.metrics().mode == "live", timeout=30,
               message="spool replayed")
    sender.send(1000)
    assert producer.flush(20)
    messages = read_topic(own_broker.bootstrap, topic, 31_000)
    counts = check_at_least_once(pairs(messages), sender.sent)
    assert counts["unique"] == 31_000
    outage = [m for m in messages if m.headers() == [("during", b"outage")]]
    assert len({(m.key(), m.value()) for m in outage}) == 20_000, "spooled records keep their headers"
    assert not list((tmp_path / "spool" / "spool-0").glob("*.log")) or producer.metrics().spool_bytes == 0


def test_cut_link_spools_and_heals_without_losing_a_record(
    tmp_path: Path, make_producer: Callable[..., LogProducer]
) -> None:
    proxy = LinkProxy()
    broker = BrokerProcess(tmp_path / "broker", {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"})
    try:
        broker.start()
        proxy.start("127.0.0.1", broker.port)
        bootstrap = f"127.0.0.1:{proxy.port}"
        topic = create_topic(broker.bootstrap, unique_topic("lp"), PARTITIONS)
        producer = make_producer(producer_config(bootstrap, tmp_path / "spool", **{"socket.timeout.ms": 2000}))
        sender = Sender(producer, topic)
        sender.send(5000)
        proxy.cut("blackhole")  # requests vanish: only the missing acknowledgements tell
        sender.send(10_000)
        wait_until(lambda: producer.metrics().mode == "spooling", timeout=20, message="spooling")
        assert producer.flush(15)
        proxy.heal()
        wait_until(lambda: producer.metrics().spooled == 0 and producer.metrics().mode == "live", timeout=40,
                   message="spool replayed")
        assert producer.flush(20)
        check_at_least_once(pairs(read_topic(broker.bootstrap, topic, 15_000)), sender.sent)
    finally:
        proxy.close()
        broker.close()


def test_new_producer_on_the_same_folder_replays_what_the_old_one_left(
    own_broker: BrokerProcess, tmp_path: Path, make_producer: Callable[..., LogProducer]
) -> None:
    topic = create_topic(own_broker.bootstrap, unique_topic("lp"), PARTITIONS)
    own_broker.stop()
    first = LogProducer(producer_config(own_broker.bootstrap, tmp_path / "spool"))
    sender = Sender(first, topic)
    sender.send(8000)
    first.close(timeout=5)  # nothing could be delivered: close spools all of it
    assert first.metrics().spooled == 8000
    own_broker.start()
    second = make_producer(producer_config(own_broker.bootstrap, tmp_path / "spool"))
    assert second.metrics().spooled == 8000
    sender.producer = second
    sender.send(2000)  # queued behind the old records, so per-key order holds
    wait_until(lambda: second.metrics().spooled == 0 and second.metrics().mode == "live", timeout=30,
               message="spool replayed")
    assert second.flush(20)
    check_at_least_once(pairs(read_topic(own_broker.bootstrap, topic, 10_000)), sender.sent)


def test_torn_spool_tail_is_cut_reported_and_the_rest_replayed(
    own_broker: BrokerProcess, tmp_path: Path, make_producer: Callable[..., LogProducer]
) -> None:
    topic = create_topic(own_broker.bootstrap, unique_topic("lp"), PARTITIONS)
    own_broker.stop()
    spool = tmp_path / "spool"
    first = LogProducer(producer_config(own_broker.bootstrap, spool, **{"spool.batch.bytes": 4096}))
    sender = Sender(first, topic, keys=1)
    sender.send(3000)
    first.close(timeout=5)
    # A power loss mid-write: the last batch is half there and the spool was not closed cleanly.
    segment = sorted((spool / "spool-0").glob("*.log"))[-1]
    size = segment.stat().st_size
    with segment.open("r+b") as f:
        f.truncate(size - 100)
    (spool / "clean-shutdown").unlink()
    own_broker.start()
    second = make_producer(producer_config(own_broker.bootstrap, spool))
    metrics = second.metrics()
    assert metrics.spool_truncated_bytes > 0
    assert 2800 < metrics.spooled < 3000, "only the torn batch is lost"
    kept = metrics.spooled
    wait_until(lambda: second.metrics().spooled == 0, timeout=30, message="spool replayed")
    assert second.flush(20)
    got = pairs(read_topic(own_broker.bootstrap, topic, kept))
    check_at_least_once(got, {b"k0": kept})
    assert max(seq for _, seq in got) == kept - 1, "the cut is a suffix: the oldest records survive"


def test_fail_policy_refuses_sends_once_the_spool_is_full(
    own_broker: BrokerProcess, tmp_path: Path, make_producer: Callable[..., LogProducer]
) -> None:
    topic = create_topic(own_broker.bootstrap, unique_topic("lp"), PARTITIONS)
    own_broker.stop()
    failed: list[FailedRecord] = []
    producer = make_producer(producer_config(
        own_broker.bootstrap, tmp_path / "spool", **{"spool.max.bytes": 200_000, "spool.full.policy": "fail",
                                                     "spool.batch.bytes": 8192}),
        on_error=failed.append)
    with pytest.raises(SpoolFullError):
        for _ in range(100_000):
            producer.send(topic, b"x" * 100, b"k")
            time.sleep(0)  # let the sender write batches; the flag rises once the spool is full
    # the records still queued when send raised are spooled or refused by the sender thread meanwhile
    wait_until(lambda: producer.metrics().queued == 0 and producer.metrics().failed_total == len(failed),
               timeout=10, message="every refused record counted and reported")
    metrics = producer.metrics()
    assert metrics.spool_bytes <= 200_000
    assert failed and all("SPOOL_FULL" in f.error for f in failed)


def test_drop_oldest_policy_keeps_the_newest_and_counts_what_went(
    own_broker: BrokerProcess, tmp_path: Path, make_producer: Callable[..., LogProducer]
) -> None:
    topic = create_topic(own_broker.bootstrap, unique_topic("lp"), PARTITIONS)
    own_broker.stop()
    producer = make_producer(producer_config(
        own_broker.bootstrap, tmp_path / "spool",
        **{"spool.max.bytes": 400_000, "spool.segment.bytes": 65_536, "spool.full.policy": "drop-oldest",
           "spool.batch.bytes": 8192}))
    for seq in range(20_000):
        producer.send(topic, str(seq).encode(), b"k")
    assert producer.flush(15)
    metrics = producer.metrics()
    assert metrics.dropped_total > 0 and metrics.spool_bytes <= 400_000
    assert metrics.spooled + metrics.dropped_total == 20_000
    own_broker.start()
    wait_until(lambda: producer.metrics().spooled == 0, timeout=30, message="spool replayed")
    assert producer.flush(20)
    got = [seq for _, seq in pairs(read_topic(own_broker.bootstrap, topic, metrics.spooled))]
    assert sorted(set(got)) == list(range(metrics.dropped_total, 20_000)), "exactly the oldest went"


def test_block_policy_blocks_send_for_max_block_ms_then_raises(
    own_broker: BrokerProcess, tmp_path: Path, make_producer: Callable[..., LogProducer]
) -> None:
    topic = create_topic(own_broker.bootstrap, unique_topic("lp"), PARTITIONS)
    own_broker.stop()
    producer = make_producer(producer_config(
        own_broker.bootstrap, tmp_path / "spool",
        **{"spool.max.bytes": 100_000, "buffer.memory": 50_000, "max.block.ms": 300, "spool.batch.bytes": 8192}))
    sent = 0
    started = time.monotonic()
    with pytest.raises(QueueFullError):
        for _ in range(100_000):
            producer.send(topic, str(sent).encode(), b"k", {"pad": b"p" * 100})
            sent += 1
    assert time.monotonic() - started >= 0.3
    assert producer.metrics().spool_bytes <= 100_000
    own_broker.start()  # room comes back as the replay is acknowledged: nothing was lost
    assert producer.flush(30)
    wait_until(lambda: producer.metrics().spooled == 0 and producer.metrics().queued == 0, timeout=30,
               message="everything delivered")
    got = pairs(read_topic(own_broker.bootstrap, topic, sent))
    check_at_least_once(got, {b"k": sent})


def test_a_second_producer_on_the_same_spool_is_refused(broker: BrokerProcess, tmp_path: Path,
                                                       make_producer: Callable[..., LogProducer]) -> None:
    make_producer(producer_config(broker.bootstrap, tmp_path / "spool"))
    with pytest.raises(SpoolLockedError):
        LogProducer(producer_config(broker.bootstrap, tmp_path / "spool"))


@pytest.mark.parametrize(("config", "message"), [
    ({"bootstrap.servers": "x"}, "spool.dir: required"),
    ({"spool.full.policy": "wait"}, "spool.full.policy: expected one of block, fail, drop-oldest"),
    ({"spool.max.bytes": "lots"}, "spool.max.bytes: expected an integer"),
    ({"enable.idempotence": False}, "enable.idempotence: the LogProducer needs it on"),
])
def test_bad_settings_are_refused_by_name(tmp_path: Path, config: dict[str, object], message: str) -> None:
    full = {"spool.dir": str(tmp_path / "spool"), **config} if "bootstrap.servers" not in config else config
    with pytest.raises(ConfigError, match=message):
        LogProducer(full)

"""The gateway's write API against a tidelog broker subprocess: exactly-once per source, durably.

Each test runs ``tidelog gateway`` as a subprocess (``GatewayProcess``) with a group and state topic
of its own, writes over HTTP, and checks what a ``read_committed`` consumer sees in the data topic.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from helpers.broker_process import BrokerProcess, module_broker
from helpers.clients import admin_client, consumer, create_topic, unique_topic
from helpers.gateway_process import GATEWAY_TEST_BROKER, GatewayProcess, write_json

gateway_broker = module_broker("gateway_broker", GATEWAY_TEST_BROKER)


@pytest.fixture
def bootstrap(gateway_broker: BrokerProcess) -> str:
    return gateway_broker.bootstrap


@pytest.fixture
def new_topic(bootstrap: str) -> Callable[..., str]:
    def make(partitions: int = 1, name: str | None = None) -> str:
        return create_topic(bootstrap, name or unique_topic(), partitions)
    return make


@pytest.fixture
def topic(new_topic: Callable[..., str]) -> str:
    return new_topic()


@pytest.fixture(scope="module")
def shared_gateway(tmp_path_factory: pytest.TempPathFactory, gateway_broker: BrokerProcess) -> Iterator[GatewayProcess]:
    """One gateway for the tests that do not stop it (a start costs seconds on a busy machine)."""
    with GatewayProcess(tmp_path_factory.mktemp("gateway"), gateway_broker.bootstrap) as process:
        yield process


@pytest.fixture
def gateway(tmp_path: Path, bootstrap: str) -> Iterator[GatewayProcess]:
    """A gateway of the test's own, for tests that stop or restart it."""
    with GatewayProcess(tmp_path, bootstrap) as process:
        yield process


def read_committed(bootstrap: str, topic: str, partitions: int = 1) -> list[tuple[int, int, bytes, dict[str, bytes]]]:
    """(partition, offset, value, headers) of every committed record, read to the end."""
    cons: Consumer = consumer(bootstrap, {"isolation.level": "read_committed", "enable.partition.eof": True})
    cons.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, ended = [], set()
    try:
        while len(ended) < partitions:
            message = cons.poll(5)
            assert message is not None, f"no end of partition reached in {topic}"
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                ended.add(message.partition())
                continue
            headers = {k: v for k, v in (message.headers() or [])}
            out.append((message.partition(), message.offset(), message.value(), headers))
    finally:
        cons.close()
    return out


def test_chunk_written_once_and_resent_chunk_reported_as_duplicate(shared_gateway: GatewayProcess, bootstrap: str,
                                                                     topic: str) -> None:
    first = write_json(shared_gateway.url, topic, "web-1", [(1, ["a", "b"]), (2, ["c"])])
    assert first.status_code == 200, first.text
    assert first.json() == {"topic": topic, "sourceId": "web-1", "partition": 0, "lastSeqno": 2, "chunks": [
        {"seqno": 1, "status": "written", "offset": 0, "records": 2},
        {"seqno": 2, "status": "written", "offset": 2, "records": 1}]}
    again = write_json(shared_gateway.url, topic, "web-1", [(2, ["c"]), (3, ["d"])])
    assert [c["status"] for c in again.json()["chunks"]] == ["duplicate", "written"]
    raw = httpx.post(f"{shared_gateway.url}/v1/topics/{topic}/write", params={"sourceId": "web-1", "seqno": 3},
                     content=b"d\n")
    assert raw.json()["chunks"] == [{"seqno": 3, "status": "duplicate"}]
    assert [r[2] for r in read_committed(bootstrap, topic)] == [b"a", b"b", b"c", b"d"]
    state = httpx.get(f"{shared_gateway.url}/v1/topics/{topic}/sources", params={"sourceId": "web-1"}).json()
    assert (state["lastSeqno"], state["partition"]) == (3, 0)


@pytest.mark.parametrize("how", ["kill9", "sigterm"])
def test_duplicates_skipped_across_a_gateway_restart(gateway: GatewayProcess, bootstrap: str, topic: str,
                                                     how: str) -> None:
    assert write_json(gateway.url, topic, "s", [(10, ["x"])]).status_code == 200
    if how == "kill9":
        gateway.kill9()
    else:
        assert gateway.stop() == 0
    gateway.start()
    answer = write_json(gateway.url, topic, "s", [(9, ["old"]), (10, ["x"]), (11, ["y"])])
    assert [c["status"] for c in answer.json()["chunks"]] == ["duplicate", "duplicate", "written"]
    assert [r[2] for r in read_committed(bootstrap, topic)] == [b"x", b"y"]


def test_every_chunk_of_a_source_lands_in_one_partition(shared_gateway: GatewayProcess, bootstrap: str,
                                                        new_topic: Callable[..., str]) -> None:
    topic = new_topic(partitions=4)
    for seqno in range(1, 6):
        for source in ("a", "b", "c", "d", "e", "f"):
            assert write_json(shared_gateway.url, topic, source, [(seqno, [f"{source}{seqno}"])]).status_code == 200
    records = read_committed(bootstrap, topic, 4)
    by_source: dict[bytes, set[int]] = {}
    for partition, _, _, headers in records:
        by_source.setdefault(headers["tidelog-source-id"], set()).add(partition)
    assert len(records) == 30
    assert all(len(parts) == 1 for parts in by_source.values())
    assert len({p for parts in by_source.values() for p in parts}) > 1  # sources spread over partitions
    for source in by_source:  # each source's records are in seqno order
        seqnos = [int(h["tidelog-seqno"]) for _, _, _, h in records if h["tidelog-source-id"] == source]
        assert seqnos == sorted(seqnos)


def test_records_carry_enrichment_headers_and_the_data_centre_prefix(tmp_path: Path, bootstrap: str,
                                                                      new_topic: Callable[..., str]) -> None:
    dc, name = "dc1", unique_topic()
    topic = new_topic(name=name)  # the unprefixed name exists too, and must stay empty
    new_topic(name=f"{dc}.{name}")
    with GatewayProcess(tmp_path, bootstrap, {"gateway.dc": dc, "gateway.header.log.type": "type"}) as gw:
        answer = httpx.post(f"{gw.url}/v1/topics/{name}/write", content=b"line\n",
                            params={"sourceId": "host-1:/var/log/app.log", "seqno": 1, "host": "host-1",
                                    "file": "/var/log/app.log", "logType": "app"})
        assert answer.status_code == 200, answer.text
        assert answer.json()["topic"] == f"{dc}.{name}"
    [(_, _, value, headers)] = read_committed(bootstrap, f"{dc}.{name}")
    assert value == b"line"
    assert headers["tidelog-source-host"] == b"host-1"
    assert headers["tidelog-source-file"] == b"/var/log/app.log"
    assert headers["type"] == b"app"
    assert headers["tidelog-client-address"] == b"127.0.0.1"
    assert int(headers["tidelog-receive-time"]) > 1_600_000_000_000
    assert read_committed(bootstrap, topic) == []  # nothing went to the unprefixed name


def test_rejected_requests_write_nothing_and_say_why(shared_gateway: GatewayProcess, bootstrap: str, topic: str) -> None:
    cases = [
        (httpx.post(f"{shared_gateway.url}/v1/topics/{topic}/write", json={"sourceId": "s", "chunks": [{"seqno": -5,
                    "records": [{"value": "x"}]}]}), 400, "INVALID_REQUEST"),
        (httpx.post(f"{shared_gateway.url}/v1/topics/{topic}/write", content=b"x"), 400, "INVALID_REQUEST"),
        (httpx.post(f"{shared_gateway.url}/v1/topics/{topic}-missing/write?sourceId=s&seqno=1", content=b"x"),
         404, "UNKNOWN_TOPIC_OR_PARTITION"),
        (httpx.post(f"{shared_gateway.url}/v1/topics/__consumer_offsets/write?sourceId=s&seqno=1", content=b"x"),
         400, "INVALID_REQUEST"),
        (httpx.post(f"{shared_gateway.url}/v1/topics/{topic}/write?sourceId=s&seqno=1", content=b"x" * (9 << 20)),
         413, "REQUEST_TOO_LARGE"),
        (httpx.get(f"{shared_gateway.url}/v1/topics/{topic}/write"), 405, "METHOD_NOT_ALLOWED"),
        (httpx.get(f"{shared_gateway.url}/nowhere"), 404, "NOT_FOUND"),
    ]
    for answer, status, code in cases:
        assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), answer.text
    assert read_committed(bootstrap, topic) == []
    assert f"{topic}-missing" not in admin_client(bootstrap).list_topics(timeout=5).topics  # not auto-created
    ok = write_json(shared_gateway.url, topic, "s", [(1, ["after"])])  # the source was not touched by the rejects
    assert ok.json()["chunks"][0]["status"] == "written"


def test_concurrent_writers_of_one_source_never_write_a_chunk_twice(shared_gateway: GatewayProcess, bootstrap: str,
                                                                     topic: str) -> None:
    def send(seqno: int) -> int:
        return write_json(shared_gateway.url, topic, "busy", [(seqno, [str(seqno)])]).status_code

    with ThreadPoolExecutor(8) as pool:  # every chunk sent four times, concurrently
        statuses = list(pool.map(send, [s for s in range(1, 21) for _ in range(4)]))
    assert set(statuses) == {200}
    values = [int(r[2]) for r in read_committed(bootstrap, topic)]
    assert len(values) == len(set(values))  # never twice
    assert values == sorted(values)  # in seqno order; chunks smaller than one already written are skipped


def test_metrics_count_written_and_duplicate_chunks(shared_gateway: GatewayProcess, topic: str) -> None:
    write_json(shared_gateway.url, topic, "m", [(1, ["a"]), (1, ["a"])])
    text = httpx.get(f"{shared_gateway.url}/metrics").text
    assert f'gateway_chunks_total{{topic="{topic}",status="written"}} 1' in text
    assert f'gateway_chunks_total{{topic="{topic}",status="duplicate"}} 1' in text
    assert 'http_requests_total{route="/v1/topics/{topic}/write",method="POST",status="200"}' in text
    assert "gateway_shards_owned 4" in text
    assert "gateway_inflight_bytes 0" in text


def test_slow_cluster_gets_503_with_retry_after_and_retried_chunks_land_once(
        tmp_path: Path, fresh_broker: Callable[..., BrokerProcess]) -> None:
    broker = fresh_broker(GATEWAY_TEST_BROKER)
    topic = create_topic(broker.bootstrap, "slow")
    settings = {"gateway.max.inflight.bytes": 4096, "gateway.backpressure.wait.ms": 300,
                "gateway.request.timeout.ms": 1500}
    with GatewayProcess(tmp_path, broker.bootstrap, settings) as gw:
        assert write_json(gw.url, topic, "warm", [(1, ["x"])]).status_code == 200
        payload = ["v" * 3000]
        broker.process.send_signal(signal.SIGSTOP)  # the cluster stops answering
        try:
            with ThreadPoolExecutor(3) as pool:
                answers = list(pool.map(lambda s: write_json(gw.url, topic, f"src-{s}", [(1, payload)]), range(3)))
        finally:
            broker.process.send_signal(signal.SIGCONT)
        assert {a.status_code for a in answers} == {503}
        assert all(a.headers["retry-after"] == "1" for a in answers)
        codes = sorted(a.json()["error"]["message"].split(" ")[0] for a in answers)
        assert any("in-flight" in a.json()["error"]["message"] for a in answers), codes  # refused at once
        for s in range(3):  # retry until written; nothing twice
            for _ in range(40):
                answer = write_json(gw.url, topic, f"src-{s}", [(1, payload)])
                if answer.status_code == 200:
                    break
            assert answer.status_code == 200, answer.text
    values = read_committed(broker.bootstrap, topic)
    assert len(values) == 4

"""The gateway's pull reads against a tidelog broker subprocess: read sessions are members of a Kafka
consumer group, so sessions of one group (on two gateway instances here) share the partitions, a
session that stops polling gives them up within its timeout, and commits go to the group.

Two gateways and one broker serve the whole module; every test uses groups and topics of its own and
deletes the sessions it opens.
"""

from __future__ import annotations

import base64
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import TopicPartition

from helpers.broker_process import BrokerProcess, module_broker, wait_until
from helpers.clients import consumer, create_topic, produce_all, producer, unique_topic
from helpers.gateway_process import GATEWAY_TEST_BROKER, GatewayProcess, write_json

read_broker = module_broker("read_broker", GATEWAY_TEST_BROKER)
SESSIONS_MAX = 3
BUFFER_BYTES = 256 * 1024


@pytest.fixture(scope="module")
def gateways(tmp_path_factory: pytest.TempPathFactory, read_broker: BrokerProcess) -> Iterator[list[GatewayProcess]]:
    overrides = {"gateway.read.sessions.max": SESSIONS_MAX, "gateway.session.timeout.ms": 3000,
                 "gateway.read.session.max.bytes": BUFFER_BYTES}
    deployment = f"gw-{uuid.uuid4().hex[:8]}"  # two instances of one deployment (they forward to each other)
    started = [GatewayProcess(tmp_path_factory.mktemp(name), read_broker.bootstrap, overrides, group=deployment)
               .start(wait_ready=False) for name in ("gw-a", "gw-b")]  # at once: a start costs seconds here
    try:
        for gateway in started:
            gateway.wait_ready(60)
        yield started
    finally:
        for gateway in started:
            gateway.close()


class Sessions:
    """Opens read sessions over HTTP and deletes those still open at the end of the test."""

    def __init__(self) -> None:
        self.opened: list[str] = []

    def open(self, gateway: GatewayProcess, group: str, topics: list[str], **extra: Any) -> str:
        answer = httpx.post(f"{gateway.url}/v1/sessions", json={"group": group, "topics": topics,
                                                                "autoOffsetReset": "earliest", **extra}, timeout=30)
        assert answer.status_code == 201, answer.text
        url: str = answer.json()["url"]
        assert url.startswith(gateway.url)
        self.opened.append(url)
        return url

    def close(self) -> None:
        for url in self.opened:
            try:
                httpx.delete(url, timeout=30)
            except httpx.ConnectError:  # a gateway the test stopped
                pass


@pytest.fixture
def sessions() -> Iterator[Sessions]:
    opened = Sessions()
    yield opened
    opened.close()


@pytest.fixture
def group() -> str:
    return f"readers-{uuid.uuid4().hex[:8]}"


def poll(url: str, wait_ms: int = 0, **params: Any) -> dict[str, Any]:
    answer = httpx.get(f"{url}/records", params={"waitMs": wait_ms, **params}, timeout=wait_ms / 1000 + 30)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def poll_answer(url: str, wait_ms: int) -> httpx.Response:
    return httpx.get(f"{url}/records", params={"waitMs": wait_ms}, timeout=wait_ms / 1000 + 30)


def assignment(url: str) -> set[int]:
    answer = httpx.get(url, timeout=30)
    assert answer.status_code == 200, answer.text
    return {entry["partition"] for entry in answer.json()["assignment"]}


def settled_split(urls: list[str], partitions: int) -> list[set[int]]:
    """Each session's partitions once each holds some and together they hold every one exactly once."""
    def split() -> list[set[int]] | None:
        held = [assignment(url) for url in urls]
        together = [p for h in held for p in h]
        return held if all(held) and sorted(together) == list(range(partitions)) else None
    result: list[set[int]] = wait_until(split, timeout=30, interval=0.2, message="partitions split")
    return result


def drain(url: str, expected: int, timeout: float = 20.0) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(records) < expected and time.monotonic() < deadline:
        records += poll(url, 500)["records"]
    return records


def produce_to_partitions(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    prod = producer(bootstrap)
    for p in range(partitions):
        produce_all(prod, topic, [f"p{p}-{i}".encode() for i in range(per_partition)], partition=p)


def test_two_sessions_of_a_group_on_two_gateways_split_the_partitions(
        gateways: list[GatewayProcess], read_broker: BrokerProcess, sessions: Sessions, group: str) -> None:
    topic = create_topic(read_broker.bootstrap, unique_topic("reads"), 4)
    first = sessions.open(gateways[0], group, [topic])
    second = sessions.open(gateways[1], group, [topic])
    held = settled_split([first, second], 4)
    produce_to_partitions(read_broker.bootstrap, topic, 4, 5)
    got = [drain(first, 5 * len(held[0])), drain(second, 5 * len(held[1]))]
    for records, mine in zip(got, held, strict=True):
        assert {r["partition"] for r in records} == mine
        for p in mine:  # each partition's records in order, each once
            assert [r["value"] for r in records if r["partition"] == p] == [f"p{p}-{i}" for i in range(5)]


def test_a_session_that_stops_polling_loses_its_partitions_to_the_other_within_its_timeout(
        gateways: list[GatewayProcess], read_broker: BrokerProcess, sessions: Sessions, group: str) -> None:
    topic = create_topic(read_broker.bootstrap, unique_topic("reads"), 2)
    quiet = sessions.open(gateways[0], group, [topic], timeoutMs=1500)
    active = sessions.open(gateways[1], group, [topic])
    settled_split([quiet, active], 2)
    stopped = time.monotonic()  # the quiet session's last request ended just now
    while assignment(active) != {0, 1}:
        poll(active, 100)
        assert time.monotonic() - stopped < 1.5 + 10, "the partitions did not move to the active session"
    moved_after = time.monotonic() - stopped
    gone = httpx.get(f"{quiet}/records", timeout=10)
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "UNKNOWN_SESSION"
    assert moved_after >= 1.5  # it waited for the timeout ...
    produce_to_partitions(read_broker.bootstrap, topic, 2, 3)
    records = drain(active, 6)  # ... and the partitions' records now reach the other reader
    assert sorted(r["value"] for r in records) == sorted(f"p{p}-{i}" for p in range(2) for i in range(3))


def test_records_of_a_partition_that_moved_before_the_commit_go_to_its_new_reader(
        gateways: list[GatewayProcess], read_broker: BrokerProcess, sessions: Sessions, group: str) -> None:
    topic = create_topic(read_broker.bootstrap, unique_topic("reads"), 2)
    produce_to_partitions(read_broker.bootstrap, topic, 2, 3)
    first = sessions.open(gateways[0], group, [topic])
    delivered = drain(first, 6)  # alone in the group: both partitions
    assert len(delivered) == 6
    second = sessions.open(gateways[1], group, [topic])
    [kept], [moved] = settled_split([first, second], 2)
    refused = httpx.post(f"{first}/commit", timeout=30, json={"offsets": [
        {"topic": topic, "partition": moved, "offset": 3}, {"topic": topic, "partition": kept, "offset": 3}]})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "PARTITIONS_NOT_ASSIGNED"
    everything = httpx.post(f"{first}/commit", timeout=30)  # what the session still holds
    assert everything.json() == {"committed": [{"topic": topic, "partition": kept, "offset": 3}]}
    again = drain(second, 3)  # never committed: the new reader gets them all
    assert [r["value"] for r in again] == [f"p{moved}-{i}" for i in range(3)]


def test_a_new_session_resumes_from_the_committed_offsets(
        gateways: list[GatewayProcess], read_broker: BrokerProcess, sessions: Sessions, group: str) -> None:
    topic = create_topic(read_broker.bootstrap, unique_topic("reads"), 1)
    produce_all(producer(read_broker.bootstrap), topic, [f"r{i}".encode() for i in range(10)])
    first = sessions.open(gateways[0], group, [topic])
    batch = poll(first, 10_000, maxRecords=4)
    assert [r["offset"] for r in batch["records"]] == [0, 1, 2, 3]
    assert batch["next"] == [{"topic": topic, "partition": 0, "offset": 4}]
    committed = httpx.post(f"{first}/commit", timeout=30)  # empty body: everything delivered
    assert committed.json() == {"committed": [{"topic": topic, "partition": 0, "offset": 4}]}
    assert [r["offset"] for r in poll(first, 10_000, maxRecords=3)["records"]] == [4, 5, 6]
    one_more = httpx.post(f"{first}/commit", json={"offsets": [{"topic": topic, "partition": 0, "offset": 5}]},
                          timeout=30)  # only record 4 processed
    assert one_more.status_code == 200, one_more.text
    assert httpx.delete(first, timeout=30).status_code == 204

    second = sessions.open(gateways[1], group, [topic])
    again = drain(second, 5)  # 5 and 6 were delivered but not committed: delivered again; nothing before
    assert [r["value"] for r in again] == [f"r{i}" for i in range(5, 10)]
    cons = consumer(read_broker.bootstrap, {"group.id": group})
    try:  # the commit is the group's, as any Kafka client sees it
        [position] = cons.committed([TopicPartition(topic, 0)], timeout=10)
        assert position.offset == 5
    finally:
        cons.close()


def test_a_long_poll_answers_as_soon_as_a_record_arrives(
        gateways: list[GatewayProcess], read_broker: BrokerProcess, sessions: Sessions, group: str) -> None:
    topic = create_topic(read_broker.bootstrap, unique_topic("reads"), 1)
    url = sessions.open(gateways[0], group, [topic])
    wait_until(lambda: assignment(url) == {0}, timeout=20, interval=0.1, message="assignment")
    started = time.monotonic()
    assert poll(url, 400)["records"] == []  # nothing there: an empty answer after the wait
    assert 0.35 <= time.monotonic() - started < 5
    answered: list[tuple[float, dict[str, Any]]] = []
    waiter = threading.Thread(target=lambda: answered.append((0.0, poll(url, 20_000))))
    waiter.start()
    time.sleep(0.5)
    written = write_json(gateways[1].url, topic, "host-1", [(1, ["hello"])])
    assert written.status_code == 200, written.text
    sent = time.monotonic()
    waiter.join(25)
    latency = time.monotonic() - sent
    [(_, body)] = answered
    [record] = body["records"]
    assert record["value"] == "hello" and record["headers"]["tidelog-source-id"] == "host-1"
    assert latency < 3, f"the long-poll answered {latency:.2f} s after the write"


def test_a_session_nobody_polls_buffers_a_bounded_amount_and_loses_nothing(
        gateways: list[GatewayProcess], read_broker: BrokerProcess, sessions: Sessions, group: str) -> None:
    topic = create_topic(read_broker.bootstrap, unique_topic("reads"), 1)
    values = [b"%06d" % i + b"x" * 1018 for i in range(1500)]  # 1.5 MiB, six times the buffer
    produce_all(producer(read_broker.bootstrap), topic, values)
    url = sessions.open(gateways[0], group, [topic])
    wait_until(lambda: httpx.get(url, timeout=10).json()["bufferedBytes"] >= BUFFER_BYTES, timeout=20,
               message="the buffer filled")
    time.sleep(1.0)  # a reader that ignored the bound would read on meanwhile
    assert httpx.get(url, timeout=10).json()["bufferedBytes"] <= 3 * BUFFER_BYTES
    got: list[str] = []
    while len(got) < len(values):
        batch = poll(url, 5000)["records"]
        assert batch, f"stalled after {len(got)} records"
        got += [r["value"] for r in batch]
    assert got == [v.decode() for v in values]


def test_any_gateway_instance_serves_a_session_by_forwarding_to_the_one_holding_it(
        gateways: list[GatewayProcess], read_broker: BrokerProcess, sessions: Sessions, group: str) -> None:
    topic = create_topic(read_broker.bootstrap, unique_topic("reads"), 1)
    produce_all(producer(read_broker.bootstrap), topic, [b"a", b"b", b"c"])
    session_id = sessions.open(gateways[0], group, [topic]).rsplit("/", 1)[1]
    elsewhere = f"{gateways[1].url}/v1/sessions/{session_id}"
    raw = httpx.get(f"{elsewhere}/records", params={"waitMs": 10_000, "maxRecords": 2},
                    headers={"accept": "text/plain"}, timeout=30)
    assert (raw.status_code, raw.content, raw.headers["x-tidelog-records"]) == (200, b"a\nb\n", "2")
    assert [r["value"] for r in poll(elsewhere, 10_000)["records"]] == ["c"]
    committed = httpx.post(f"{elsewhere}/commit", timeout=30)
    assert committed.json() == {"committed": [{"topic": topic, "partition": 0, "offset": 3}]}
    waiting: list[httpx.Response] = []
    waiter = threading.Thread(target=lambda: waiting.append(poll_answer(elsewhere, 30_000)))
    waiter.start()
    time.sleep(0.5)
    started = time.monotonic()
    assert httpx.delete(elsewhere, timeout=30).status_code == 204
    waiter.join(30)  # a poll waiting in a deleted session answers at once
    assert time.monotonic() - started < 10 and waiting[0].status_code == 404, waiting[0].text
    gone = httpx.get(f"{gateways[0].url}/v1/sessions/{session_id}", timeout=10)
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "UNKNOWN_SESSION"
    # An id naming a host that is not one of the deployment's instances is not forwarded anywhere.
    forged = base64.urlsafe_b64encode(b"http://127.0.0.1:9").decode().rstrip("=") + "." + uuid.uuid4().hex
    answer = httpx.get(f"{gateways[1].url}/v1/sessions/{forged}/records", timeout=10)
    assert (answer.status_code, answer.json()["error"]["code"]) == (404, "UNKNOWN_SESSION")


def test_a_stopping_gateway_answers_its_long_polls_and_its_sessions_leave_the_group(
        tmp_path: Path, gateways: list[GatewayProcess], read_broker: BrokerProcess, sessions: Sessions,
        group: str) -> None:
    topic = create_topic(read_broker.bootstrap, unique_topic("reads"), 2)
    with GatewayProcess(tmp_path, read_broker.bootstrap) as leaving:
        stays = sessions.open(gateways[0], group, [topic])
        goes = sessions.open(leaving, group, [topic], timeoutMs=600_000)
        settled_split([stays, goes], 2)
        answered: list[int] = []
        waiter = threading.Thread(target=lambda: answered.append(
            httpx.get(f"{goes}/records", params={"waitMs": 60_000}, timeout=90).status_code))
        waiter.start()
        wait_until(lambda: "gateway_read_polls_waiting 1" in httpx.get(f"{leaving.url}/metrics").text,
                   timeout=20, interval=0.1, message="the long poll reached the leaving gateway")
        stopped = time.monotonic()
        assert leaving.process is not None
        leaving.process.send_signal(signal.SIGTERM)
        waiter.join(30)
        assert answered == [200] and time.monotonic() - stopped < 10
        assert leaving.process.wait(30) == 0
    # its session left the group on the way out: the other reader holds everything long before 600 s
    wait_until(lambda: assignment(stays) == {0, 1}, timeout=20, interval=0.2, message="partitions moved")


def test_a_session_reads_a_topic_from_every_data_centre_or_from_those_named(
        gateways: list[GatewayProcess], read_broker: BrokerProcess, sessions: Sessions, group: str) -> None:
    name = unique_topic("reads")
    for topic in (name, f"dc1.{name}", f"dc2.{name}"):
        create_topic(read_broker.bootstrap, topic, 1)
        produce_all(producer(read_broker.bootstrap), topic, [topic.encode()])
    every = sessions.open(gateways[0], group, [name], dataCentres="*")
    assert sorted(r["value"] for r in drain(every, 2)) == [f"dc1.{name}", f"dc2.{name}"]
    create_topic(read_broker.bootstrap, f"dc3.{name}", 1)  # a data centre that comes later is read too
    produce_all(producer(read_broker.bootstrap), f"dc3.{name}", [b"late"])
    assert [r["value"] for r in drain(every, 1, timeout=30)] == ["late"]
    assert poll(every, 500)["records"] == []  # never the unprefixed topic
    one = sessions.open(gateways[1], f"{group}-dc2", [name], dataCentres=["dc2"])
    assert [r["topic"] for r in drain(one, 1)] == [f"dc2.{name}"]


def test_raw_lines_and_base64_for_values_that_are_not_text(
        gateways: list[GatewayProcess], read_broker: BrokerProcess, sessions: Sessions, group: str) -> None:
    topic = create_topic(read_broker.bootstrap, unique_topic("reads"), 1)
    produce_all(producer(read_broker.bootstrap), topic, [b"line one", b"line two", b"\xff\xfe"])
    url = sessions.open(gateways[0], group, [topic])
    raw = httpx.get(f"{url}/records", params={"waitMs": 10_000, "maxRecords": 2, "format": "raw"}, timeout=30)
    assert raw.status_code == 200 and raw.headers["content-type"].startswith("text/plain")
    assert (raw.content, raw.headers["x-tidelog-records"]) == (b"line one\nline two\n", "2")
    [binary] = poll(url, 10_000)["records"]
    assert binary["valueBase64"] == "//4=" and "value" not in binary


def test_bad_requests_and_unknown_sessions_get_json_errors(
        gateways: list[GatewayProcess], read_broker: BrokerProcess, sessions: Sessions, group: str) -> None:
    gateway = gateways[1]
    topic = create_topic(read_broker.bootstrap, unique_topic("reads"), 1)
    produce_all(producer(read_broker.bootstrap), topic, [b"x"])

    def error(answer: httpx.Response) -> tuple[int, str]:
        return answer.status_code, answer.json()["error"]["code"]

    def create(body: dict[str, Any]) -> httpx.Response:
        return httpx.post(f"{gateway.url}/v1/sessions", json=body, timeout=30)

    assert error(create({"group": group, "topics": ["no-such-topic"]})) == (404, "UNKNOWN_TOPIC_OR_PARTITION")
    assert error(create({"group": group, "topics": []})) == (400, "INVALID_REQUEST")
    assert error(create({"group": group, "topics": [topic], "timeoutMs": 10})) == (400, "INVALID_REQUEST")
    own = gateway.settings["gateway.group.id"]
    assert error(create({"group": own, "topics": [topic]})) == (400, "INVALID_REQUEST")
    assert error(httpx.get(f"{gateway.url}/v1/sessions/nope/records", timeout=10)) == (404, "UNKNOWN_SESSION")
    assert error(httpx.post(f"{gateway.url}/v1/sessions/nope/commit", timeout=10)) == (404, "UNKNOWN_SESSION")

    url = sessions.open(gateway, group, [topic])
    assert error(httpx.get(f"{url}/records", params={"waitMs": "soon"}, timeout=10)) == (400, "INVALID_REQUEST")
    assert error(httpx.get(f"{url}/records", params={"maxRecords": 0}, timeout=10)) == (400, "INVALID_REQUEST")
    beyond = httpx.post(f"{url}/commit", json={"offsets": [{"topic": topic, "partition": 0, "offset": 1}]}, timeout=30)
    assert error(beyond) == (400, "INVALID_REQUEST")  # nothing delivered yet
    elsewhere = httpx.post(f"{url}/commit", json={"offsets": [{"topic": topic, "partition": 7, "offset": 1}]},
                           timeout=30)
    assert error(elsewhere) == (409, "PARTITIONS_NOT_ASSIGNED")
    assert elsewhere.json()["error"]["partitions"] == [{"topic": topic, "partition": 7}]

    for _ in range(SESSIONS_MAX - 1):
        sessions.open(gateway, f"{group}-{_}", [topic])
    full = create({"group": group, "topics": [topic]})
    assert error(full) == (429, "TOO_MANY_SESSIONS") and full.headers["retry-after"] == "1"

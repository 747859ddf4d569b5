"""The gateway through cluster trouble: a broker stopped and killed -9 under it, and its ownership
consumer fenced by another member with the same ``group.instance.id``.

A real broker subprocess (stopped or killed, then started again on the same port and data
directory) and a real ``tidelog gateway`` process; clients write chunks of several sources over HTTP
before, during and after the outage, one chunk at a time, retrying the same chunk (same seqno)
after a 503 or a broken connection, as the gateway's clients are told to. Then the topic is read
``read_committed``: every acknowledged chunk is there exactly once, in seqno order per source,
including the chunks answered 503 and sent again.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from helpers.broker_process import BrokerProcess, register_failure_report, wait_until
from helpers.clients import admin_client, consumer, create_topic, unique_topic
from helpers.gateway_process import GATEWAY_TEST_BROKER, GatewayProcess, write_json

RECOVERY_BOUND_S = 15.0
SOURCES = 4
# A session shorter than the outages below, so the ownership is lost and taken back; requests are
# answered within a few seconds whatever happens.
GATEWAY_SETTINGS = {"gateway.session.timeout.ms": 2000, "gateway.request.timeout.ms": 6000}
ANSWER_BOUND_S = 6.0 + 2.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[BrokerProcess]:
    register_failure_report(pytestconfig)
    with BrokerProcess(tmp_path_factory.mktemp("gw-recovery-broker"), GATEWAY_TEST_BROKER) as process:
        yield process


@dataclass
class Answer:
    at: float  # monotonic time the answer came
    took: float
    seqno: int
    status: int  # HTTP status, 0 for a broken connection
    detail: str = ""
    retry_after: str | None = None


@dataclass
class Source:
    """One source's client: chunk n carries seqno n and the value ``<source>:<n>``."""

    name: str
    next_seqno: int = 1
    answers: list[Answer] = field(default_factory=list)

    def acked(self) -> list[int]:
        return [a.seqno for a in self.answers if a.status == 200]

    def first_success_after(self, moment: float) -> float | None:
        return next((a.at for a in self.answers if a.status == 200 and a.at >= moment), None)


def run_source(url: str, topic: str, source: Source, stop: threading.Event, abandon: threading.Event) -> None:
    with httpx.Client(timeout=30) as client:
        while not abandon.is_set():
            seqno = source.next_seqno
            body = {"sourceId": source.name, "chunks": [{"seqno": seqno, "records": [{"value": f"{source.name}:{seqno}"}]}]}
            started = time.monotonic()
            try:
                answer = client.post(f"{url}/v1/topics/{topic}/write", json=body)
            except httpx.HTTPError as exc:
                source.answers.append(Answer(time.monotonic(), time.monotonic() - started, seqno, 0, str(exc)))
                time.sleep(0.1)
                continue
            now = time.monotonic()
            if answer.status_code == 200:
                chunk = answer.json()["chunks"][0]
                source.answers.append(Answer(now, now - started, seqno, 200, chunk["status"]))
                source.next_seqno += 1
                if stop.is_set():
                    return  # stops only after an acknowledged chunk: nothing is left unanswered
                time.sleep(0.02)
                continue
            error = answer.json().get("error", {})
            source.answers.append(Answer(now, now - started, seqno, answer.status_code, error.get("message", ""),
                                         answer.headers.get("retry-after")))
            time.sleep(0.2)  # shorter than Retry-After (1 s): the test measures how soon writes work again


class Clients:
    def __init__(self, url: str, topic: str) -> None:
        self.sources = [Source(f"host-{n}:/var/log/app.log") for n in range(SOURCES)]
        self.stop = threading.Event()
        self.abandon = threading.Event()  # the test failed: stop at once, acknowledged or not
        self.threads = [threading.Thread(target=run_source, args=(url, topic, s, self.stop, self.abandon), daemon=True)
                        for s in self.sources]

    def __enter__(self) -> Clients:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.stop.set()
        if exc_type is not None:
            self.abandon.set()
        deadline = time.monotonic() + 30
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        assert not any(thread.is_alive() for thread in self.threads), "a client never got its last chunk acknowledged"

    def wait_acked(self, count: int, timeout: float = 20.0) -> None:
        wait_until(lambda: all(len(s.acked()) >= count for s in self.sources), timeout,
                   message=f"{count} chunks acknowledged per source")

    def answers(self) -> list[Answer]:
        return [a for s in self.sources for a in s.answers]


def seqnos_in_topic(bootstrap: str, topic: str) -> dict[str, list[int]]:
    """Per source (the gateway's source-id header), the seqnos of the committed records, in offset order."""
    cons: Consumer = consumer(bootstrap, {"isolation.level": "read_committed", "enable.partition.eof": True})
    cons.assign([TopicPartition(topic, 0, 0)])
    out: dict[str, list[int]] = {}
    try:
        while True:
            message = cons.poll(10)
            assert message is not None, f"no end of {topic}-0 reached"
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                return out
            headers = dict(message.headers() or [])
            source, seqno = headers["tidelog-source-id"].decode(), int(headers["tidelog-seqno"])
            assert message.value() == f"{source}:{seqno}".encode()
            out.setdefault(source, []).append(seqno)
    finally:
        cons.close()


def check_exactly_once(bootstrap: str, topic: str, clients: Clients) -> None:
    stored = seqnos_in_topic(bootstrap, topic)
    for source in clients.sources:
        acked = source.acked()
        assert acked == list(range(1, len(acked) + 1))
        # Every acknowledged chunk once, in order; nothing else (each client ends on an acknowledged chunk).
        assert stored.get(source.name) == acked, (source.name, stored.get(source.name), acked)


def outage(broker: BrokerProcess, clients: Clients, gateway: GatewayProcess, sig: int) -> tuple[float, list[Answer]]:
    """Stop the broker with ``sig`` (clients writing on), keep it down past the gateway's session
    timeout, start it again; returns when it serves and the answers given while it was down."""
    went = time.monotonic()
    broker.stop(sig)
    time.sleep(2.5)  # and the broker's start-up: down for longer than the session timeout
    assert gateway.process is not None and gateway.process.poll() is None, gateway.log_tail()
    broker.start()
    back = time.monotonic()
    during = [a for a in clients.answers() if went + 0.5 <= a.at <= back]
    return back, during


def check_outage_answers(during: list[Answer], gateway: GatewayProcess) -> None:
    unavailable = [a for a in during if a.status == 503]
    assert unavailable, f"no 503 while the broker was down: {during[-5:]}\n{gateway.log_tail()}"
    assert all(a.retry_after is not None and int(a.retry_after) >= 1 for a in unavailable), unavailable[:3]
    assert all(a.status in (200, 503) for a in during), [a for a in during if a.status not in (200, 503)][:3]


def test_writes_resume_after_a_broker_restart_and_a_kill9_with_every_acknowledged_chunk_once(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = create_topic(broker.bootstrap, unique_topic("gwrecover"), 1)
    with GatewayProcess(tmp_path / "gw", broker.bootstrap, GATEWAY_SETTINGS) as gateway, \
            Clients(gateway.url, topic) as clients:
        clients.wait_acked(3)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            back, during = outage(broker, clients, gateway, sig)
            check_outage_answers(during, gateway)
            def written_again(back: float = back) -> bool:
                return all(s.first_success_after(back) for s in clients.sources)

            wait_until(written_again, RECOVERY_BOUND_S, interval=0.1,
                       message=f"every source written again after the broker's return (signal {sig})")
            resumed = max(s.first_success_after(back) or 0.0 for s in clients.sources) - back
            print(f"signal {sig}: every source written again {resumed:.1f} s after the broker served")
            counts = [len(s.acked()) for s in clients.sources]
            clients.wait_acked(max(counts) + 2)
        slowest = max(a.took for a in clients.answers())
        assert slowest < ANSWER_BOUND_S, f"an answer took {slowest:.1f} s"
        assert gateway.process is not None and gateway.process.poll() is None, gateway.log_tail()
    retried = sum(1 for s in clients.sources for a in s.answers if a.status == 503 and a.seqno in s.acked())
    assert retried > 0
    check_exactly_once(broker.bootstrap, topic, clients)


def metric(url: str, name: str) -> float:
    for line in httpx.get(f"{url}/metrics", timeout=5).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def sole_member(admin: AdminClient, group: str, state_topic: str) -> str:
    """The member id of the group's only member when it holds every shard, else ""."""
    try:
        description = admin.describe_consumer_groups([group], request_timeout=5)[group].result(timeout=10)
    except KafkaException:
        return ""
    members = description.members
    if len(members) != 1 or members[0].assignment is None:
        return ""
    held = {tp.partition for tp in members[0].assignment.topic_partitions if tp.topic == state_topic}
    return str(members[0].member_id) if held == set(range(4)) else ""


def test_a_fenced_ownership_consumer_is_replaced_and_the_shards_come_back(broker: BrokerProcess, tmp_path: Path) -> None:
    topic = create_topic(broker.bootstrap, unique_topic("gwfenced"), 1)
    with GatewayProcess(tmp_path / "gw", broker.bootstrap, GATEWAY_SETTINGS) as gateway:
        group, state_topic = gateway.settings["gateway.group.id"], gateway.settings["gateway.state.topic"]
        source = "host-f:/var/log/app.log"
        assert write_json(gateway.url, topic, source, [(1, [f"{source}:1"])]).status_code == 200
        # Another member with the gateway's group.instance.id takes its seat: the gateway's consumer is
        # fenced (FENCED_INSTANCE_ID, fatal in librdkafka), as after some broker restarts.
        impostor = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                             "group.instance.id": gateway.settings["gateway.instance.id"], "client.id": gateway.url,
                             "partition.assignment.strategy": "cooperative-sticky", "session.timeout.ms": 2000,
                             "enable.auto.commit": False})
        impostor.subscribe([state_topic])
        try:
            wait_until(lambda: (impostor.poll(0.1), impostor.assignment())[1], 15, message="the impostor holds shards")
            impostor_id = impostor.memberid()
            wait_until(lambda: metric(gateway.url, "gateway_group_consumer_replacements_total") >= 1, RECOVERY_BOUND_S,
                       interval=0.1, message="the gateway's fenced consumer replaced")
        finally:
            impostor.close()  # a static member: it stays in the group until replaced or its session ends
        fenced_at = time.monotonic()
        statuses = []
        while True:
            answer = write_json(gateway.url, topic, source, [(2, [f"{source}:2"])])
            statuses.append(answer.status_code)
            if answer.status_code == 200 or time.monotonic() - fenced_at > RECOVERY_BOUND_S:
                break
            assert answer.status_code == 503 and "retry-after" in answer.headers, answer.text
            time.sleep(0.2)
        assert answer.status_code == 200, (statuses[-3:], answer.text, gateway.log_tail())
        print(f"written again {time.monotonic() - fenced_at:.1f} s after the impostor left ({len(statuses)} tries)")
        # The gateway's new consumer holds every shard (the impostor's seat is gone).
        admin = admin_client(broker.bootstrap)  # the broker stays up: none of librdkafka's admin troubles here
        member = wait_until(lambda: sole_member(admin, group, state_topic), RECOVERY_BOUND_S, interval=0.2,
                            message="the gateway alone in its group with every shard")
        assert member != impostor_id
        # The state was read again: an old seqno is a duplicate, the next one is written.
        again = write_json(gateway.url, topic, source, [(1, [f"{source}:1"]), (2, [f"{source}:2"]), (3, [f"{source}:3"])])
        assert [c["status"] for c in again.json()["chunks"]] == ["duplicate", "duplicate", "written"], again.text
    assert seqnos_in_topic(broker.bootstrap, topic) == {source: [1, 2, 3]}

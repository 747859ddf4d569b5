"""The gateway in front of Apache Kafka: it reaches the cluster only through the Kafka protocol, so
exactly-once per source must hold there too.

Against the reference Kafka of the compat tier (``reference_kafka``): duplicates are skipped across
a gateway kill -9 and restart, and a stream through two instances, one of them killed mid-stream,
lands exactly once (read_committed checker); pull reads: two read sessions of one group split the
partitions, and a new session resumes from what the first committed; push reads: a subscription
delivers every record in order per partition to an endpoint failing every other request, committing
only what it took, and resumes at the commits after a kill -9; the staged API: a transaction is
invisible to read_committed readers until /commit, then visible once; with bearer tokens, a Kafka
without an authorizer answers the gateway's DescribeAcls with SECURITY_DISABLED and the gateway
applies no ACL (as that Kafka applies none to its own clients).
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import httpx
from compat_harness.kafka import ReferenceKafka

from helpers.clients import consume, create_topic, produce_all, producer
from helpers.gateway_process import GatewayProcess, write_json
from helpers.gateway_stream import check_exactly_once, send_stream
from helpers.push_endpoint import FlakyEndpoint


def _bootstrap(kafka: ReferenceKafka) -> str:
    return f"{kafka.host}:{kafka.port}"


def test_gateway_on_kafka_skips_duplicates_across_a_kill9_restart(reference_kafka: ReferenceKafka,
                                                                   tmp_path: Path) -> None:
    bootstrap = _bootstrap(reference_kafka)
    topic = create_topic(bootstrap, f"gw-dup-{uuid.uuid4().hex[:8]}", 2)
    with GatewayProcess(tmp_path, bootstrap) as gateway:
        first = write_json(gateway.url, topic, "web-1", [(1, ["a"]), (2, ["b"])])
        assert [c["status"] for c in first.json()["chunks"]] == ["written", "written"], first.text
        gateway.kill9()
        gateway.start()
        again = write_json(gateway.url, topic, "web-1", [(2, ["b"]), (3, ["c"])])
        assert [c["status"] for c in again.json()["chunks"]] == ["duplicate", "written"], again.text
        assert again.json()["partition"] == first.json()["partition"]


def test_gateway_on_kafka_stream_through_two_instances_lands_exactly_once(reference_kafka: ReferenceKafka,
                                                                          tmp_path: Path) -> None:
    bootstrap = _bootstrap(reference_kafka)
    topic = create_topic(bootstrap, f"gw-stream-{uuid.uuid4().hex[:8]}", 3)
    group = f"gw-{uuid.uuid4().hex[:8]}"
    first = GatewayProcess(tmp_path / "a", bootstrap, group=group).start()
    second = GatewayProcess(tmp_path / "b", bootstrap, group=group).start()
    restarts: list[threading.Thread] = []

    def on_progress(fraction: float) -> None:
        if fraction >= 0.4 and not restarts:
            first.kill9()
            restarts.append(threading.Thread(target=first.start))
            restarts[0].start()

    try:
        send_stream([first.url, second.url], topic, sources=10, chunks_per_source=30, on_progress=on_progress)
        restarts[0].join(60)
    finally:
        first.close()
        second.close()
    assert check_exactly_once(bootstrap, topic, 3, 10, 30) == 10 * 30 * 2


def test_gateway_on_kafka_read_sessions_share_a_group_and_resume_from_commits(reference_kafka: ReferenceKafka,
                                                                            tmp_path: Path) -> None:
    bootstrap = _bootstrap(reference_kafka)
    topic = create_topic(bootstrap, f"gw-read-{uuid.uuid4().hex[:8]}", 2)
    group = f"readers-{uuid.uuid4().hex[:8]}"
    with GatewayProcess(tmp_path, bootstrap) as gateway:
        for source in ("a", "b", "c", "d"):  # four sources spread over both partitions
            assert write_json(gateway.url, topic, source, [(1, [f"{source}1", f"{source}2"])]).status_code == 200

        def open_session() -> str:
            answer = httpx.post(f"{gateway.url}/v1/sessions", timeout=30,
                                json={"group": group, "topics": [topic], "autoOffsetReset": "earliest"})
            assert answer.status_code == 201, answer.text
            url: str = answer.json()["url"]
            return url

        def held(url: str) -> set[int]:
            return {a["partition"] for a in httpx.get(url, timeout=30).json()["assignment"]}

        first, second = open_session(), open_session()
        deadline = time.monotonic() + 30
        while not (held(first) and held(second)):
            assert time.monotonic() < deadline, "two sessions of one group did not split the partitions"
            time.sleep(0.2)
        assert held(first) | held(second) == {0, 1} and not held(first) & held(second)
        got = httpx.get(f"{first}/records", params={"waitMs": 10_000}, timeout=30).json()["records"]
        assert got and {r["partition"] for r in got} <= held(first)
        assert httpx.post(f"{first}/commit", timeout=30).status_code == 200
        for url in (first, second):
            assert httpx.delete(url, timeout=30).status_code == 204
        resumed = open_session()  # holds both partitions now: only what was not committed comes again
        values: list[str] = []
        deadline = time.monotonic() + 30
        while len(values) < 8 - len(got) and time.monotonic() < deadline:
            values += [r["value"] for r in httpx.get(f"{resumed}/records", params={"waitMs": 1000},
                                                     timeout=30).json()["records"]]
        assert sorted(values) == sorted({f"{s}{i}" for s in "abcd" for i in (1, 2)} - {r["value"] for r in got})


def test_gateway_on_kafka_without_an_authorizer_applies_no_acl(reference_kafka: ReferenceKafka,
                                                                tmp_path: Path) -> None:
    bootstrap = _bootstrap(reference_kafka)
    topic = create_topic(bootstrap, f"gw-acl-{uuid.uuid4().hex[:8]}", 1)
    tokens = tmp_path / "tokens"
    tokens.write_text("t-alice User:alice\n")
    headers = {"authorization": "Bearer t-alice"}
    with GatewayProcess(tmp_path, bootstrap, {"gateway.auth.tokens.file": tokens}).start(headers=headers) as gateway:
        written = write_json(gateway.url, topic, "web-1", [(1, ["a"])], headers=headers)
        assert written.status_code == 200 and written.json()["chunks"][0]["status"] == "written", written.text
        assert "has no authorizer" in gateway.log_tail()


def test_gateway_on_kafka_push_delivers_every_record_in_order_and_resumes_after_a_kill9(
        reference_kafka: ReferenceKafka, tmp_path: Path) -> None:
    bootstrap = _bootstrap(reference_kafka)
    topic = create_topic(bootstrap, f"gw-push-{uuid.uuid4().hex[:8]}", 2)
    prod = producer(bootstrap)
    for p in range(2):
        produce_all(prod, topic, [f"p{p}-{i}".encode() for i in range(60)], partition=p)
    # the default session timeout (10 s): Kafka refuses less than group.min.session.timeout.ms (6 s)
    with FlakyEndpoint(2, 250) as endpoint, GatewayProcess(tmp_path, bootstrap) as gateway:
        answer = httpx.post(f"{gateway.url}/v1/subscriptions", timeout=30, json={
            "group": f"hook-{uuid.uuid4().hex[:8]}", "topics": [topic], "endpoint": endpoint.url,
            "maxBatchRecords": 10, "autoOffsetReset": "earliest", "timeoutMs": 250, "retryBackoffMs": 20,
            "retryBackoffMaxMs": 200})
        assert answer.status_code == 201, answer.text
        deadline = time.monotonic() + 60
        while sum(endpoint.delivered_through().values()) < 60:
            assert time.monotonic() < deadline, endpoint.delivered_through()
            time.sleep(0.1)
        gateway.kill9()
        for p in range(2):
            produce_all(prod, topic, [f"p{p}-{i}".encode() for i in range(60, 80)], partition=p)
        gateway.start(60)  # the subscription is read back from the Kafka topic that keeps it
        while endpoint.delivered_through() != {0: 80, 1: 80}:
            assert time.monotonic() < deadline + 60, endpoint.delivered_through()
            time.sleep(0.1)
    for p in range(2):
        offsets = [r["offset"] for batch in endpoint.batches() for r in batch if r["partition"] == p]
        assert all(r["value"] == f"p{p}-{r['offset']}" for batch in endpoint.batches() for r in batch
                   if r["partition"] == p)
        assert sorted(set(offsets)) == list(range(80))  # every record; a retried batch may come twice


def test_gateway_on_kafka_staged_transaction_is_invisible_until_commit(reference_kafka: ReferenceKafka,
                                                                        tmp_path: Path) -> None:
    bootstrap = _bootstrap(reference_kafka)
    topic = create_topic(bootstrap, f"gw-staged-{uuid.uuid4().hex[:8]}", 1)

    def visible(isolation: str, count: int) -> list[bytes]:
        read = consume(bootstrap, topic, count, settle=1.0, config={"isolation.level": isolation})
        return [m.value() or b"" for m in read]

    with GatewayProcess(tmp_path, bootstrap, {"gateway.staged.dir": tmp_path / "staged"}) as gateway:
        stored = httpx.post(f"{gateway.url}/v1/staged/store", params={"topic": topic, "seqno": 1},
                            content="a\nb\n", timeout=30)
        assert stored.status_code == 200, stored.text
        txn = {"transactionId": stored.json()["transactionId"]}
        requested = httpx.post(f"{gateway.url}/v1/staged/commit_request", params=txn, timeout=60)
        assert requested.status_code == 200 and requested.json()["state"] == "requested", requested.text
        assert visible("read_uncommitted", 2) == [b"a", b"b"]  # in Kafka...
        assert visible("read_committed", 0) == []  # ...and invisible to read_committed readers
        committed = httpx.post(f"{gateway.url}/v1/staged/commit", params=txn, timeout=60)
        assert committed.status_code == 200 and committed.json()["state"] == "committed", committed.text
        assert visible("read_committed", 2) == [b"a", b"b"]

"""The gateway's push reads against a tidelog broker subprocess and a real HTTP endpoint in the test that
fails every other request (a 500, or no answer within the subscription's ``timeoutMs``): every record
reaches the endpoint at least once, in order per partition, never past a gap; the group's committed
offsets never pass a record the endpoint has not taken; after a kill -9 the restarted gateway (which
reads the subscription back from the cluster) resumes exactly at the committed offsets; the failures
show in the metrics; a deleted subscription stops; bad subscriptions are refused and stored nowhere.
With a dead-letter topic, batches an endpoint keeps refusing land there (with where they came from
and why) and are committed, and the subscription goes on.
Two instances of one deployment both run a subscription made through either (each a member of its
group, holding part of its partitions), and a deletion through one stops it on the other.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from confluent_kafka import TopicPartition

from helpers.broker_process import BrokerProcess, module_broker, wait_until
from helpers.clients import consume, consumer, create_topic, produce_all, producer, unique_topic
from helpers.gateway_process import GATEWAY_TEST_BROKER, GatewayProcess
from helpers.push_endpoint import FlakyEndpoint, ScriptedEndpoint

push_broker = module_broker("push_broker", GATEWAY_TEST_BROKER)
PARTITIONS = 3
TIMEOUT_MS = 250


@pytest.fixture
def endpoint() -> Iterator[FlakyEndpoint]:
    with FlakyEndpoint(PARTITIONS, TIMEOUT_MS) as flaky:
        yield flaky


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    reader = consumer(bootstrap, {"group.id": group})
    try:
        answer = reader.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    finally:
        reader.close()
    return {tp.partition: max(tp.offset, 0) for tp in answer}


def produce(bootstrap: str, topic: str, start: int, end: int) -> None:
    prod = producer(bootstrap)
    for p in range(PARTITIONS):
        produce_all(prod, topic, [f"p{p}-{i}".encode() for i in range(start, end)], partition=p)


def metric(gateway: GatewayProcess, name: str, subscription: str) -> float:
    text = httpx.get(f"{gateway.url}/metrics", timeout=10).text
    return sum(float(line.rpartition(" ")[2]) for line in text.splitlines()
               if line.startswith(name + "{") and f'subscription="{subscription}"' in line)


def test_a_flaky_endpoint_gets_every_record_in_order_and_a_restart_resumes_from_the_commits(
        push_broker: BrokerProcess, endpoint: FlakyEndpoint, tmp_path: Any) -> None:
    bootstrap = push_broker.bootstrap
    topic = create_topic(bootstrap, unique_topic("push"), PARTITIONS)
    group = f"hook-{uuid.uuid4().hex[:8]}"
    produce(bootstrap, topic, 0, 200)
    gateway = GatewayProcess(tmp_path, bootstrap, {"gateway.session.timeout.ms": 1500}).start(60)
    try:
        for refused, status in (({"group": group, "topics": [topic], "endpoint": "ftp://x/y"}, 400),
                                ({"group": group, "topics": [topic], "endpoint": "http://"}, 400),
                                ({"group": group, "topics": [topic], "endpoint": "http://h/", "maxBatchRecords": 0}, 400),
                                ({"group": group, "topics": [topic]}, 400),
                                ({"group": group, "topics": ["no-such-topic"], "endpoint": "http://h/"}, 404)):
            answer = httpx.post(f"{gateway.url}/v1/subscriptions", json=refused, timeout=30)
            assert answer.status_code == status, answer.text
        assert httpx.get(f"{gateway.url}/v1/subscriptions", timeout=10).json() == {"subscriptions": []}
        answer = httpx.post(f"{gateway.url}/v1/subscriptions", timeout=30, json={
            "group": group, "topics": [topic], "endpoint": endpoint.url, "maxBatchRecords": 25,
            "autoOffsetReset": "earliest", "timeoutMs": TIMEOUT_MS, "retryBackoffMs": 20, "retryBackoffMaxMs": 200})
        assert answer.status_code == 201, answer.text
        sub = answer.json()["subscriptionId"]
        assert httpx.get(answer.headers["location"], timeout=10).json()["endpoint"] == endpoint.url

        def halfway() -> bool:
            # Committed offsets never pass what the endpoint has taken (read the commits first: the
            # endpoint takes a batch before the gateway commits it).
            commits = committed(bootstrap, group, topic)
            through = endpoint.delivered_through()
            assert all(commits[p] <= through[p] for p in range(PARTITIONS)), (commits, through)
            return sum(through.values()) >= 300
        wait_until(halfway, timeout=30, interval=0.1, message="half the records delivered")
        assert metric(gateway, "gateway_push_delivery_failures_total", sub) > 0
        assert f'gateway_push_paused{{subscription="{sub}"}}' in httpx.get(f"{gateway.url}/metrics").text

        gateway.kill9()  # mid-stream: a batch may be taken but not committed
        at_kill = committed(bootstrap, group, topic)
        through = endpoint.delivered_through()
        assert all(at_kill[p] <= through[p] for p in range(PARTITIONS)), (at_kill, through)
        before_restart = len(endpoint.batches())
        produce(bootstrap, topic, 200, 300)
        gateway.start(60)  # the subscription is read back from the cluster

        def everything() -> bool:
            commits = committed(bootstrap, group, topic)
            through = endpoint.delivered_through()
            assert all(commits[p] <= through[p] for p in range(PARTITIONS)), (commits, through)
            return all(through[p] == 300 for p in range(PARTITIONS)) and all(commits[p] == 300 for p in commits)
        wait_until(everything, timeout=40, interval=0.2, message="every record delivered and committed")

        batches = endpoint.batches()
        for p in range(PARTITIONS):
            next_expected = 0
            for batch in batches:
                offsets = [r["offset"] for r in batch if r["partition"] == p]
                assert all(r["value"] == f"p{p}-{r['offset']}" for r in batch if r["partition"] == p)
                if not offsets:
                    continue
                assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))  # in order, no gap inside
                assert offsets[0] <= next_expected  # never past a record not yet taken
                next_expected = max(next_expected, offsets[-1] + 1)
            assert next_expected == 300
            # After the restart, the partition starts again exactly at its committed offset.
            first_after = next(b for b in batches[before_restart:] if any(r["partition"] == p for r in b))
            assert min(r["offset"] for r in first_after if r["partition"] == p) == at_kill[p]

        listed = httpx.get(f"{gateway.url}/v1/subscriptions", timeout=10).json()["subscriptions"]
        assert [s["subscriptionId"] for s in listed] == [sub]
        assert httpx.delete(f"{gateway.url}/v1/subscriptions/{sub}", timeout=30).status_code == 204
        gone = httpx.get(f"{gateway.url}/v1/subscriptions/{sub}", timeout=10)
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "UNKNOWN_SUBSCRIPTION"
        time.sleep(0.5)  # let a batch in flight end
        taken = len(endpoint.batches())
        produce(bootstrap, topic, 300, 310)
        time.sleep(1.5)
        assert len(endpoint.batches()) == taken  # deleted: nothing more is delivered
    finally:
        gateway.close()



def test_every_instance_runs_a_subscription_made_through_any_of_them_sharing_its_partitions(
        push_broker: BrokerProcess, endpoint: FlakyEndpoint, tmp_path: Any) -> None:
    bootstrap = push_broker.bootstrap
    topic = create_topic(bootstrap, unique_topic("push"), PARTITIONS)
    deployment = f"gw-{uuid.uuid4().hex[:8]}"
    gateways = [GatewayProcess(tmp_path / name, bootstrap, {"gateway.session.timeout.ms": 1500}, group=deployment)
                .start(wait_ready=False) for name in ("a", "b")]
    try:
        for gateway in gateways:
            gateway.wait_ready(60)
        first, second = gateways
        answer = httpx.post(f"{first.url}/v1/subscriptions", timeout=30, json={
            "group": f"hook-{uuid.uuid4().hex[:8]}", "topics": [topic], "endpoint": endpoint.url,
            "autoOffsetReset": "earliest", "timeoutMs": TIMEOUT_MS, "retryBackoffMs": 20, "retryBackoffMaxMs": 200})
        assert answer.status_code == 201, answer.text
        sub = answer.json()["subscriptionId"]

        def held_by_each() -> list[set[int]] | None:
            held = []
            for gateway in gateways:
                found = httpx.get(f"{gateway.url}/v1/subscriptions/{sub}", timeout=10)
                if found.status_code != 200:
                    return None
                held.append({tp["partition"] for tp in found.json()["status"].get("assignment", [])})
            together = sorted(p for h in held for p in h)
            return held if all(held) and together == list(range(PARTITIONS)) else None
        wait_until(held_by_each, timeout=30, interval=0.2, message="both instances share the partitions")
        produce(bootstrap, topic, 0, 50)
        wait_until(lambda: all(end == 50 for end in endpoint.delivered_through().values()), timeout=30,
                   interval=0.1, message="every record delivered")

        assert httpx.delete(f"{second.url}/v1/subscriptions/{sub}", timeout=30).status_code == 204
        wait_until(lambda: httpx.get(f"{first.url}/v1/subscriptions/{sub}", timeout=10).status_code == 404,
                   timeout=10, interval=0.1, message="the deletion reaches the other instance")
        wait_until(lambda: "gateway_push_subscriptions 0" in httpx.get(f"{first.url}/metrics", timeout=10).text,
                   timeout=10, interval=0.1, message="the other instance stops the subscription")
    finally:
        for gateway in gateways:
            gateway.close()


def test_batches_an_endpoint_keeps_refusing_go_to_the_dead_letter_topic_and_delivery_goes_on(
        push_broker: BrokerProcess, tmp_path: Any) -> None:
    bootstrap = push_broker.bootstrap
    topic = create_topic(bootstrap, unique_topic("push"), 1)
    dead = create_topic(bootstrap, unique_topic("dlq"), 1)
    group = f"hook-{uuid.uuid4().hex[:8]}"
    produce_all(producer(bootstrap), topic, [f"r{i}".encode() for i in range(30)], partition=0)
    refusing = ScriptedEndpoint(default=422)
    with refusing, GatewayProcess(tmp_path, bootstrap).start(60) as gateway:
        missing = httpx.post(f"{gateway.url}/v1/subscriptions", timeout=30, json={
            "group": group, "topics": [topic], "endpoint": refusing.url, "deadLetterTopic": "no-such-dlq"})
        assert missing.status_code == 404, missing.text
        answer = httpx.post(f"{gateway.url}/v1/subscriptions", timeout=30, json={
            "group": group, "topics": [topic], "endpoint": refusing.url, "maxBatchRecords": 10,
            "autoOffsetReset": "earliest", "retryBackoffMs": 10, "retryBackoffMaxMs": 20,
            "deadLetterTopic": dead, "deadLetterAfterAttempts": 2})
        assert answer.status_code == 201, answer.text
        assert answer.json()["deadLetterTopic"] == dead and answer.json()["deadLetterAfterAttempts"] == 2
        sub = answer.json()["subscriptionId"]
        wait_until(lambda: committed_one(bootstrap, group, topic) == 30, timeout=30, interval=0.2,
                   message="every refused batch dead-lettered and committed")
        assert metric(gateway, "gateway_push_dead_lettered_records_total", sub) == 30
    letters = consume(bootstrap, dead, 30, settle=0.5)
    assert [m.value() for m in letters] == [f"r{i}".encode() for i in range(30)]
    headers = dict(letters[7].headers() or [])
    assert headers["tidelog-dlq-topic"] == topic.encode() and headers["tidelog-dlq-offset"] == b"7"
    assert headers["tidelog-dlq-partition"] == b"0" and headers["tidelog-dlq-subscription"] == sub.encode()
    assert headers["tidelog-dlq-error"] == b"the endpoint answered 422"
    assert len(refusing.bodies) >= 6  # two attempts of each of the three batches


def committed_one(bootstrap: str, group: str, topic: str) -> int:
    reader = consumer(bootstrap, {"group.id": group})
    try:
        return max(reader.committed([TopicPartition(topic, 0)], timeout=10)[0].offset, 0)
    finally:
        reader.close()

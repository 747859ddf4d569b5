"""Several gateway instances: each source served by one instance at a time, any instance answers.

Two instances of one deployment (same group) split the shards through the consumer group; a request
sent to the instance that does not own the source's shard is forwarded to the owner, and one that was
forwarded already is answered 421 with the owner's URL. A stream sent round robin to both, with one
instance killed and restarted mid-stream, lands exactly once.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from helpers.broker_process import BrokerProcess, module_broker, wait_until
from helpers.clients import create_topic, unique_topic
from helpers.gateway_process import GATEWAY_TEST_BROKER, GatewayProcess, write_json
from helpers.gateway_stream import check_exactly_once, send_stream

instances_broker = module_broker("instances_broker", GATEWAY_TEST_BROKER)


def owned(gateway: GatewayProcess) -> int:
    match = re.search(r"^gateway_shards_owned (\d+)", httpx.get(f"{gateway.url}/metrics").text, re.M)
    return int(match.group(1)) if match else -1


@pytest.fixture
def pair(tmp_path: Path, instances_broker: BrokerProcess) -> Iterator[tuple[GatewayProcess, GatewayProcess]]:
    group = f"pair-{unique_topic()}"
    first = GatewayProcess(tmp_path / "a", instances_broker.bootstrap, group=group).start()
    second = GatewayProcess(tmp_path / "b", instances_broker.bootstrap, group=group).start()
    try:
        wait_until(lambda: owned(first) > 0 and owned(second) > 0 and owned(first) + owned(second) == 4,
                   timeout=30, message="both instances own shards")
        for gateway in (first, second):
            gateway.wait_ready()
        yield first, second
    finally:
        first.close()
        second.close()


def test_request_at_a_non_owner_is_forwarded_and_duplicates_are_skipped_whichever_instance_answers(
        pair: tuple[GatewayProcess, GatewayProcess], instances_broker: BrokerProcess) -> None:
    first, second = pair
    topic = create_topic(instances_broker.bootstrap, unique_topic(), 2)
    sources = [f"s{n}" for n in range(12)]  # with 4 shards over 2 instances, some of these are remote to each
    for source in sources:
        assert write_json(first.url, topic, source, [(1, [source])]).status_code == 200
    for source in sources:
        answer = write_json(second.url, topic, source, [(1, [source]), (2, [source + "+"])])
        assert [c["status"] for c in answer.json()["chunks"]] == ["duplicate", "written"], answer.text
    states = [httpx.get(f"{g.url}/v1/topics/{topic}/sources", params={"sourceId": "s0"}).json() for g in pair]
    assert states[0] == states[1] and states[0]["lastSeqno"] == 2


def test_forwarded_request_at_a_non_owner_gets_421_with_the_owner(pair: tuple[GatewayProcess, GatewayProcess],
                                                                   instances_broker: BrokerProcess) -> None:
    first, second = pair
    topic = create_topic(instances_broker.bootstrap, unique_topic())
    for n in range(20):
        answer = httpx.post(f"{first.url}/v1/topics/{topic}/write", params={"sourceId": f"x{n}", "seqno": 1},
                            content=b"v", headers={"X-Tidelog-Forwarded-By": "http://elsewhere"})
        if answer.status_code == 421:
            assert answer.json()["error"]["code"] == "NOT_OWNER"
            assert answer.json()["error"]["owner"] == second.url
            return
        assert answer.status_code == 200
    pytest.fail("no source of 20 hashed to the other instance's shards")


def test_stream_through_two_instances_with_one_killed_lands_exactly_once(
        pair: tuple[GatewayProcess, GatewayProcess], instances_broker: BrokerProcess) -> None:
    first, second = pair
    topic = create_topic(instances_broker.bootstrap, unique_topic(), 3)
    killed: list[threading.Thread] = []

    def on_progress(fraction: float) -> None:
        if fraction >= 0.4 and not killed:
            second.kill9()
            restart = threading.Thread(target=second.start)
            restart.start()
            killed.append(restart)

    retries = send_stream([first.url, second.url], topic, sources=10, chunks_per_source=40, on_progress=on_progress)
    killed[0].join(60)
    assert retries > 0
    assert check_exactly_once(instances_broker.bootstrap, topic, 3, 10, 40) == 10 * 40 * 2

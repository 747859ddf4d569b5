"""A push subscription's delivery of one batch, against a real local HTTP endpoint and a stand-in for the
read session (the seam: what the member holds, and the commits it is asked for): a failing batch is
sent again, the same, until a 2xx; only then are its offsets committed, and only for partitions the
member still holds."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import httpx
import pytest

from helpers.push_endpoint import ScriptedEndpoint
from tidelog.gateway.config import GatewayConfig
from tidelog.gateway.model import InvalidRequest
from tidelog.gateway.push import PushMetrics, PushRunner
from tidelog.gateway.push_model import parse_subscription, spec_from_record, spec_record
from tidelog.gateway.read_model import Delivered, Offset
from tidelog.observability.registry import Counter, Registry


@pytest.fixture
def endpoint() -> Iterator[ScriptedEndpoint]:
    with ScriptedEndpoint() as served:
        yield served


class Member:
    """What a ReadSession tells the runner: delivered positions (one per held partition) and commits."""

    def __init__(self, positions: dict[tuple[str, int], int]) -> None:
        self.held = dict(positions)
        self.commits: list[list[Offset]] = []

    def positions(self) -> list[Offset]:
        return [Offset(t, p, o) for (t, p), o in sorted(self.held.items())]

    async def commit(self, offsets: list[Offset]) -> list[Offset]:
        self.commits.append(offsets)
        return offsets


def records(partition: int, offsets: range) -> list[Delivered]:
    return [Delivered("t", partition, o, 0, None, f"p{partition}-{o}".encode(), ()) for o in offsets]


class DeadLetterTopic:
    """Stands in for ``DeadLetters`` (our seam): keeps what it was asked to write; fails while told to."""

    def __init__(self, fail: int = 0) -> None:
        self.fail = fail
        self.written: list[tuple[str, str, list[Delivered], str]] = []

    def write(self, topic: str, subscription: str, records: list[Delivered], error: str) -> None:
        if self.fail > 0:
            self.fail -= 1
            raise RuntimeError("1 records not acknowledged")
        self.written.append((topic, subscription, list(records), error))


def deliver(endpoint: ScriptedEndpoint, member: Member, batch: list[Delivered], *, dead_letters: DeadLetterTopic | None = None,
            **options: object) -> tuple[PushRunner, Registry]:
    spec = parse_subscription(json.dumps({"group": "g", "topics": ["t"], "endpoint": endpoint.url,
                                          "retryBackoffMs": 1, "retryBackoffMaxMs": 4, **options}).encode(),
                              principal="User:a", now_ms=0, own_group="gw", state_topic="state")
    registry = Registry()

    async def run() -> PushRunner:
        async with httpx.AsyncClient() as http:
            runner = PushRunner(spec, GatewayConfig(), http, PushMetrics.register(registry),
                                dead_letters or DeadLetterTopic())  # type: ignore[arg-type]
            await runner._deliver(member, batch)  # type: ignore[arg-type]
            return runner
    return asyncio.run(run()), registry


def test_a_failing_batch_is_sent_again_unchanged_until_a_2xx_and_only_then_committed(endpoint: ScriptedEndpoint) -> None:
    endpoint.statuses = [500, 404, 503]
    member = Member({("t", 0): 3, ("t", 1): 2})
    runner, registry = deliver(endpoint, member, records(0, range(3)) + records(1, range(2)))
    assert [b["attempt"] for b in endpoint.bodies] == [1, 2, 3, 4]
    assert len({b["deliveryId"] for b in endpoint.bodies}) == 1
    assert all(b["records"] == endpoint.bodies[0]["records"] for b in endpoint.bodies)
    assert member.commits == [[Offset("t", 0, 3), Offset("t", 1, 2)]]
    assert (runner.paused, runner.failures) == (False, 0)
    failures = registry.get("gateway_push_delivery_failures_total")
    assert isinstance(failures, Counter)
    assert [failures.value((runner.spec.id, reason)) for reason in ("http_500", "http_404", "http_503")] == [1, 1, 1]


def test_records_of_a_partition_taken_away_during_retries_are_neither_sent_again_nor_committed(
        endpoint: ScriptedEndpoint) -> None:
    member = Member({("t", 0): 2, ("t", 1): 2})
    endpoint.statuses = [500]
    endpoint.on_post = lambda n: member.held.pop(("t", 1), None)  # a rebalance while the batch fails
    deliver(endpoint, member, records(0, range(2)) + records(1, range(2)))
    assert [{r["partition"] for r in b["records"]} for b in endpoint.bodies] == [{0, 1}, {0}]
    assert member.commits == [[Offset("t", 0, 2)]]


def test_a_partition_that_left_and_came_back_is_not_committed_from_an_old_batch(endpoint: ScriptedEndpoint) -> None:
    member = Member({("t", 0): 2, ("t", 1): 2})
    endpoint.on_post = lambda n: member.held.update({("t", 1): 1})  # revoked, assigned again, re-read
    deliver(endpoint, member, records(0, range(2)) + records(1, range(2)))
    assert member.commits == [[Offset("t", 0, 2)]]


def test_a_batch_whose_partitions_all_moved_away_is_dropped_here_without_a_commit(endpoint: ScriptedEndpoint) -> None:
    member = Member({("t", 0): 2})
    endpoint.statuses = [500]
    endpoint.on_post = lambda n: member.held.clear()
    runner, _ = deliver(endpoint, member, records(0, range(2)))
    assert len(endpoint.bodies) == 1 and member.commits == [] and not runner.paused


def test_a_batch_failing_dead_letter_after_attempts_times_goes_to_the_dead_letter_topic_and_is_committed(
        endpoint: ScriptedEndpoint) -> None:
    endpoint.statuses = [400] * 10
    member = Member({("t", 0): 3})
    dead = DeadLetterTopic(fail=1)  # the first dead-letter write fails: tried again after the next attempt
    runner, registry = deliver(endpoint, member, records(0, range(3)), dead_letters=dead,
                               deadLetterTopic="t-dlq", deadLetterAfterAttempts=3)
    assert [b["attempt"] for b in endpoint.bodies] == [1, 2, 3, 4]
    assert [(topic, sub, [r.offset for r in batch], error) for topic, sub, batch, error in dead.written] == [
        ("t-dlq", runner.spec.id, [0, 1, 2], "the endpoint answered 400")]
    assert member.commits == [[Offset("t", 0, 3)]]  # handled: the subscription goes on
    assert (runner.paused, runner.failures) == (False, 0)
    dead_lettered = registry.get("gateway_push_dead_lettered_records_total")
    delivered = registry.get("gateway_push_records_delivered_total")
    assert isinstance(dead_lettered, Counter) and isinstance(delivered, Counter)
    assert dead_lettered.value((runner.spec.id,)) == 3 and delivered.value((runner.spec.id,)) == 0


def test_dead_letter_settings_are_checked_and_kept() -> None:
    base = {"group": "g", "topics": ["t"], "endpoint": "http://h/"}

    def parse(**extra: object) -> object:
        return parse_subscription(json.dumps({**base, **extra}).encode(), principal="User:a", now_ms=0,
                                  own_group="gw", state_topic="state")

    spec = parse(deadLetterTopic="t-dlq")
    assert spec.dead_letter_topic == "t-dlq" and spec.dead_letter_after_attempts == 10  # type: ignore[attr-defined]
    assert spec_from_record(spec.id.encode(), spec_record(spec)) == spec  # type: ignore[attr-defined, arg-type]
    for bad, message in (({"deadLetterAfterAttempts": 3}, "goes with 'deadLetterTopic'"),
                         ({"deadLetterTopic": "__internal"}, "internal"), ({"deadLetterTopic": 7}, "topic name"),
                         ({"deadLetterTopic": "t-dlq", "deadLetterAfterAttempts": 0}, "deadLetterAfterAttempts")):
        with pytest.raises(InvalidRequest, match=message):
            parse(**bad)

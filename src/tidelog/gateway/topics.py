"""Topic facts the gateway needs: partition counts of data topics, and the state topic itself.

``TopicCache.partition_count`` answers from a cache refreshed every ``ttl_s`` (a topic that grows is
seen within that time; a source keeps its partition anyway, see ``seqno``). A topic the cluster
does not know raises ``UnknownTopic`` and is asked again on the next request. A stale entry is
answered at once while one refresh runs behind it (a failed refresh keeps the entry): when the
cluster is unreachable, a write is not held up by a metadata request, it reaches its shard, which
answers it (503 when the shard is down). Only a topic never seen waits for the cluster. Metadata
requests run through ``run`` (the gateway's one admin thread).

``ensure_state_topic`` creates the compacted state topic with ``gateway.state.partitions``
partitions, or checks an existing one (waiting until the metadata lists its partitions): a different
partition count would move sources between shards and is refused at start-up with a message saying
what to do.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.gateway.config import GatewayConfig

log = logging.getLogger(__name__)


class UnknownTopic(Exception):
    """The cluster has no such topic."""


class StateTopicMismatch(RuntimeError):
    """The state topic exists with another partition count than configured."""


class TopicCache:
    def __init__(self, admin: AdminClient, run: Callable[[Callable[[], int]], Awaitable[int]],
                 ttl_s: float = 10.0) -> None:
        self.admin = admin
        self.ttl_s = ttl_s
        self._run = run
        self._counts: dict[str, tuple[int, float]] = {}
        self._refreshing: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def _fetch(self, topic: str) -> int:
        metadata = self.admin.list_topics(topic, timeout=5)
        found = metadata.topics.get(topic)
        if found is None or (found.error is not None and found.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            raise UnknownTopic(topic)
        if found.error is not None:
            raise KafkaException(found.error)
        if not found.partitions:
            raise UnknownTopic(topic)
        return len(found.partitions)

    async def _load(self, topic: str) -> int:
        count = await self._run(lambda: self._fetch(topic))
        self._counts[topic] = (count, time.monotonic())
        return count

    async def _refresh(self, topic: str) -> None:
        try:
            await self._load(topic)
        except UnknownTopic:
            self._counts.pop(topic, None)
        except Exception as exc:  # the cluster unreachable: keep the entry
            log.info("partition count of %s: %s", topic, exc)
        finally:
            self._refreshing.discard(topic)

    async def partition_count(self, topic: str) -> int:
        cached = self._counts.get(topic)
        if cached is None:
            return await self._load(topic)
        if time.monotonic() - cached[1] >= self.ttl_s and topic not in self._refreshing:
            self._refreshing.add(topic)
            task = asyncio.get_running_loop().create_task(self._refresh(topic))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return cached[0]


def ensure_state_topic(admin: AdminClient, config: GatewayConfig) -> None:
    topic = config.state_topic
    new = NewTopic(topic, num_partitions=config.state_partitions,
                   replication_factor=config.state_replication_factor,
                   config={"cleanup.policy": "compact", "min.compaction.lag.ms": "0"})
    try:
        admin.create_topics([new], operation_timeout=10, request_timeout=15)[topic].result()
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    count = _settled_partition_count(admin, topic)
    if count != config.state_partitions:
        raise StateTopicMismatch(
            f"state topic {topic} has {count} partitions but gateway.state.partitions={config.state_partitions}; "
            "set gateway.state.partitions to the topic's count (shards are state partitions and cannot be resized)")


def _settled_partition_count(admin: AdminClient, topic: str, timeout_s: float = 15.0) -> int:
    """The topic's partition count once the broker's metadata shows any: a topic another gateway has
    just created (TOPIC_ALREADY_EXISTS here) may be listed with no partitions for a moment (Kafka
    answers the creation before every broker's metadata has it)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = admin.list_topics(topic, timeout=10).topics.get(topic)
        count = len(found.partitions) if found is not None else 0
        if count or time.monotonic() > deadline:
            return count
        time.sleep(0.2)

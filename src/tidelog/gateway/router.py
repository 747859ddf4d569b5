"""Where a shard is served: the owner's URL, read from the consumer group's description.

Each instance joins the ownership group with ``client.id`` set to its advertised URL
(``membership``), so describing the group (DescribeGroups, through confluent-kafka's admin client)
maps every assigned state partition to the URL of the instance serving it. Answers are cached for
``ttl_s``; a miss (no owner: a rebalance is in progress) is never cached, so the next request asks
again. ``is_instance`` tells whether a URL is a member's (the group's instances are the only
places a request is forwarded to). This works against any Kafka cluster: nothing but the group protocol is used.
"""

from __future__ import annotations

import asyncio
import logging
import time

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

log = logging.getLogger(__name__)


class Router:
    def __init__(self, admin: AdminClient, group_id: str, state_topic: str, ttl_s: float = 2.0) -> None:
        self.admin = admin
        self.group_id = group_id
        self.state_topic = state_topic
        self.ttl_s = ttl_s
        self._owners: dict[int, str] = {}
        self._members: set[str] = set()
        self._fetched_at = 0.0

    def _describe(self) -> tuple[dict[int, str], set[str]]:
        future = self.admin.describe_consumer_groups([self.group_id], request_timeout=5)[self.group_id]
        description = future.result()
        owners: dict[int, str] = {}
        for member in description.members:
            assignment = member.assignment
            for tp in assignment.topic_partitions if assignment is not None else []:
                if tp.topic == self.state_topic:
                    owners[tp.partition] = member.client_id
        return owners, {member.client_id for member in description.members}

    async def _refresh(self) -> bool:
        try:
            self._owners, self._members = await asyncio.to_thread(self._describe)
        except KafkaException as exc:
            log.warning("describing group %s: %s", self.group_id, exc)
            return False
        self._fetched_at = time.monotonic()
        return True

    def _stale(self) -> bool:
        return time.monotonic() - self._fetched_at > self.ttl_s

    async def owner(self, shard: int, *, refresh: bool = False) -> str | None:
        if (refresh or shard not in self._owners or self._stale()) and not await self._refresh():
            return None
        return self._owners.get(shard)

    async def is_instance(self, url: str) -> bool:
        """Whether ``url`` is the advertised URL of an instance in the group now (forwarding goes only there)."""
        if (url not in self._members or self._stale()) and not await self._refresh():
            return False
        return url in self._members

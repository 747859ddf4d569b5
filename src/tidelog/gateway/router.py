"""Where a shard is served: the owner's URL, read from the consumer group's description.

Each instance joins the ownership group with ``client.id`` set to its advertised URL
(``membership``), so describing the group (DescribeGroups, over the gateway's own connections:
``group_wire``, never librdkafka's admin client, which can abort the process when the coordinator's
connection drops mid-request) maps every assigned state partition to the URL of the instance serving
it. Answers are cached for ``ttl_s``; a miss (no owner: a rebalance is in progress) is never cached,
so the next request asks again. A failed description (the cluster unreachable) is not asked again for
``failure_backoff_s``: during an outage every request not served here is answered at once rather
than after a connection attempt each. Refreshes are single-flight: requests that need one while
one is under way wait for it. ``is_instance`` tells whether a URL is a member's (the group's
instances are the only places a request is forwarded to). This works against any Kafka cluster:
nothing but the group protocol is used.
"""

from __future__ import annotations

import asyncio
import logging
import time

from tidelog.gateway.group_wire import GroupWire, GroupWireError

log = logging.getLogger(__name__)


class Router:
    def __init__(self, wire: GroupWire, group_id: str, state_topic: str, ttl_s: float = 2.0,
                 failure_backoff_s: float = 0.5) -> None:
        self.wire = wire
        self.group_id = group_id
        self.state_topic = state_topic
        self.ttl_s = ttl_s
        self.failure_backoff_s = failure_backoff_s
        self.error = ""  # why the last description failed ("" after a success)
        self._owners: dict[int, str] = {}
        self._members: set[str] = set()
        self._fetched_at = 0.0
        self._failed_at = -failure_backoff_s - 1.0
        self._lock = asyncio.Lock()

    async def _describe(self) -> tuple[dict[int, str], set[str]]:
        owners: dict[int, str] = {}
        members = await self.wire.describe(self.group_id)
        for member in members:
            for topic, partition in member.assignment:
                if topic == self.state_topic:
                    owners[partition] = member.client_id
        return owners, {member.client_id for member in members}

    async def _refresh(self) -> bool:
        asked = time.monotonic()
        async with self._lock:
            if self._fetched_at >= asked:  # another request refreshed while this one waited
                return True
            if time.monotonic() - self._failed_at < self.failure_backoff_s:
                return False
            try:
                self._owners, self._members = await self._describe()
            except GroupWireError as exc:
                if str(exc) != self.error:
                    log.warning("describing group %s: %s", self.group_id, exc)
                self.error = str(exc)
                self._failed_at = time.monotonic()
                return False
            self.error = ""
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

    async def aclose(self) -> None:
        await self.wire.aclose()

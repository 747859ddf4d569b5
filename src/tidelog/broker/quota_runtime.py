"""The broker's side of client quotas: who a connection is, what it did, how long it must wait.

``QuotaRuntime`` is shared by every connection of the broker. Per request it takes the current
image's quotas (rebuilt only when the image's ``client_quotas`` object changes, so an alteration on any
broker reaches every broker with the next image), records what the request did and returns the
throttle time, Kafka's way (``quotas/manager.py``):

- Produce: the request's size against ``producer_byte_rate``;
- Fetch from a consumer: the response's size against ``consumer_byte_rate``; a throttled fetch is
  answered empty and its bytes taken back off the rate (they were never sent), and one response is
  never larger than the quota's window holds. Followers' fetches are exempt;
- every request but the exempt ones (ApiVersions, SASL, inter-broker): the handler's time on the
  event loop, as a percentage of one thread, against ``request_percentage``.

The server writes the throttle time into the response's ``throttle_time_ms`` and then mutes the
connection for that long (no reads, no further requests served), so a client that ignores the field
is held back anyway (KIP-219). The user of a connection is its principal's name (``User:alice`` →
``alice``; ``ANONYMOUS`` when unauthenticated, which ``user=<default>`` covers, as in Kafka).

Priority tiers (``broker/tier_runtime.py``) come on top: the connection's tier (its entity's
``tidelog.tier``, else ``quota.tier.default``) may be throttled as a whole, or paused: a paused
tier's produce request is held (checked every 100 ms) for up to ``quota.tier.pause.hold.ms``, and its
fetches are answered empty with a throttle of ``PAUSED_FETCH_THROTTLE_MS``.

Controller mutations (KIP-599, ``quotas/mutation.py``): CreateTopics, CreatePartitions and
DeleteTopics open a ``MutationCharge`` per request (``mutation_charge``), strict or permissive by the
request's version; the topic admin charges each topic's partitions once the topic passed every
other check, and the handler takes the charge's throttle time into ``conn.throttle_ms`` (strict:
refused topics answered THROTTLING_QUOTA_EXCEEDED; permissive: all accepted, the connection muted).
The bucket's burst is ``controller.quota.window.num`` x ``controller.quota.window.size.seconds``.
Topics a Metadata request auto-creates are charged to its client too (``auto_create_charge``),
strictly, as Kafka 4's broker forwards them to the controller in a CreateTopics of the latest
version under the client's principal: a refused topic is not created and the Metadata response,
never throttled itself, answers it UNKNOWN_TOPIC_OR_PARTITION, so the client asks again.

Connections (KIP-612, ``quotas/connection_rate.py``): the server asks ``connection_created`` for
every new connection; past its address's ``connection_creation_rate`` the answer is how long to hold
the connection unread before closing it.

Metrics per entity (the tags that share a rate): ``tidelog_client_quota_rate`` (last measured rate),
``tidelog_client_quota_bound``, ``tidelog_client_quota_throttle_seconds_total`` and
``tidelog_client_quota_throttled_total``, labelled ``quota``, ``user`` and ``client_id`` (for
``controller_mutation_rate`` the rate is partitions mutated per second), and
``tidelog_controller_mutation_tokens{user,client_id}``: the bucket's tokens (negative: exceeded).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import pathlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tidelog.broker.read_throttle import ReadThrottleRuntime
from tidelog.broker.tier_runtime import TierRuntime
from tidelog.common.config import BrokerConfig
from tidelog.metadata.image import ClusterImage
from tidelog.observability.registry import Registry
from tidelog.quotas.connection_rate import IpConnectionRates
from tidelog.quotas.entity import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    TIER,
    Entity,
)
from tidelog.quotas.manager import QuotaManager, Recorded, Tags, resolve
from tidelog.quotas.mutation import CREATE_TOPICS, STRICT_SINCE, MutationQuota, is_strict
from tidelog.quotas.tiers import HIGH, tier_number

# ApiVersions, SaslHandshake, SaslAuthenticate, WriteTxnMarkers: never throttled by request_percentage
EXEMPT_FROM_REQUEST_QUOTA = frozenset({18, 17, 36, 27})
NANOS_PER_PERCENT = 1e7  # 1 % of one thread for one second
PAUSED_FETCH_THROTTLE_MS = 1000


def user_of(principal: str) -> str:
    return principal.partition(":")[2] or principal


class QuotaMetrics:
    def __init__(self, registry: Registry) -> None:
        labels = ("quota", "user", "client_id")
        self.rate = registry.gauge("tidelog_client_quota_rate", "Measured rate of a quota entity (bytes/s or % of a thread).", labels)
        self.bound = registry.gauge("tidelog_client_quota_bound", "The quota an entity's rate is held to.", labels)
        self.throttle = registry.counter("tidelog_client_quota_throttle_seconds_total", "Throttle time given to an entity's clients.", labels)
        self.throttled = registry.counter("tidelog_client_quota_throttled_total", "Responses of an entity that carried a throttle time.", labels)
        self.tokens = registry.gauge("tidelog_controller_mutation_tokens",
                                     "Tokens left in an entity's controller_mutation_rate bucket (negative: exceeded).", ("user", "client_id"))

    def observe(self, key: str, recorded: Recorded, throttle_ms: int) -> None:
        labels = (key, *recorded.tags)
        self.rate.set(labels, max(0.0, recorded.rate))
        self.bound.set(labels, recorded.bound)
        if throttle_ms > 0:
            self.throttle.inc(labels, throttle_ms / 1000)
            self.throttled.inc(labels)


class MutationCharge:
    """One CreateTopics/CreatePartitions/DeleteTopics request's controller mutation quota."""

    def __init__(self, runtime: QuotaRuntime, quota: MutationQuota, tags: Tags) -> None:
        self.runtime = runtime
        self.quota = quota
        self.tags = tags

    def admit(self, partitions: int) -> bool:
        """Charge one topic's partitions; False: refuse it with THROTTLING_QUOTA_EXCEEDED."""
        now = self.runtime.now_ms()
        admitted = self.quota.admit(partitions, now)
        if admitted:
            rate = self.runtime.manager.sample(CONTROLLER_MUTATION_RATE, self.tags, partitions, now)
            self.runtime.metrics.rate.set((CONTROLLER_MUTATION_RATE, *self.tags), rate)
        self.runtime.metrics.tokens.set(self.tags, self.quota.bucket.tokens)
        return admitted

    def finish(self) -> int:
        """The request is answered: its throttle time (ms), counted in the metrics."""
        throttle = self.quota.throttle_ms(self.runtime.now_ms())
        labels = (CONTROLLER_MUTATION_RATE, *self.tags)
        self.runtime.metrics.bound.set(labels, self.quota.rate)
        if throttle > 0:
            self.runtime.metrics.throttle.inc(labels, throttle / 1000)
            self.runtime.metrics.throttled.inc(labels)
        return throttle


class QuotaRuntime:
    """Client quotas of this broker, following the cluster image."""

    def __init__(self, config: BrokerConfig, registry: Registry, now_ms: Callable[[], int] | None = None) -> None:
        self.config = config
        self.manager = QuotaManager(config.get_int("quota.window.num"), config.get_int("quota.window.size.seconds") * 1000)
        self.metrics = QuotaMetrics(registry)
        self._now_ms = now_ms or (lambda: time.monotonic_ns() // 1_000_000)
        self._seen: Mapping[Entity, Mapping[str, float]] | None = None
        self.tiers = TierRuntime(config, registry, self._now_ms)
        self.cold_reads: ReadThrottleRuntime | None = None  # set by the node, which owns the logs
        self.connections = IpConnectionRates(self.manager.samples, self.manager.window_ms)

    async def run(self, log_dirs: Sequence[pathlib.Path]) -> None:
        """The periodic rules: tier saturation, and cold-read throttling when the node set it up."""
        tasks = [self.tiers.run(log_dirs)]
        if self.cold_reads is not None:
            tasks.append(self.cold_reads.run(log_dirs))
        await asyncio.gather(*tasks)

    def refresh(self, image: ClusterImage) -> int:
        """Follow the image and the window settings; now in ms."""
        now = self._now_ms()
        self.manager.configure_windows(self.config.get_int("quota.window.num"),
                                       self.config.get_int("quota.window.size.seconds") * 1000)
        if image.client_quotas is not self._seen:
            self._seen = image.client_quotas
            self.manager.update(image.client_quotas, now)
        return now

    def _record(self, image: ClusterImage, key: str, principal: str, client_id: str | None, value: float) -> int:
        if not image.client_quotas:
            return 0
        now = self.refresh(image)
        recorded = self.manager.record(key, user_of(principal), client_id or "", value, now)
        if recorded is None:
            return 0
        self.metrics.observe(key, recorded, recorded.throttle_ms)
        return recorded.throttle_ms

    def now_ms(self) -> int:
        return self._now_ms()

    def connection_created(self, image: ClusterImage, address: str) -> int:
        """A new connection from ``address``: how long to hold it before closing it (ms) when its
        address is over its ``connection_creation_rate``; 0 to serve it."""
        if not image.client_quotas and not self.connections.rates:
            return 0
        now = self._now_ms()
        self.connections.configure(image.client_quotas, self.config.get_int("quota.window.num"),
                                   self.config.get_int("quota.window.size.seconds") * 1000, now)
        return self.connections.record(address, now)[0]

    def mutation_charge(self, image: ClusterImage, api_key: int, api_version: int, principal: str,
                        client_id: str | None) -> MutationCharge | None:
        """The controller_mutation_rate charge of one request; None when no quota applies."""
        if not image.client_quotas:
            return None
        now = self.refresh(image)
        burst_s = self.config.get_int("controller.quota.window.num") * self.config.get_int("controller.quota.window.size.seconds")
        found = self.manager.mutation_quota(user_of(principal), client_id or "", is_strict(api_key, api_version), burst_s, now)
        return None if found is None else MutationCharge(self, *found)

    def auto_create_charge(self, image: ClusterImage, principal: str, client_id: str | None) -> MutationCharge | None:
        """The charge of topics a Metadata request creates (auto.create.topics.enable): strict, as
        the CreateTopics Kafka's broker sends the controller on the client's behalf; its throttle
        time is never applied to the Metadata response."""
        return self.mutation_charge(image, CREATE_TOPICS, STRICT_SINCE[CREATE_TOPICS], principal, client_id)

    def tier_of(self, image: ClusterImage, principal: str, client_id: str | None) -> int:
        if image.client_quotas:
            found = resolve(image.client_quotas, TIER, user_of(principal), client_id or "")
            if found is not None:
                return int(found[2])
        return tier_number(str(self.config.get("quota.tier.default")))

    def produced(self, image: ClusterImage, principal: str, client_id: str | None, request_bytes: int) -> int:
        """A produce request of ``request_bytes`` arrived; its throttle time in ms."""
        throttle = self._record(image, PRODUCER_BYTE_RATE, principal, client_id, request_bytes)
        tier = self.tier_of(image, principal, client_id)
        return max(throttle, self.tiers.record(tier, "produce", request_bytes))

    def paused(self, image: ClusterImage, principal: str, client_id: str | None) -> bool:
        tier = self.tier_of(image, principal, client_id)
        return tier != HIGH and self.tiers.is_paused(tier)

    async def hold_while_paused(self, image: Callable[[], ClusterImage], principal: str, client_id: str | None) -> bool:
        """Wait while the client's tier is paused, up to quota.tier.pause.hold.ms; False if still paused."""
        deadline = time.monotonic() + self.config.get_int("quota.tier.pause.hold.ms") / 1000
        while self.paused(image(), principal, client_id):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.1)
        return True

    def fetch_limit(self, image: ClusterImage, principal: str, client_id: str | None) -> int | None:
        """Most bytes one fetch response may carry under the consumer's quota; None when unlimited."""
        if not image.client_quotas:
            return None
        self.refresh(image)
        limit = self.manager.max_value_in_window(CONSUMER_BYTE_RATE, user_of(principal), client_id or "")
        return None if limit is None else max(1, int(min(limit, 2**31 - 1)))

    def fetched(self, image: ClusterImage, principal: str, client_id: str | None, response_bytes: int) -> int:
        """A fetch response of ``response_bytes`` is ready; its throttle time (then it must go out
        empty: its bytes are taken off the rate again)."""
        quota_throttle = self._record(image, CONSUMER_BYTE_RATE, principal, client_id, response_bytes)
        tier = self.tier_of(image, principal, client_id)
        throttle = max(quota_throttle, self.tiers.record(tier, "fetch", response_bytes))
        if throttle > 0:
            if image.client_quotas:
                self.manager.unrecord(CONSUMER_BYTE_RATE, user_of(principal), client_id or "", response_bytes, self._now_ms())
            self.tiers.unrecord(tier, "fetch", response_bytes)
        return throttle

    def handled(self, image: ClusterImage, api_key: int, principal: str, client_id: str | None, seconds: float) -> int:
        """A request took ``seconds`` of handler time; its request_percentage throttle time."""
        if api_key in EXEMPT_FROM_REQUEST_QUOTA:
            return 0
        return self._record(image, REQUEST_PERCENTAGE, principal, client_id, seconds * 1e9 / NANOS_PER_PERCENT)


def with_throttle(response: Any, throttle_ms: int) -> Any:
    """``response`` carrying ``throttle_ms`` in its throttle_time_ms field (if it has one)."""
    if hasattr(response, "throttle_ms"):  # the hand-encoded Produce and Fetch results
        response.throttle_ms = max(response.throttle_ms, throttle_ms)
        return response
    current = getattr(response, "throttle_time", None)
    if isinstance(current, datetime.timedelta) and dataclasses.is_dataclass(response) and not isinstance(response, type):
        wanted = datetime.timedelta(milliseconds=throttle_ms)
        return dataclasses.replace(response, throttle_time=max(current, wanted))
    return response

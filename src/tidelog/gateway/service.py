"""The gateway's core on the event loop: owns the shard writers and answers writes and state queries.

``Gateway.write(request, client_address)``:

1. the data topic is ``<dc>.<topic>`` (``gateway.dc``) and must exist (``UnknownTopic``);
2. the source's shard is ``shard_of(state_key(topic, sourceId))``; if this instance does not serve it,
   ``NotOwner`` carries the owner's URL (or None during a rebalance) for the API to forward to;
3. the request reserves its size in the ``ByteBudget`` for at most ``gateway.backpressure.wait.ms``
   (else ``Busy``); the reservation is returned when the transaction ends, not when the HTTP request
   gives up, so memory stays bounded even when clients time out;
4. the shard's thread writes it (``shard``); the answer comes back within
   ``gateway.request.timeout.ms`` or the request gets ``WriteFailed`` (retrying is safe).

Shards come and go with the group's assignment (``membership``): assigned shards get a writer that
opens (fences and loads) on its own thread, revoked ones are closed after their transaction in progress
(all of a revocation's writers at once, each wait bounded: ``ShardWriter.join``).

Cluster clients, one owner each: the admin client (partition counts, the state topic) is used only
by the one thread of ``_admin_executor``; each shard's producer only by its writer's thread; the
membership consumer only by the membership thread; the group description goes over the router's own
connections on the event loop (``group_wire``). A write while this instance is out of the group (the
cluster unreachable for longer than the session timeout, or its consumer being replaced) is answered
503 with Retry-After at once, naming why.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from confluent_kafka.admin import AdminClient

from tidelog.gateway.acls import GatewayAcls, describe_acls
from tidelog.gateway.budget import ByteBudget
from tidelog.gateway.config import GatewayConfig
from tidelog.gateway.group_wire import GroupWire
from tidelog.gateway.membership import Membership
from tidelog.gateway.model import Meta, WriteRequest
from tidelog.gateway.router import Router
from tidelog.gateway.seqno import SourceState
from tidelog.gateway.shard import ShardUnavailable, ShardWriter, WriteFailed, WriteJob, WriteResult
from tidelog.gateway.state_codec import shard_of, state_key
from tidelog.gateway.topics import TopicCache, ensure_state_topic
from tidelog.observability.registry import MetricFamily, Registry

log = logging.getLogger(__name__)
T = TypeVar("T")
REVOKE_WAIT_S = 10.0


class NotOwner(Exception):
    """Another instance serves the source's shard (``owner`` is its URL, None if unknown right now)."""

    def __init__(self, shard: int, owner: str | None, why: str = "") -> None:
        super().__init__(f"shard {shard} is served by {owner or 'no instance right now'}")
        self.shard = shard
        self.owner = owner
        self.why = why  # when no owner is known: what this instance knows of the reason


class Busy(Exception):
    """The in-flight budget stayed full for the whole back-pressure wait."""


class Gateway:
    def __init__(self, config: GatewayConfig, registry: Registry) -> None:
        self.config = config
        self.budget = ByteBudget(config.max_inflight_bytes)
        self.shards: dict[int, ShardWriter] = {}
        self._shards_lock = threading.Lock()
        # An admin client asks with allow_auto_topic_creation=true by default: a write to a missing topic
        # must be answered 404, not create it.
        self.admin = AdminClient(config.kafka_config(**{"allow.auto.create.topics": False}))
        self._admin_executor = ThreadPoolExecutor(1, thread_name_prefix="gateway-admin")
        self.topics = TopicCache(self.admin, self._on_admin_thread)
        acl_wire = GroupWire(config.bootstrap_servers, config.kafka, f"{config.url} acls")
        self.acls = GatewayAcls(lambda: describe_acls(acl_wire), enabled=config.acls_enabled,
                                super_users=config.super_users, allow_if_no_acl=config.acl_allow_if_no_acl,
                                refresh_s=config.acl_refresh_ms / 1000)
        self._acl_wire = acl_wire
        self.router = Router(GroupWire(config.bootstrap_servers, config.kafka, f"{config.url} router"),
                             config.group_id, config.state_topic)
        self.membership = Membership(config, self._assign, self._revoke)
        self._chunks = registry.counter("gateway_chunks_total", "Chunks answered, by data topic and status "
                                        "(written, duplicate)", ("topic", "status"))
        self._records = registry.counter("gateway_records_written_total", "Records written, by data topic", ("topic",))
        self._bytes = registry.counter("gateway_bytes_written_total", "Record bytes written, by data topic", ("topic",))
        self._rejected = registry.counter("gateway_writes_rejected_total", "Write requests not written, by reason",
                                          ("reason",))
        self._txn_seconds = registry.histogram("gateway_transaction_seconds", "Time from a shard's transaction "
                                               "start to its commit", ())
        self._txn_requests = registry.histogram("gateway_transaction_requests", "Write requests per committed "
                                                "transaction", (), buckets=(1, 2, 4, 8, 16, 32, 64, 128))
        self._reopens = 0  # reported, kept monotonic across writers that come and go
        self._reopens_closed = 0  # reopens of writers already closed
        self._loop: asyncio.AbstractEventLoop | None = None
        registry.add_collector(self._collect)

    # -- life cycle ------------------------------------------------------------------------------

    async def _on_admin_thread(self, call: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._admin_executor, call)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self._on_admin_thread(lambda: ensure_state_topic(self.admin, self.config))
        self.membership.start()

    async def stop(self) -> None:
        await asyncio.to_thread(self.membership.stop)
        await asyncio.to_thread(self._revoke, list(self.shards))
        await self.router.aclose()
        await self._acl_wire.aclose()
        self._admin_executor.shutdown(wait=False, cancel_futures=True)

    def _assign(self, shards: list[int]) -> None:
        with self._shards_lock:
            for shard in shards:
                if shard not in self.shards:
                    self.shards[shard] = ShardWriter(self.config, shard, self._committed).start()

    def _committed(self, requests: int, seconds: float) -> None:
        """Called on a shard's thread after each commit; metrics are updated on the loop."""
        def observe() -> None:
            self._txn_seconds.observe((), seconds)
            self._txn_requests.observe((), requests)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(observe)

    def _revoke(self, shards: list[int]) -> None:
        with self._shards_lock:
            writers = [self.shards.pop(shard) for shard in shards if shard in self.shards]
        for writer in writers:
            self._reopens_closed += writer.reopens
            writer.begin_close()
        deadline = time.monotonic() + REVOKE_WAIT_S
        for writer in writers:
            if not writer.join(deadline - time.monotonic()):
                log.warning("shard %d: its writer is still in a call to the cluster; it ends on its own", writer.shard)

    def readiness(self) -> tuple[bool, str]:
        if not self.membership.joined.is_set():
            return False, f"not in group {self.config.group_id} yet {self.membership.error}".strip()
        writers = sorted(self.shards.copy().items())
        loading = [n for n, w in writers if not w.ready.is_set()]
        down = [w.down for _, w in writers if w.down]
        return (not loading, f"shards not serving: {loading} {' '.join(down)}".strip() if loading else "")

    def _no_owner_reason(self) -> str:
        if not self.membership.joined.is_set():
            why = self.membership.error or self.router.error
            return f"this instance is rejoining the gateway group{f' ({why})' if why else ''}"
        return f"the cluster did not say which instance serves it ({self.router.error})" if self.router.error else ""

    async def _not_owner(self, shard: int) -> NotOwner:
        return NotOwner(shard, await self.router.owner(shard), self._no_owner_reason())

    def _collect(self) -> list[MetricFamily]:
        owned = MetricFamily("gateway_shards_owned", "Shards (state partitions) this instance serves", "gauge", ())
        owned.add((), len(self.shards))
        inflight = MetricFamily("gateway_inflight_bytes", "Bytes of write requests queued or in a transaction",
                                "gauge", ())
        inflight.add((), self.budget.used)
        load = MetricFamily("gateway_shard_load_seconds", "Time the shard took to open (fence and read its "
                            "state)", "gauge", ("shard",))
        down = MetricFamily("gateway_shards_unavailable", "Shards this instance owns that cannot serve now (the "
                            "cluster unreachable: reopening)", "gauge", ())
        reopens = MetricFamily("gateway_shard_reopens_total", "Shard producers given up and opened again (the "
                               "cluster became unreachable, or a transaction's outcome was unknown)", "counter", ())
        writers = list(self.shards.items())
        for shard, writer in writers:
            load.add((str(shard),), writer.load_seconds)
        down.add((), sum(1 for _, writer in writers if writer.down))
        self._reopens = max(self._reopens, self._reopens_closed + sum(w.reopens for _, w in writers))
        reopens.add((), self._reopens)
        replaced = MetricFamily("gateway_group_consumer_replacements_total", "Ownership-group consumers replaced "
                                "after a fatal error (fenced static member, failed callback)", "counter", ())
        replaced.add((), self.membership.replacements)
        return [owned, inflight, load, down, reopens, replaced]

    # -- requests --------------------------------------------------------------------------------

    def _writer_for(self, topic: str, source_id: str) -> tuple[int, ShardWriter | None]:
        shard = shard_of(state_key(topic, source_id), self.config.state_partitions)
        return shard, self.shards.get(shard)

    async def write(self, request: WriteRequest, client_address: str) -> WriteResult:
        received_ms = int(time.time() * 1000)
        topic = self.config.data_topic(request.topic)
        count = await self.topics.partition_count(topic)
        shard, writer = self._writer_for(topic, request.source_id)
        if writer is None:
            raise await self._not_owner(shard)
        if writer.down:
            self._rejected.inc(("unavailable",))
            raise ShardUnavailable(writer.down)
        size = request.size
        if not await self.budget.acquire(size, self.config.backpressure_wait_ms / 1000):
            self._rejected.inc(("busy",))
            raise Busy(f"{self.budget.used} bytes in flight (gateway.max.inflight.bytes="
                       f"{self.config.max_inflight_bytes})")
        loop = asyncio.get_running_loop()
        job = WriteJob(topic, request, count, self._enrichment(request.meta, client_address, received_ms))
        job.future.add_done_callback(lambda _: loop.call_soon_threadsafe(self.budget.release, size))
        writer.submit(job)
        answer = asyncio.wrap_future(job.future)
        try:
            result = await asyncio.wait_for(asyncio.shield(answer), self.config.request_timeout_ms / 1000)
        except TimeoutError:
            # The job ends later (its writer's calls are bounded): its outcome is no one's to read.
            answer.add_done_callback(lambda f: f.cancelled() or f.exception())
            self._rejected.inc(("timeout",))
            raise WriteFailed("no answer from the cluster within gateway.request.timeout.ms; the chunks may or "
                              "may not be written: retry with the same seqnos") from None
        self._count(result, request)
        return result

    async def source_state(self, topic: str, source_id: str) -> tuple[str, int, SourceState | None]:
        """(data topic, shard, state) of a source on its owner; ``NotOwner`` elsewhere."""
        data_topic = self.config.data_topic(topic)
        shard, writer = self._writer_for(data_topic, source_id)
        if writer is None:
            raise await self._not_owner(shard)
        if writer.down:
            raise ShardUnavailable(writer.down)
        ready = await asyncio.to_thread(writer.ready.wait, self.config.request_timeout_ms / 1000)
        if not ready:
            raise WriteFailed(f"shard {shard} has not finished loading its state")
        return data_topic, shard, writer.state_of(data_topic, source_id)

    def _enrichment(self, meta: Meta, client_address: str, received_ms: int) -> Sequence[tuple[str, bytes]]:
        names = self.config.headers
        pairs = [(names.source_host, meta.host), (names.source_file, meta.file), (names.log_type, meta.log_type),
                 (names.client_address, client_address), (names.receive_time, str(received_ms))]
        return [(name, value.encode()) for name, value in pairs if name and value]

    def _count(self, result: WriteResult, request: WriteRequest) -> None:
        written = [c for c in result.chunks if c.written]
        topic = (result.topic,)
        self._chunks.inc((result.topic, "written"), len(written))
        self._chunks.inc((result.topic, "duplicate"), len(result.chunks) - len(written))
        self._records.inc(topic, sum(c.records for c in written))
        self._bytes.inc(topic, sum(chunk.size() for chunk, answer in zip(request.chunks, result.chunks, strict=True)
                                   if answer.written))

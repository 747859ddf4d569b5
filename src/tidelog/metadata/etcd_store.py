"""The cluster metadata store: the image kept in etcd under a prefix, watch-driven, CAS-written.

``metadata.store=etcd://host:port[,host:port...]/<prefix>`` (prefix ``tidelog`` when omitted; several
clusters can share one etcd with different prefixes). Key layout: ``etcd_layout``; lease, registration
and election: ``etcd_session``; the etcd operations: ``etcd_client``.

Reading. ``open`` reads every key under ``/<prefix>/`` at one revision R, builds the image
(``image.revision == R``) and watches from R + 1. Each watch batch (everything etcd changed in one
or more revisions, in order) is applied to the key table, a new image is published as ``image`` and
subscribers get ``(old, new)``. A value that does not decode is logged with its key and skipped (its
previous value stays); the watch never stops for it. If etcd compacted the revisions the watch needs,
the prefix is read again and the image rebuilt from that snapshot.

Writing. Every write is one etcd transaction guarded by compares:
- ``commit(new)`` writes the keys whose JSON differs between ``new`` and the image it was derived
  from (the published image with revision ``new.revision``; the current one when that is too old),
  each compared ``mod_revision < new.revision + 1``: "nobody changed this key after the image I
  read". Partitions written without their topic key also require the topic key to exist unchanged.
  A failed compare raises ``StaleMetadataError`` and writes nothing.
- ``alter_partition`` compares one partition key with the exact revision the store holds for it.
- ``allocate_producer_ids`` compares ``producer_id_block_end`` with its revision, re-reading on loss.
A successful write returns once the watch has applied its revision, so the writer's next read of
``image`` sees its own change (read-your-writes).

Threading: asyncio, one event loop; ``image`` is a plain attribute read (atomic).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

from tidelog.common.errors import ConfigError
from tidelog.metadata import codec, etcd_layout
from tidelog.metadata.codec import CorruptValueError
from tidelog.metadata.errors import MetadataStoreUnavailable, StaleMetadataError
from tidelog.metadata.etcd_client import (
    Compare,
    Delete,
    EtcdClient,
    Get,
    KeyValue,
    Op,
    Put,
    RangeResult,
    WatchBatch,
    WatchReset,
    prefix_end,
)
from tidelog.metadata.etcd_layout import KeyTable, plan_commit
from tidelog.metadata.etcd_session import BrokerSession, LeaseTimer
from tidelog.metadata.image import BrokerRegistration, ClusterImage, PartitionImage
from tidelog.metadata.meta_properties import new_kafka_uuid

log = logging.getLogger(__name__)
DEFAULT_PREFIX = "tidelog"
_HISTORY = 64  # published images kept, by revision, to diff a commit against what its writer read
_PREFIX_RE = re.compile(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*")
ImageListener = Callable[[ClusterImage, ClusterImage], None]


@dataclass(frozen=True, slots=True)
class StoreUrl:
    endpoints: tuple[tuple[str, int], ...]
    prefix: str


def parse_store_url(url: str) -> StoreUrl:
    """``etcd://h1:2379,h2:2379/prefix`` → endpoints and prefix; ConfigError naming metadata.store."""
    def bad(why: str) -> ConfigError:
        return ConfigError(f"Invalid value {url!r} for configuration metadata.store: {why}")

    scheme, sep, rest = url.partition("://")
    if not sep or scheme != "etcd":
        raise bad("expected etcd://host:port[,host:port...][/prefix]")
    hosts, _, prefix = rest.partition("/")
    prefix = prefix.strip("/") or DEFAULT_PREFIX
    if not _PREFIX_RE.fullmatch(prefix):
        raise bad("the prefix may hold letters, digits, '.', '_', '-' and '/' between names")
    endpoints = []
    for item in hosts.split(","):
        host, colon, port = item.strip().rpartition(":")
        host = host.strip("[]")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise bad(f"endpoint {item!r} is not host:port")
        endpoints.append((host, int(port)))
    return StoreUrl(tuple(endpoints), prefix)


class EtcdMetadataStore:
    """The cluster image in etcd. Create with ``await EtcdMetadataStore.open(url)``."""

    image: ClusterImage

    def __init__(self, client: EtcdClient, prefix: str) -> None:
        self._client = client
        self.prefix = prefix
        self._root = f"/{prefix}/".encode()
        self._table = KeyTable()
        self.image = ClusterImage(cluster_id="")
        self._history: collections.OrderedDict[int, ClusterImage] = collections.OrderedDict()
        self._listeners: list[ImageListener] = []
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._watch: asyncio.Task[None] | None = None
        self._session: BrokerSession | None = None

    @classmethod
    async def open(cls, url: str, *, cluster_id_hint: str | None = None,
                   connect_timeout_s: float = 5.0) -> EtcdMetadataStore:
        """Connect, create ``cluster_id`` if absent, load the image, start watching.

        ``cluster_id_hint`` is the id a new cluster gets (a fresh one when None); an existing
        cluster's id wins (compare ``image.cluster_id`` with yours). MetadataStoreUnavailable, naming
        the endpoints, when etcd does not answer within ``connect_timeout_s``.
        """
        parsed = parse_store_url(url)
        client = EtcdClient(parsed.endpoints, timeout_s=connect_timeout_s)
        store = cls(client, parsed.prefix)
        try:
            await asyncio.wait_for(store._load(cluster_id_hint or new_kafka_uuid()), connect_timeout_s)
        except (TimeoutError, MetadataStoreUnavailable) as exc:
            await client.close()
            if isinstance(exc, MetadataStoreUnavailable):
                raise
            raise MetadataStoreUnavailable(
                f"etcd at {client.describe()} did not answer within {connect_timeout_s:g} s"
            ) from None
        except BaseException:
            await client.close()
            raise
        store._watch = asyncio.get_running_loop().create_task(store._follow(), name="etcd-metadata-watch")
        return store

    def _key(self, relative: str) -> bytes:
        return self._root + relative.encode()

    async def _load(self, cluster_id: str) -> None:
        key = self._key(etcd_layout.CLUSTER_ID)
        await self._client.txn([Compare(key, "create", "==", 0)], [Put(key, codec.encode(cluster_id))])
        snapshot = await self._client.get_prefix(self._root)
        self._apply_snapshot(snapshot)
        if not self.image.cluster_id:
            raise MetadataStoreUnavailable(
                f"etcd at {self._client.describe()}: key {self._key(etcd_layout.CLUSTER_ID).decode()} "
                "is missing or corrupt; fix or delete it"
            )

    # -- following etcd ----------------------------------------------------------------------------

    async def _follow(self) -> None:
        async for item in self._client.watch_prefix(self._root, self.image.revision + 1):
            try:
                if isinstance(item, WatchReset):
                    log.warning("etcd history compacted past our revision: reloading the image")
                    self._apply_snapshot(item.snapshot)
                else:
                    self._apply_batch(item)
            except Exception:  # a bug here must not stop the watch: log it and keep following
                log.exception("applying an etcd watch batch failed")

    def _relative(self, key: bytes) -> str:
        return key[len(self._root):].decode(errors="replace")

    def _put(self, kv: KeyValue) -> None:
        relative = self._relative(kv.key)
        problem = self._table.put(relative, kv.value, kv.mod_revision, kv.create_revision, kv.lease)
        if problem is not None:
            kept = "keeping its previous value" if self._table.value(relative) is not None else "ignoring it"
            log.error("etcd key %s (revision %d): %s; %s", kv.key.decode(errors="replace"), kv.mod_revision,
                      problem, kept)

    def _apply_snapshot(self, snapshot: RangeResult) -> None:
        self._table.reset()
        for kv in snapshot.kvs:
            self._put(kv)
        self._publish(snapshot.revision)

    def _apply_batch(self, batch: WatchBatch) -> None:
        for event in batch.events:
            if event.kind == "put":
                self._put(event.kv)
            else:
                self._table.delete(self._relative(event.kv.key))
        self._publish(batch.revision)

    def _publish(self, revision: int) -> None:
        old = self.image
        self.image = new = self._table.image(old, revision)
        self._history[revision] = new
        while len(self._history) > _HISTORY:
            self._history.popitem(last=False)
        still_waiting = []
        for wanted, future in self._waiters:
            if revision >= wanted:
                if not future.done():
                    future.set_result(None)
            else:
                still_waiting.append((wanted, future))
        self._waiters = still_waiting
        if self._session is not None:
            self._session.observe(new)
        for listener in list(self._listeners):
            try:
                listener(old, new)
            except Exception:
                log.exception("metadata listener %r failed", listener)

    def subscribe(self, callback: ImageListener) -> None:
        """``callback(old, new)`` on the event loop after each watch batch is applied."""
        self._listeners.append(callback)

    async def _caught_up(self, revision: int) -> None:
        """Return once the image includes ``revision`` (or after the client timeout, with a warning)."""
        if self.image.revision >= revision:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((revision, future))
        try:
            await asyncio.wait_for(future, self._client.timeout_s)
        except TimeoutError:
            log.warning("etcd watch has not delivered revision %d yet (image at %d)", revision,
                        self.image.revision)

    # -- writes ------------------------------------------------------------------------------------

    async def commit(self, new_image: ClusterImage) -> None:
        """Write what ``new_image`` changed; StaleMetadataError if a key changed after its revision."""
        base = self._history.get(new_image.revision, self.image)
        plan = plan_commit(base, new_image)
        if plan.empty:
            return
        guard = new_image.revision + 1
        compares: list[Compare] = []
        ops: list[Op] = []
        for relative, value in plan.puts.items():
            compares.append(Compare(self._key(relative), "mod", "<", guard))
            ops.append(Put(self._key(relative), value))
        for relative in plan.deletes:
            compares.append(Compare(self._key(relative), "mod", "<", guard))
            ops.append(Delete(self._key(relative)))
        for relative in plan.parents:
            compares += [Compare(self._key(relative), "mod", "<", guard),
                         Compare(self._key(relative), "create", ">", 0)]
        for name in plan.deleted_topics:
            topic, partitions = self._key(etcd_layout.topic_key(name)), self._key(etcd_layout.partitions_prefix(name))
            compares += [Compare(topic, "mod", "<", guard),
                         Compare(partitions, "mod", "<", guard, prefix_end(partitions))]
            ops += [Delete(topic), Delete(partitions, prefix_end(partitions))]
        result = await self._client.txn(compares, ops)
        if not result.succeeded:
            raise StaleMetadataError(
                f"metadata changed in etcd after revision {new_image.revision}; re-read and try again"
            )
        await self._caught_up(result.revision)

    async def alter_partition(self, topic: str, index: int, expected: PartitionImage,
                              new: PartitionImage) -> bool:
        """Replace one partition's state if it is still ``expected``; False when someone changed it first.

        Only the partition's key is written (leader, epochs, ISR, replicas and a move in progress).
        """
        if new.index != index:
            raise ValueError("alter_partition changes a partition's state, not its index")
        current = self.image.topics.get(topic)
        if current is None or not 0 <= index < len(current.partitions) or current.partitions[index] != expected:
            return False
        key = etcd_layout.partition_key(topic, index)
        topic_entry = self._table.entries.get(etcd_layout.topic_key(topic))
        compares = [Compare(self._key(key), "mod", "==", self._table.mod_revision(key))]
        if topic_entry is not None:
            compares.append(Compare(self._key(etcd_layout.topic_key(topic)), "create", "==",
                                    topic_entry.create_revision))
        result = await self._client.txn(
            compares, [Put(self._key(key), codec.encode(codec.partition_state_to_json(new)))],
        )
        if result.succeeded:
            await self._caught_up(result.revision)
        return result.succeeded

    async def allocate_producer_ids(self, count: int) -> int:
        """Reserve ``count`` producer ids cluster-wide; returns the first of the block."""
        if count <= 0:
            raise ValueError("count must be positive")
        key = self._key(etcd_layout.PRODUCER_ID_BLOCK_END)
        end = self.image.producer_id_block_end
        revision = self._table.mod_revision(etcd_layout.PRODUCER_ID_BLOCK_END)
        for _ in range(32):
            result = await self._client.txn(
                [Compare(key, "mod", "==", revision)], [Put(key, codec.encode(end + count))], [Get(key)],
            )
            if result.succeeded:
                return end
            current = result.gets[0]
            revision = 0 if current is None else current.mod_revision
            end = 0 if current is None else self._block_end(current, end)
        raise StaleMetadataError("producer id block: too many concurrent allocations, try again")

    @staticmethod
    def _block_end(kv: KeyValue, fallback: int) -> int:
        try:
            return codec.expect_int(codec.decode(kv.value), "producer_id_block_end")
        except CorruptValueError as exc:
            log.error("etcd key %s: %s; counting on from %d", kv.key.decode(errors="replace"), exc, fallback)
            return fallback

    # -- session: registration, liveness, election ---------------------------------------------------

    async def register_broker(self, registration: BrokerRegistration, session_timeout_ms: int,
                              heartbeat_interval_ms: int) -> None:
        """Register this broker under a new lease and keep the lease alive.

        DuplicateBrokerError (naming the node id) when a live broker holds ``brokers/<node.id>``;
        ConfigError when the session timeout is not more than twice the heartbeat interval.
        """
        if self._session is not None:
            raise RuntimeError("this store already registered a broker")
        session = BrokerSession(self._client, self._root, registration,
                                LeaseTimer(session_timeout_ms, heartbeat_interval_ms),
                                lambda: self.image, self._table)
        await session.register()
        self._session = session
        session.start()

    def _require_session(self) -> BrokerSession:
        if self._session is None:
            raise RuntimeError("register_broker first")
        return self._session

    def lease_valid(self, now_monotonic_ms: float | None = None) -> bool:
        """False once no lease renewal sent in the last session timeout - 2 heartbeats succeeded."""
        return self._session is not None and self._session.lease_valid(now_monotonic_ms)

    def on_lease_lost(self, callback: Callable[[], None]) -> None:
        self._require_session().on_lease_lost(callback)

    def on_lease_restored(self, callback: Callable[[], None]) -> None:
        self._require_session().on_lease_restored(callback)

    @property
    def lease_id(self) -> int:
        return 0 if self._session is None else self._session.lease_id

    async def campaign(self) -> bool:
        """Try to become controller; stays a candidate (re-campaigns whenever the key is free)."""
        return await self._require_session().campaign()

    @property
    def is_controller(self) -> bool:
        return self._session is not None and self._session.is_controller

    def on_controller_change(self, callback: Callable[[bool], None]) -> None:
        """``callback(is_controller)`` whenever this broker gains or loses the controller role."""
        self._require_session().on_controller_change(callback)

    async def deregister(self) -> None:
        """Drop this broker's registration (and the controller key) now, but keep following etcd:
        a controlled shutdown watches leadership move away before it stops."""
        if self._session is not None:
            session, self._session = self._session, None
            await session.close(revoke_lease=True)

    async def close(self, *, revoke_lease: bool = True) -> None:
        """Stop following etcd; revoking the lease drops the registration (and the controller key) now."""
        if self._session is not None:
            await self._session.close(revoke_lease=revoke_lease)
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
        for _, future in self._waiters:
            future.cancel()
        await self._client.close()

"""The composition root: build a broker from its configuration, run it, stop it.

Start-up order: check/create ``meta.properties`` in each log dir (cluster and node identity), load the
metadata image, open every partition log (recovering after an unclean shutdown), repair logs the image
and the disk disagree on, open the listeners, then print the ``started`` line. Shutdown reverses it:
stop accepting, let in-flight requests finish, flush and checkpoint the logs, write the clean-shutdown
marker.

In a cluster (``metadata.store=etcd://...``) the image comes from etcd (its cluster id wins and must
match ``meta.properties``), and after the listeners open the broker registers under its lease (waiting
up to a session timeout for the lease of a previous life of the same node to expire), starts the replica
manager (leaders, followers, ISR) and stands as a controller candidate. SIGTERM with
``controlled.shutdown.enable`` first drops the registration, so the controller moves leadership to other
ISR members, waits for that to reach this broker, then stops.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import pathlib
import signal
import time
import uuid

from tidelog.broker.context import BrokerContext, Endpoint
from tidelog.broker.disk_pools import DiskPools
from tidelog.broker.group_metrics import consumer_lag, group_counts_by_state
from tidelog.broker.group_runtime import GroupRuntime
from tidelog.broker.producer_ids import ProducerIdAllocator
from tidelog.broker.quota_runtime import QuotaRuntime
from tidelog.broker.read_throttle import ReadThrottleRuntime
from tidelog.broker.receive_budget import ReceiveBudget
from tidelog.broker.replica_manager import ReplicaManager
from tidelog.broker.server import Server
from tidelog.broker.topic_admin import TopicAdmin
from tidelog.broker.txn_runtime import TxnRuntime
from tidelog.common.config import BrokerConfig, resolve_topic_config
from tidelog.common.errors import ConfigError
from tidelog.controller.service import ControllerService, RebalanceSettings
from tidelog.metadata.errors import DuplicateBrokerError
from tidelog.metadata.etcd_store import EtcdMetadataStore
from tidelog.metadata.image import BrokerEndpoint, BrokerRegistration, ClusterImage
from tidelog.metadata.local_store import LocalMetadataStore
from tidelog.metadata.meta_properties import ensure_meta_properties
from tidelog.observability.service import ObservabilityService
from tidelog.replication.throttle import ReplicationThrottles
from tidelog.security.listeners import SECURITY_PROTOCOLS
from tidelog.security.service import SecurityService
from tidelog.storage.log_config import LogConfig
from tidelog.storage.manager import LogManager

log = logging.getLogger(__name__)


def parse_listeners(value: list[str], protocol_map: str) -> list[Endpoint]:
    """``NAME://host:port`` entries → endpoints; the security protocol comes from the listener map."""
    protocols = dict(item.split(":", 1) for item in protocol_map.split(",") if ":" in item)
    endpoints = []
    for entry in value:
        # Not urlsplit: listener names such as SASL_SSL are not valid URL schemes.
        scheme, sep, address = entry.strip().partition("://")
        host, colon, port = address.rpartition(":")
        if not (sep and scheme and colon and port.isdigit() and int(port) < 65536):
            raise ConfigError(f"Invalid value {entry!r} for configuration listeners: expected NAME://host:port")
        name = scheme.upper()
        protocol = protocols.get(name)
        if protocol is None:
            raise ConfigError(f"listener {name} is not in listener.security.protocol.map")
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"listener {name}: unknown security protocol {protocol} (expected one of {', '.join(SECURITY_PROTOCOLS)})")
        endpoints.append(Endpoint(name, host.strip("[]"), int(port), protocol))
    if not endpoints:
        raise ConfigError("listeners must name at least one listener")
    return endpoints


class BrokerNode:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id = config.get_int("node.id")
        log_dirs = config.get("log.dirs")
        assert isinstance(log_dirs, list)
        self.log_dirs = [pathlib.Path(d).resolve() for d in log_dirs]
        protocol_map = str(config.get("listener.security.protocol.map"))
        listeners = config.get("listeners")
        assert isinstance(listeners, list)
        self.listeners = parse_listeners(listeners, protocol_map)
        advertised = config.get("advertised.listeners")
        self.advertised = parse_listeners(advertised, protocol_map) if isinstance(advertised, list) else None
        self.server: Server | None = None
        self.security: SecurityService | None = None
        self.ctx: BrokerContext | None = None
        self.logs: LogManager | None = None
        self._stop = asyncio.Event()
        self._tier_task: asyncio.Task[None] | None = None  # the saturation rule of priority tiers
        self._disk_task: asyncio.Task[None] | None = None  # disk pools' settings refresh
        self.cluster_store: EtcdMetadataStore | None = None
        self.controller: ControllerService | None = None
        metrics_port = config.get("metrics.port")
        self.obs = ObservabilityService(
            str(config.get("metrics.host")), metrics_port if isinstance(metrics_port, int) else None
        )

    def open_storage(self) -> BrokerContext:
        for directory in self.log_dirs:
            directory.mkdir(parents=True, exist_ok=True)
        clustered = self.cluster_store is not None
        store: LocalMetadataStore | EtcdMetadataStore
        if self.cluster_store is not None:
            cluster_id = ensure_meta_properties(self.log_dirs, self.node_id, self.cluster_store.image.cluster_id)
            store = self.cluster_store
        else:
            cluster_id = ensure_meta_properties(self.log_dirs, self.node_id, self._optional_str("cluster.id"))
            store = LocalMetadataStore(self.log_dirs[0], cluster_id)
        self.config.load_dynamic(store.image.broker_configs, self.node_id)
        # In a cluster the high watermark is the replicas' (replication-offset-checkpoint), not the log end.
        self.logs = LogManager.from_broker_config(self.log_dirs, self.config, hw_follows_leo=not clustered)

        @functools.cache
        def config_for(topic: str) -> LogConfig:  # once per topic, not once per partition
            known = store.image.topics.get(topic)
            return LogConfig.from_topic_config(resolve_topic_config(self.config, known.configs if known else {}))

        self.logs.startup(config_for)
        self.obs.metrics.watch_logs(self.logs)
        topics = TopicAdmin(self.config, store, self.logs, self.node_id, clustered=clustered)
        if not clustered:
            topics.reconcile_logs()  # in a cluster the replica manager does this from the image
        self.ctx = BrokerContext(
            config=self.config,
            node_id=self.node_id,
            cluster_id=cluster_id,
            store=store,
            logs=self.logs,
            topics=topics,
            endpoints=[],
            rack=self._optional_str("broker.rack"),
            metrics=self.obs.metrics,
        )
        self.ctx.producer_ids = ProducerIdAllocator(store)
        self.ctx.quotas = QuotaRuntime(self.config, self.obs.metrics.registry)
        self.ctx.quotas.cold_reads = ReadThrottleRuntime(self.config, self.logs, self.obs.metrics.registry)
        self.ctx.disk = DiskPools(self.config, self.logs, self.obs.metrics.registry)
        self.logs.snapshot_syncer = self.ctx.disk.sync_snapshots_later  # rolls' snapshot fsyncs off the loop
        return self.ctx

    def _build_security(self, ctx: BrokerContext) -> SecurityService:
        """TLS, SASL and the authorizer (security/service.py), reading ACLs and SCRAM credentials from the image."""
        store = ctx.store
        return SecurityService(
            self.config,
            [(listener.name, listener.security_protocol) for listener in self.listeners],
            scram_lookup=lambda mechanism, user: store.image.scram_credentials.get((user, mechanism)),
            acl_source=lambda: store.image.acls,
            audit_dir=self.log_dirs[0],
            now_ms=ctx.now_ms,
        )

    def _optional_str(self, key: str) -> str | None:
        value = self.config.get(key)
        return None if value is None else str(value)

    async def start(self) -> None:
        # First, so /healthz answers and /readyz says 503 while the logs load.
        await self.obs.start()
        self.obs.readiness.add("logs-loaded", lambda: self.ctx is not None)
        self.obs.readiness.add("listeners-open", lambda: self.server is not None and bool(self.server.bound))
        store_url = self._optional_str("metadata.store")
        if store_url:
            self.cluster_store = await EtcdMetadataStore.open(store_url, cluster_id_hint=self._optional_str("cluster.id"))
        ctx = await asyncio.get_running_loop().run_in_executor(None, self.open_storage)
        ctx.groups = GroupRuntime(ctx)
        await ctx.groups.start()  # loads __consumer_offsets in the background
        groups, logs = ctx.groups, ctx.logs
        self.obs.metrics.watch_groups(
            states=lambda: group_counts_by_state(groups), lag=lambda: consumer_lag(groups, logs)
        )
        ctx.transactions = TxnRuntime(ctx)
        await ctx.transactions.start()  # loads __transaction_state in the background
        self.security = self._build_security(ctx)
        ctx.authorizer = self.security.gate
        await self.security.start()
        budget = ReceiveBudget(self.config.get_int("queued.max.request.bytes"))
        ctx.metrics.watch_receive_budget(lambda: budget.reserved, lambda: budget.waiting)
        self.server = Server(
            ctx,
            max_frame_bytes=self.config.get_int("socket.request.max.bytes"),
            send_buffer=self.config.get_int("socket.send.buffer.bytes"),
            receive_buffer=self.config.get_int("socket.receive.buffer.bytes"),
            idle_timeout_ms=self.config.get_int("connections.max.idle.ms"),
            security=self.security.listeners,
            sasl_max_receive_bytes=self.config.get_int("sasl.server.max.receive.size"),
            receive_budget=budget,
            request_read_timeout_ms=self.config.get_int("socket.request.read.timeout.ms"),
            # Kafka protects the inter-broker listener from max.connections only when there are others.
            inter_broker_listener=ReplicaManager.inter_broker_listener(self.config) if len(self.listeners) > 1 else None,
        )
        await self.server.listen(self.listeners)
        ctx.endpoints = self._advertised_endpoints(self.server.bound)
        assert self.logs is not None
        self.logs.start_background()
        if ctx.quotas is not None:
            self._tier_task = asyncio.create_task(ctx.quotas.run(self.log_dirs))
        if ctx.disk is not None:
            self._disk_task = asyncio.create_task(ctx.disk.run())
        if self.cluster_store is not None:
            await self._join_cluster(ctx, self.cluster_store)
        listeners = ",".join(f"{e.name}://{e.host}:{e.port}" for e in self.server.bound)
        metrics_host = self.config.get("metrics.host")
        metrics = f", metrics http://{metrics_host}:{self.obs.port}/metrics" if self.obs.port is not None else ""
        log.info(
            "tidelog started: node %d, cluster %s, listeners %s, log dirs %s%s",
            self.node_id, ctx.cluster_id, listeners, ",".join(map(str, self.log_dirs)), metrics,
        )

    async def _join_cluster(self, ctx: BrokerContext, store: EtcdMetadataStore) -> None:
        """Register under a lease, then lead and follow what the image says, then stand for controller."""
        registration = BrokerRegistration(
            self.node_id, ctx.rack,
            tuple(BrokerEndpoint(e.name, e.host, e.port, e.security_protocol) for e in ctx.endpoints),
            uuid.uuid4().hex,
            _weight(self.config.get("broker.weight")),
            _optional_str(self.config.get("broker.rack.group")),
        )
        session_ms = self.config.get_int("broker.session.timeout.ms")
        heartbeat_ms = self.config.get_int("broker.heartbeat.interval.ms")
        topics = ctx.topics

        def min_insync(topic: str) -> int:
            known = store.image.topics.get(topic)
            value = topics.resolved_config(known).get("min.insync.replicas") if known is not None else 1
            return value if isinstance(value, int) else 1

        def log_config(topic: str) -> LogConfig:
            known = store.image.topics.get(topic)
            return topics.log_config(known) if known is not None else LogConfig.from_topic_config(
                resolve_topic_config(self.config, {}))

        ctx.throttles = ReplicationThrottles(self.node_id, self.config, lambda: store.image, self.obs.metrics.registry)
        replicas = ReplicaManager(self.node_id, self.config, store, ctx.logs, log_config, min_insync,
                                  ctx.purgatory.notify, ctx.now_ms, throttles=ctx.throttles)
        if ctx.disk is not None:
            disk = ctx.disk  # followers' rolls on the log dir's pool, as Produce's (disk_pools.py)
            replicas.roll_ahead = lambda plog, records: disk.roll_before_append(plog, records, ctx.now_ms())
        # The logs' disk work before the lease exists: once registered, the event loop must stay free
        # for the keep-alives (a loop held for session.timeout - 2 heartbeats fences the broker).
        await asyncio.get_running_loop().run_in_executor(None, replicas.open_logs, store.image)
        # A previous life of this node (kill -9, then a quick restart) holds the key until its lease
        # expires: wait that long. A key still held after it belongs to another live process.
        give_up = time.monotonic() + (session_ms + 2 * heartbeat_ms) / 1000
        while True:
            try:
                await store.register_broker(registration, session_ms, heartbeat_ms)
                break
            except DuplicateBrokerError:
                if time.monotonic() >= give_up:
                    raise
                await asyncio.sleep(heartbeat_ms / 2000)

        def unclean_allowed(topic: str) -> bool:
            known = store.image.topics.get(topic)
            return known is not None and bool(topics.resolved_config(known).get("unclean.leader.election.enable"))

        store.subscribe(self._apply_config_changes)
        ctx.replicas = replicas
        store.subscribe(replicas.on_image)
        replicas.start()
        groups = ctx.groups
        if groups is not None:  # the group coordinator follows leadership of __consumer_offsets
            store.subscribe(groups.on_image)
            groups.on_image(store.image, store.image)
        txns = ctx.transactions
        if txns is not None:  # so does the transaction coordinator, of __transaction_state
            store.subscribe(txns.on_image)
            txns.on_image(store.image, store.image)
        self.controller = ControllerService(store, unclean_allowed, RebalanceSettings(
            enabled=bool(self.config.get("auto.leader.rebalance.enable")),
            interval_s=self.config.get_int("leader.imbalance.check.interval.seconds"),
            imbalance_percentage=self.config.get_int("leader.imbalance.per.broker.percentage"),
        ))
        store.subscribe(self.controller.on_image)
        store.on_controller_change(self.controller.on_controller_change)
        self.controller.start()
        await store.campaign()
        log.info("joined the cluster: %d broker(s) live, controller %d", len(store.image.brokers), store.image.controller_id)

    def _apply_config_changes(self, old: ClusterImage, new: ClusterImage) -> None:
        """Configs changed through another broker apply here too: dynamic broker configs, then the
        topics whose overrides (or whose broker-level defaults) changed."""
        ctx = self.ctx
        if ctx is None:
            return
        broker_changed = old.broker_configs is not new.broker_configs and dict(old.broker_configs) != dict(new.broker_configs)
        if broker_changed:
            self.config.load_dynamic(new.broker_configs, self.node_id)
        for name, topic in new.topics.items():
            before = old.topics.get(name)
            if broker_changed or (before is not None and dict(before.configs) != dict(topic.configs)):
                ctx.topics.apply_log_configs(topic)

    async def _leave_cluster(self) -> None:
        """Controlled shutdown: drop the registration so leadership moves away, and wait for it."""
        store, ctx = self.cluster_store, self.ctx
        if store is None:
            return
        if self.controller is not None:
            await self.controller.stop()
        replicas = ctx.replicas if ctx is not None else None
        if replicas is not None:
            replicas.begin_shutdown()
        await store.deregister()
        if replicas is not None and bool(self.config.get("controlled.shutdown.enable")) and replicas.leaders:
            log.info("controlled shutdown: waiting for leadership of %d partition(s) to move", len(replicas.leaders))
            deadline = time.monotonic() + self.config.get_int("broker.session.timeout.ms") / 1000
            while self._leadership_can_move(store) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        if replicas is not None:
            await replicas.stop()
        await store.close(revoke_lease=False)

    def _leadership_can_move(self, store: EtcdMetadataStore) -> bool:
        """Some partition this broker still leads has another live ISR member to take it over."""
        replicas = self.ctx.replicas if self.ctx is not None else None
        if replicas is None:
            return False
        image = store.image
        for topic, index in replicas.leaders:
            known = image.topics.get(topic)
            partition = known.partitions[index] if known is not None and index < len(known.partitions) else None
            if partition is not None and any(r != self.node_id and r in image.brokers for r in partition.isr):
                return True
        return False

    def _advertised_endpoints(self, bound: list[Endpoint]) -> list[Endpoint]:
        if self.advertised is not None:
            return self.advertised
        # Unset: advertise what we bound, with a wildcard host replaced by something reachable.
        return [
            Endpoint(e.name, e.host if e.host not in ("", "0.0.0.0", "::") else "127.0.0.1", e.port, e.security_protocol)
            for e in bound
        ]

    async def stop(self) -> None:
        if self._tier_task is not None:
            self._tier_task.cancel()
        await self._leave_cluster()
        if self.ctx is not None and self.ctx.transactions is not None:
            await self.ctx.transactions.stop()
        if self.ctx is not None and self.ctx.groups is not None:
            await self.ctx.groups.stop()  # parked JoinGroup/SyncGroup answered before the server drains
        if self.server is not None:
            await self.server.close()
        if self.security is not None:
            await self.security.stop()
        if self._disk_task is not None:
            self._disk_task.cancel()
        if self.logs is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.logs.shutdown)
        if self.ctx is not None and self.ctx.disk is not None:
            self.ctx.disk.shutdown()
        await self.obs.stop()
        log.info("tidelog stopped cleanly")

    def request_stop(self) -> None:
        self._stop.set()

    async def run_until_signalled(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        await self.start()
        await self._stop.wait()
        log.info("shutting down")
        await self.stop()


def _optional_str(value: object) -> str | None:
    return None if value is None or value == "" else str(value)


def _weight(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 1.0

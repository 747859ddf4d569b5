"""What every request handler may use: the broker's shared state, built once by the node."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tidelog.broker.disk_pools import DiskPools
from tidelog.broker.fetch_sessions import FetchSessionCache
from tidelog.broker.producer_ids import ProducerIdAllocator
from tidelog.broker.purgatory import FetchPurgatory
from tidelog.broker.quota_runtime import QuotaRuntime
from tidelog.broker.slow_connections import ConnectionScore
from tidelog.broker.topic_admin import TopicAdmin
from tidelog.common.config import BrokerConfig
from tidelog.metadata.image import ClusterImage
from tidelog.metadata.store import MetadataStore
from tidelog.observability.broker_metrics import BrokerMetrics, RequestTimer
from tidelog.observability.registry import Registry
from tidelog.security.access import AccessGate
from tidelog.security.authenticator import SaslAuthenticator, SaslSettings
from tidelog.security.principal import ANONYMOUS
from tidelog.storage.manager import LogManager

if TYPE_CHECKING:
    from tidelog.broker.group_runtime import GroupRuntime
    from tidelog.broker.replica_manager import ReplicaManager
    from tidelog.broker.txn_runtime import TxnRuntime
    from tidelog.replication.throttle import ReplicationThrottles


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One listener as clients should reach it."""

    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"


@dataclass(slots=True)
class ConnectionInfo:
    """Who is on the other end of a connection, for handlers and logs."""

    peer: str
    listener: Endpoint
    client_id: str | None = None
    principal: str = ANONYMOUS  # Kafka's "User:name"; from TLS or SASL (security/principal.py)
    host: str = ""  # the client's IP address, as ACL host filters compare it
    # A SASL connection's authentication while it is not complete; None once done and on other listeners.
    auth: SaslAuthenticator | None = None
    # SASL listeners: what the listener offers (for re-authentication), the mechanism the connection
    # authenticated with, and when its session ends (monotonic ms; 0: never, connections.max.reauth.ms).
    sasl: SaslSettings | None = None
    sasl_mechanism: str | None = None
    session_expires_ms: int = 0
    close_after_response: bool = False  # set by a handler: answer, then close (failed authentication)
    request_timer: RequestTimer | None = None  # the request being served, for handlers to report waits
    # Set by a handler (Produce, Fetch) from the client's byte-rate quota: the server writes it into the
    # response and mutes the connection that long (broker/quota_runtime.py). Reset per request.
    throttle_ms: int = 0
    score: ConnectionScore = field(default_factory=ConnectionScore)  # slow-connection marking (slow_connections.py)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class BrokerContext:
    config: BrokerConfig
    node_id: int
    cluster_id: str
    store: MetadataStore
    logs: LogManager
    topics: TopicAdmin
    endpoints: list[Endpoint]
    rack: str | None = None
    purgatory: FetchPurgatory = field(default_factory=FetchPurgatory)
    fetch_sessions: FetchSessionCache = field(default_factory=FetchSessionCache)
    producer_ids: ProducerIdAllocator | None = None
    groups: GroupRuntime | None = None  # the group coordinator's shell (broker/group_runtime.py)
    transactions: TxnRuntime | None = None  # the transaction coordinator's shell (broker/txn_runtime.py)
    replicas: ReplicaManager | None = None  # clusters only: leadership, ISR, follower fetchers (replica_manager.py)
    throttles: ReplicationThrottles | None = None  # clusters only: replication quotas (replication/throttle.py)
    now_ms: Callable[[], int] = wall_clock_ms
    # None when authorizer.class.name is empty: every request is allowed (broker/authz.py).
    authorizer: AccessGate | None = None
    metrics: BrokerMetrics = field(default_factory=lambda: BrokerMetrics(Registry()))
    quotas: QuotaRuntime | None = None  # client quotas (broker/quota_runtime.py); None: not enforced
    disk: DiskPools | None = None  # where disk work runs (broker/disk_pools.py); None: inline, as before

    @property
    def image(self) -> ClusterImage:
        return self.store.image

    def endpoint_for(self, listener: Endpoint) -> Endpoint:
        """The advertised endpoint matching the listener a request arrived on."""
        for endpoint in self.endpoints:
            if endpoint.name == listener.name:
                return endpoint
        return self.endpoints[0]

"""What the coordinators' shells (group_runtime, txn_runtime, txn_markers) need of the broker.

``context.BrokerContext`` provides all of it; the shells name this protocol instead of the context so
that the context can hold them without an import cycle (the context imports the shells' types).
"""

from __future__ import annotations

from typing import Protocol

from tidelog.broker.producer_ids import ProducerIdAllocator
from tidelog.broker.purgatory import FetchPurgatory
from tidelog.broker.replica_manager import ReplicaManager
from tidelog.broker.topic_admin import TopicAdmin
from tidelog.common.config import BrokerConfig
from tidelog.metadata.image import ClusterImage
from tidelog.storage.manager import LogManager


class CoordinatorHost(Protocol):
    config: BrokerConfig
    node_id: int
    logs: LogManager
    topics: TopicAdmin
    purgatory: FetchPurgatory
    replicas: ReplicaManager | None  # clusters only
    producer_ids: ProducerIdAllocator | None

    def now_ms(self) -> int: ...

    @property
    def image(self) -> ClusterImage: ...

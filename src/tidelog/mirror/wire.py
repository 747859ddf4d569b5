"""The offset-preserving mode's own Kafka-protocol connections, secured like the rest of the link.

Preserve mode sends requests librdkafka does not: raw Fetch (whole batches, byte for byte) to the
source and MirrorProduce (API key 32001) to the destination. ``Wire`` keeps one connection per (side,
broker), made by ``tidelog.clients.security.ClientSecurity`` from the same ``[source]`` and
``[destination]`` librdkafka settings the link's AdminClients get: ``security.protocol`` (PLAINTEXT,
SSL, SASL_PLAINTEXT, SASL_SSL), ``sasl.mechanism`` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512),
``sasl.username``/``sasl.password`` and the ``ssl.*`` keys. The protocol named is the protocol spoken:
a failed TLS handshake or SASL exchange fails the connection (``BrokerUnreachable`` or
``SaslAuthenticationError``), never a plaintext retry.

One request at a time per connection (a lock each); a connection broken by an error is made again on
its next request (``KafkaConnection`` reconnects, authenticating again).

``check`` is the start-up test of one side: ApiVersions over a fresh connection, so that a wrong
password, an untrusted certificate or a PLAINTEXT port fails the link at start with the broker, the
mechanism and the user named, instead of as warnings in the copy loop. ``log_ends`` is the position
probe (MirrorProduce with null records: the destination's log start, log end and high watermark,
nothing written), shared by the copy loop and ``tidelog mirror status``.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.static.primitive import i16, i32, i32Timedelta, i64

from tidelog.clients.security import ClientSecurity, SaslAuthenticationError
from tidelog.common.errors import ConfigError
from tidelog.mirror.config import MirrorConfig
from tidelog.mirror.topics import LinkError
from tidelog.net.kafka_connection import BrokerUnreachable, KafkaConnection
from tidelog.protocol.mirror_produce import (
    MIRROR_PRODUCE_KEY,
    MirrorPartitionData,
    MirrorProduceRequest,
    MirrorTopicData,
)

Side = Literal["source", "destination"]
Address = tuple[str, int]
PROBE_TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=10))


def securities(config: MirrorConfig) -> dict[Side, ClientSecurity]:
    """Both sides' security settings (parse_config has checked them)."""
    return {"source": ClientSecurity.from_config(config.source),
            "destination": ClientSecurity.from_config(config.destination)}


class NotReached(LinkError):
    """A broker of one side could not be reached over the side's protocol (another may be)."""


def bootstrap_addresses(settings: Mapping[str, Any]) -> list[Address]:
    """``bootstrap.servers`` as (host, port) pairs; a ``PROTOCOL://`` prefix is allowed, as librdkafka allows it."""
    out = []
    for entry in str(settings.get("bootstrap.servers", "")).split(","):
        host, _, port = entry.strip().split("://")[-1].rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"bootstrap.servers: {entry.strip()!r} is not HOST:PORT")
        out.append((host.strip("[]"), int(port)))
    return out


def require_mirror_produce(api_versions: Any, address: Address) -> None:
    """LinkError unless the destination broker that gave ``api_versions`` serves MirrorProduce."""
    if not any(int(key.api_key) == MIRROR_PRODUCE_KEY for key in api_versions.api_keys):
        raise LinkError(
            f"link.offsets = \"preserve\" needs a tidelog destination: the broker at {address[0]}:{address[1]} "
            f"does not serve MirrorProduce (API key {MIRROR_PRODUCE_KEY}), which writes records at their "
            "source offsets; Apache Kafka has no such write path. Use offsets = \"translate\" for it.")


@dataclass(frozen=True)
class LogEnd:
    """One destination partition as its leader's MirrorProduce probe answered."""

    error_code: int
    error_message: str
    log_start: int
    log_end: int  # -1 with an error before the log was reached
    high_watermark: int


class Wire:
    def __init__(self, config: MirrorConfig, *, timeout_s: float) -> None:
        self.config = config
        self.client_id = f"tidelog-mirror.{config.name}"
        self.timeout_s = timeout_s
        self.security = securities(config)
        self._connections: dict[tuple[Side, Address], tuple[KafkaConnection, asyncio.Lock]] = {}

    def describe(self, side: Side) -> str:
        security = self.security[side]
        if not security.sasl:
            return security.protocol
        return f"{security.protocol}, {security.mechanism} as {security.username!r}"

    async def call(self, side: Side, address: Address, request: Any, timeout_s: float | None = None) -> Any:
        """``request`` on this process's connection to ``address``: ``BrokerUnreachable`` or
        ``SaslAuthenticationError`` when it cannot be made or breaks."""
        entry = self._connections.get((side, address))
        if entry is None:
            connection = self.security[side].connection(address[0], address[1], self.client_id,
                                                        timeout_s=self.timeout_s)
            entry = self._connections[(side, address)] = (connection, asyncio.Lock())
        connection, lock = entry
        async with lock:
            return await connection.call(request, timeout_s=timeout_s)

    async def check(self, side: Side, address: Address) -> Any:
        """ApiVersions over a fresh connection to one broker of ``side``; ``LinkError`` saying why not."""
        security = self.security[side]
        connection = security.connection(address[0], address[1], self.client_id, timeout_s=self.timeout_s)
        where = f"the {side} broker at {address[0]}:{address[1]} ({self.describe(side)})"
        try:
            return await connection.call(ApiVersionsRequest(client_software_name="tidelog-mirror",
                                                            client_software_version="1"))
        except SaslAuthenticationError as exc:
            raise LinkError(f"{where}: {exc}") from None
        except BrokerUnreachable as exc:
            raise NotReached(f"cannot reach {where}: {exc}{security.hint()}") from None
        finally:
            await connection.aclose()

    async def reach(self, side: Side) -> tuple[Any, Address]:
        """ApiVersions from the first bootstrap server of ``side`` that answers (``check``); LinkError at
        once for a refused authentication, or listing every failure when none answers."""
        settings = self.config.source if side == "source" else self.config.destination
        try:
            addresses = bootstrap_addresses(settings)
        except ConfigError as exc:
            raise LinkError(f"{side}.{exc}") from None
        failures: list[str] = []
        for address in addresses:
            try:
                return await self.check(side, address), address
            except NotReached as exc:
                failures.append(str(exc))
        raise LinkError("; ".join(failures) or f"{side}.bootstrap.servers: no HOST:PORT")

    async def log_ends(self, leader: Address, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], LogEnd]:
        """Probe destination ``partitions`` (topic, partition) led by ``leader``; nothing is written."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        request = MirrorProduceRequest(
            link=self.config.name, acks=i16(1), timeout=PROBE_TIMEOUT,
            topics=tuple(MirrorTopicData(name=topic, partitions=tuple(
                MirrorPartitionData(index=i32(p), log_start_offset=i64(-1), records=None) for p in numbers))
                for topic, numbers in by_topic.items()))
        answer = await self.call("destination", leader, request)
        return {(topic.name, int(r.index)): LogEnd(int(r.error_code), r.error_message or "", int(r.log_start_offset),
                                                   int(r.log_end_offset), int(r.high_watermark))
                for topic in answer.topics for r in topic.partitions}

    async def close(self) -> None:
        connections = [connection for connection, _ in self._connections.values()]
        self._connections.clear()
        for connection in connections:
            await connection.aclose()


def leader_of(metadata: Any, topic: str, partition: int) -> Address | None:
    """The address of ``partition``'s leader in librdkafka metadata (None: no such partition or no leader)."""
    described = metadata.topics.get(topic)
    if described is None or described.error is not None or partition not in described.partitions:
        return None
    leader = described.partitions[partition].leader
    broker = metadata.brokers.get(leader)
    return None if broker is None else (str(broker.host), int(broker.port))

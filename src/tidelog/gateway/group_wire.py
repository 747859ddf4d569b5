"""The ownership group's description, asked over the gateway's own Kafka-protocol connections.

The router needs one coordinator-bound request, DescribeGroups (the ACLs, gateway/acls.py, one that
any broker answers: ``call_any``). It is not asked through
confluent-kafka's ``AdminClient.describe_consumer_groups``: librdkafka's coordinator-bound admin
requests abort the whole process (``rd_kafka_enq_once_del_source_return: Assertion
`eonce->refcnt > 0'``, librdkafka issues 4605 and 3663) when the coordinator's connection drops
while one is under way, which is exactly what a broker restart does to a gateway that forwards.
Here a broken connection is only an exception.

``GroupWire.describe(group)``: FindCoordinator v1 (key type 0, a group) on the first bootstrap
server that answers, then DescribeGroups v4 on the coordinator; each member's assignment bytes are
decoded as a ``ConsumerProtocolAssignment`` (an int16 version, then the same fields in every version
0 to 3). Connections are made with the ``kafka.*`` settings the librdkafka clients get
(``tidelog.clients.security``: TLS, SASL PLAIN or SCRAM), kept per broker and made again after an
error. Calls are serialised (one request at a time per connection); all run on the event loop.

Every failure (connection refused or broken, a timeout, an error code in an answer) is a
``GroupWireError`` whose message names the broker or the Kafka error.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment
from kio.schema.describe_groups.v4.request import DescribeGroupsRequest
from kio.schema.find_coordinator.v1.request import FindCoordinatorRequest
from kio.schema.types import GroupId
from kio.serial import entity_reader
from kio.static.primitive import i8

from tidelog.clients.errors import ClientError
from tidelog.clients.security import ClientSecurity
from tidelog.common.errors import ErrorCode
from tidelog.net.kafka_connection import BrokerUnreachable, KafkaConnection

_ERROR_NAMES = {int(e.value): e.name for e in ErrorCode}
_VERSION = struct.Struct(">h")
_read_assignment = entity_reader(ConsumerProtocolAssignment)


class GroupWireError(Exception):
    """The group could not be described now (the cluster is unreachable, or answered an error)."""


@dataclass(frozen=True)
class GroupMember:
    client_id: str
    assignment: tuple[tuple[str, int], ...]  # (topic, partition)


def error_name(code: int) -> str:
    return _ERROR_NAMES.get(int(code), f"ERROR_{int(code)}")


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    out = []
    for item in servers.split(","):
        host, _, port = item.strip().rpartition(":")
        if host and port.isdigit():
            out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError(f"no host:port in bootstrap.servers={servers!r}")
    return out


def decode_assignment(data: bytes) -> tuple[tuple[str, int], ...]:
    """A consumer-protocol member assignment: empty bytes (no assignment yet) give no partitions."""
    if len(data) < _VERSION.size:
        return ()
    (version,) = _VERSION.unpack_from(data, 0)
    if version < 0:
        raise ValueError(f"assignment version {version}")
    # Versions 0 to 3 share the layout; a newer one only appends fields, which are ignored.
    assignment, _size = _read_assignment(data, _VERSION.size)
    return tuple((str(t.topic), int(p)) for t in assignment.assigned_partitions for p in t.partitions)


class GroupWire:
    def __init__(self, bootstrap_servers: str, kafka: Mapping[str, Any], client_id: str, *,
                 timeout_s: float = 5.0) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.security = ClientSecurity.from_config(kafka)
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._connections: dict[tuple[str, int], KafkaConnection] = {}
        self._lock = asyncio.Lock()

    async def _call(self, address: tuple[str, int], request: Any) -> Any:
        connection = self._connections.get(address)
        if connection is None:
            connection = self.security.connection(address[0], address[1], self.client_id, timeout_s=self.timeout_s)
            self._connections[address] = connection
        try:
            return await asyncio.wait_for(connection.call(request), self.timeout_s)
        except (BrokerUnreachable, ClientError, TimeoutError) as exc:
            connection.close()
            raise GroupWireError(f"broker {address[0]}:{address[1]}: {exc or type(exc).__name__}") from None
        except BaseException:  # cancelled mid-request: the stream is out of step
            connection.close()
            raise

    async def call_any(self, request: Any) -> Any:
        """``request``'s answer from the first bootstrap server that answers (any broker will do)."""
        async with self._lock:
            return await self._first_answer(request)

    async def _first_answer(self, request: Any) -> Any:
        failures = []
        for address in self.bootstrap:
            try:
                return await self._call(address, request)
            except GroupWireError as exc:
                failures.append(str(exc))
        raise GroupWireError("; ".join(failures))

    async def _coordinator(self, group: str) -> tuple[str, int]:
        found = await self._first_answer(FindCoordinatorRequest(key=group, key_type=i8(0)))
        if found.error_code != 0:
            raise GroupWireError(f"no coordinator for group {group}: {error_name(found.error_code)}")
        return str(found.host), int(found.port)

    async def describe(self, group: str) -> list[GroupMember]:
        async with self._lock:
            address = await self._coordinator(group)
            answer = await self._call(address, DescribeGroupsRequest(groups=(GroupId(group),),
                                                                     include_authorized_operations=False))
        if len(answer.groups) != 1:
            raise GroupWireError(f"DescribeGroups answered {len(answer.groups)} groups for one")
        described = answer.groups[0]
        if described.error_code != 0:
            raise GroupWireError(f"describing group {group}: {error_name(described.error_code)}")
        members = []
        for member in described.members:
            try:
                assignment = decode_assignment(member.member_assignment)
            except Exception as exc:  # a member of another protocol type: it owns nothing of ours
                raise GroupWireError(f"member {member.member_id} of group {group}: undecodable assignment "
                                     f"({exc})") from None
            members.append(GroupMember(str(member.client_id), assignment))
        return members

    async def aclose(self) -> None:
        connections, self._connections = list(self._connections.values()), {}
        for connection in connections:
            await connection.aclose()

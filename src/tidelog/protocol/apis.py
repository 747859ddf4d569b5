"""The API registry: which keys tidelog serves, at which versions, and their kio schema classes.

Ranges come from ``PROTOCOL_NOTES.md`` (what real clients need). ``ACCEPTED`` is what a request may
carry; ``advertised_range`` is what ApiVersions announces. They differ only for Produce: Kafka 4
advertises Produce from v0 (librdkafka before 2.11.1 enables compression only if v0 is in range)
yet refuses v0-2 requests (see ``errors.py``).

Flexibility (tagged fields, compact strings, header v2 / response header v1) is read from kio's
generated ``__flexible__`` class attribute of each version's request module, cached.
"""

from __future__ import annotations

import enum
import functools
from typing import Any

from kio.index import load_request_schema, load_response_schema

from tidelog.protocol import mirror_produce
from tidelog.protocol.errors import UnknownApiKey


class ApiKey(enum.IntEnum):
    """Kafka API keys that tidelog serves (numbers are Kafka's)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_QUORUM = 55
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    LIST_CONFIG_RESOURCES = 74
    DESCRIBE_TOPIC_PARTITIONS = 75
    # tidelog's own, outside Kafka's range (protocol/mirror_produce.py)
    MIRROR_PRODUCE = mirror_produce.MIRROR_PRODUCE_KEY


ACCEPTED: dict[ApiKey, tuple[int, int]] = {
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.METADATA: (4, 13),
    ApiKey.DESCRIBE_CLUSTER: (0, 2),
    ApiKey.PRODUCE: (3, 13),
    ApiKey.INIT_PRODUCER_ID: (0, 5),
    ApiKey.FETCH: (4, 17),
    ApiKey.LIST_OFFSETS: (1, 11),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 6),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.OFFSET_COMMIT: (2, 9),
    ApiKey.OFFSET_FETCH: (1, 9),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 5),
    ApiKey.WRITE_TXN_MARKERS: (1, 2),
    ApiKey.TXN_OFFSET_COMMIT: (0, 5),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 1),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.DESCRIBE_LOG_DIRS: (1, 5),
    ApiKey.ALTER_REPLICA_LOG_DIRS: (1, 2),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
    # Kafka 4.3's ranges; single-node answers (broker/handlers/admin_describe.py)
    ApiKey.DESCRIBE_QUORUM: (0, 2),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.LIST_CONFIG_RESOURCES: (0, 1),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (0, 0),
    ApiKey.MIRROR_PRODUCE: mirror_produce.VERSIONS,
}

# Keys that are not Kafka's: their schemas are tidelog's, in kio's format, not kio's.
_EXTENSIONS: dict[int, tuple[type[Any], type[Any]]] = {
    mirror_produce.MIRROR_PRODUCE_KEY: (mirror_produce.MirrorProduceRequest, mirror_produce.MirrorProduceResponse),
}

# Advertised below the accepted minimum: Kafka 4 does the same for Produce (KAFKA-18659).
_ADVERTISED_MIN: dict[ApiKey, int] = {ApiKey.PRODUCE: 0}

# By wire value, for the per-request checks: ``ApiKey(value)`` goes through the enum machinery (µs).
_BY_VALUE: dict[int, ApiKey] = {int(key): key for key in ApiKey}
_RANGES: dict[int, tuple[int, int]] = {int(key): versions for key, versions in ACCEPTED.items()}


def is_known(value: int) -> bool:
    """Whether tidelog serves this API key at all."""
    return value in _BY_VALUE


def api_key(value: int) -> ApiKey:
    """The ``ApiKey`` for a wire value; ``UnknownApiKey`` if tidelog does not serve it."""
    key = _BY_VALUE.get(value)
    if key is None:
        raise UnknownApiKey(value)
    return key


def accepted_range(key: int) -> tuple[int, int]:
    """The (min, max) versions a request with this key may carry."""
    return ACCEPTED[api_key(key)]


def advertised_range(key: int) -> tuple[int, int]:
    """The (min, max) versions ApiVersions announces for this key."""
    low, high = accepted_range(key)
    return _ADVERTISED_MIN.get(ApiKey(key), low), high


def known_key(value: int) -> ApiKey | None:
    """The ``ApiKey`` for a wire value, or None if tidelog does not serve it."""
    return _BY_VALUE.get(value)


def is_supported(key: int, version: int) -> bool:
    """Whether tidelog decodes this key at this version."""
    versions = _RANGES.get(key)
    return versions is not None and versions[0] <= version <= versions[1]


@functools.cache
def is_flexible(key: int, version: int) -> bool:
    """Whether this request version uses flexible encoding (request header v2, response header v1)."""
    flexible = request_class(key, version).__flexible__
    assert isinstance(flexible, bool)
    return flexible


@functools.cache
def request_class(key: int, version: int) -> type[Any]:
    """kio's request dataclass for this key and version (a supported pair only)."""
    _require_supported(key, version)
    return request_schema(key, version)


@functools.cache
def response_class(key: int, version: int) -> type[Any]:
    """kio's response dataclass for this key and version (a supported pair only)."""
    _require_supported(key, version)
    return response_schema(key, version)


def request_schema(key: int, version: int) -> type[Any]:
    """The request schema of any key kio or tidelog knows, served or not (clients' side)."""
    extension = _EXTENSIONS.get(key)
    if extension is not None:
        return extension[0]
    return load_request_schema(key, version)


def response_schema(key: int, version: int) -> type[Any]:
    """The response schema of any key kio or tidelog knows, served or not (clients' side)."""
    extension = _EXTENSIONS.get(key)
    if extension is not None:
        return extension[1]
    return load_response_schema(key, version)


def _require_supported(key: int, version: int) -> None:
    if not is_supported(key, version):
        raise ValueError(f"API key {key} version {version} is not in tidelog's registry")

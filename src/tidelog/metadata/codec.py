"""JSON forms of the image's parts, shared by the local file and the etcd keys.

Every ``*_to_json`` returns JSON natives; every ``*_from_json`` checks the shape and the types of
what it is given and raises :class:`CorruptValueError` (a ``ValueError``) naming what is wrong, and
nothing else: a store can then report a bad value with its key and carry on. ``bool`` is never
accepted where an integer is expected (JSON ``true`` is not a node id).

Forms (the etcd keys that hold them are listed in ``etcd_layout``)::

    acl          {"resource_type": 2, "resource_name": "orders", "pattern_type": 3,
                  "principal": "User:app", "host": "*", "operation": 4, "permission_type": 3}
    scram        {"user": "app", "mechanism": "SCRAM-SHA-256", "salt": "<base64>",
                  "stored_key": "<base64>", "server_key": "<base64>", "iterations": 8192}
    broker       {"node_id": 1, "rack": "r1" | null, "incarnation": "<uuid>",
                  "endpoints": [{"name": "PLAINTEXT", "host": "h", "port": 9092,
                                 "security_protocol": "PLAINTEXT"}],
                  "weight": 1.0, "rack_group": "g1" | null}
                 (weight and rack_group are optional: older registrations lack them)
    topic        {"topic_id": "<uuid>", "configs": {...overrides...}, "replicas": [[1, 2, 3], ...]}
    partition    {"leader": 1, "leader_epoch": 0, "isr": [1, 2, 3], "partition_epoch": 0,
                  "replicas": [1, 2, 3],                  # since issue 17; absent: the topic's list
                  "adding_replicas": [3], "removing_replicas": [4]}   # only during a move
    controller   {"node_id": 1, "epoch": 7}
    quota        {"entity": [{"type": "user", "name": "app" | null}, ...],   null name: the default
                  "values": {"producer_byte_rate": 1048576.0, ...}}
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from tidelog.common.config import Value
from tidelog.metadata.image import (
    AclEntry,
    BrokerEndpoint,
    BrokerRegistration,
    PartitionImage,
    QuotaEntity,
    TopicImage,
)
from tidelog.protocol.sasl import ScramCredential


class CorruptValueError(ValueError):
    """A stored value does not have the expected shape; the message says what is wrong."""


# -- primitives -----------------------------------------------------------------------------------


def decode(data: bytes) -> Any:
    try:
        return json.loads(data.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptValueError(f"not JSON: {exc}") from None


def encode(doc: object) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def expect_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise CorruptValueError(f"{what}: expected an integer, got {value!r}")
    return value


def expect_str(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise CorruptValueError(f"{what}: expected a string, got {value!r}")
    return value


def expect_dict(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise CorruptValueError(f"{what}: expected an object, got {type(value).__name__}")
    return value


def expect_list(value: object, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise CorruptValueError(f"{what}: expected a list, got {type(value).__name__}")
    return value


def required(doc: Mapping[str, Any], key: str) -> Any:
    if key not in doc:
        raise CorruptValueError(f"missing field {key!r}")
    return doc[key]


def int_list(value: object, what: str) -> tuple[int, ...]:
    return tuple(expect_int(item, what) for item in expect_list(value, what))


def _b64(value: object, what: str) -> bytes:
    try:
        return base64.b64decode(expect_str(value, what), validate=True)
    except binascii.Error as exc:
        raise CorruptValueError(f"{what}: not base64: {exc}") from None


def _config_value(value: object, key: str) -> Value:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return list(value)
    raise CorruptValueError(f"config {key}: unexpected value {value!r}")


# -- parts ----------------------------------------------------------------------------------------


def configs_to_json(configs: Mapping[str, Value]) -> dict[str, Value]:
    return dict(configs)


def configs_from_json(value: object) -> Mapping[str, Value]:
    doc = expect_dict(value, "configs")
    return MappingProxyType({expect_str(k, "config name"): _config_value(v, k) for k, v in doc.items()})


def acl_to_json(acl: AclEntry) -> dict[str, Any]:
    return {
        "resource_type": acl.resource_type,
        "resource_name": acl.resource_name,
        "pattern_type": acl.pattern_type,
        "principal": acl.principal,
        "host": acl.host,
        "operation": acl.operation,
        "permission_type": acl.permission_type,
    }


def acl_from_json(value: object) -> AclEntry:
    doc = expect_dict(value, "acl")
    return AclEntry(
        expect_int(required(doc, "resource_type"), "resource_type"),
        expect_str(required(doc, "resource_name"), "resource_name"),
        expect_int(required(doc, "pattern_type"), "pattern_type"),
        expect_str(required(doc, "principal"), "principal"),
        expect_str(required(doc, "host"), "host"),
        expect_int(required(doc, "operation"), "operation"),
        expect_int(required(doc, "permission_type"), "permission_type"),
    )


def scram_to_json(user: str, mechanism: str, credential: ScramCredential) -> dict[str, Any]:
    return {
        "user": user,
        "mechanism": mechanism,
        "salt": base64.b64encode(credential.salt).decode(),
        "stored_key": base64.b64encode(credential.stored_key).decode(),
        "server_key": base64.b64encode(credential.server_key).decode(),
        "iterations": credential.iterations,
    }


def scram_from_json(value: object) -> tuple[tuple[str, str], ScramCredential]:
    doc = expect_dict(value, "scram credential")
    key = (expect_str(required(doc, "user"), "user"), expect_str(required(doc, "mechanism"), "mechanism"))
    return key, ScramCredential(
        _b64(required(doc, "salt"), "salt"),
        _b64(required(doc, "stored_key"), "stored_key"),
        _b64(required(doc, "server_key"), "server_key"),
        expect_int(required(doc, "iterations"), "iterations"),
    )


def scram_list_to_json(credentials: Mapping[tuple[str, str], ScramCredential]) -> list[dict[str, Any]]:
    return [scram_to_json(user, mechanism, c) for (user, mechanism), c in sorted(credentials.items())]


def broker_to_json(registration: BrokerRegistration) -> dict[str, Any]:
    return {
        "node_id": registration.node_id,
        "rack": registration.rack,
        "endpoints": [
            {"name": e.name, "host": e.host, "port": e.port, "security_protocol": e.security_protocol}
            for e in registration.endpoints
        ],
        "incarnation": registration.incarnation,
        "weight": registration.weight,
        "rack_group": registration.rack_group,
    }


def broker_from_json(value: object) -> BrokerRegistration:
    doc = expect_dict(value, "broker")
    rack = required(doc, "rack")
    endpoints = []
    for item in expect_list(required(doc, "endpoints"), "endpoints"):
        e = expect_dict(item, "endpoint")
        endpoints.append(BrokerEndpoint(
            expect_str(required(e, "name"), "endpoint name"),
            expect_str(required(e, "host"), "endpoint host"),
            expect_int(required(e, "port"), "endpoint port"),
            expect_str(required(e, "security_protocol"), "security_protocol"),
        ))
    weight = doc.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not weight > 0:
        raise CorruptValueError(f"weight: expected a positive number, got {weight!r}")
    group = doc.get("rack_group")
    return BrokerRegistration(
        expect_int(required(doc, "node_id"), "node_id"),
        None if rack is None else expect_str(rack, "rack"),
        tuple(endpoints),
        expect_str(required(doc, "incarnation"), "incarnation"),
        float(weight),
        None if group is None else expect_str(group, "rack_group"),
    )


def topic_to_json(topic: TopicImage) -> dict[str, Any]:
    return {
        "topic_id": str(topic.topic_id),
        "configs": configs_to_json(topic.configs),
        "replicas": [list(p.replicas) for p in topic.partitions],
    }


def topic_from_json(value: object) -> tuple[uuid.UUID, Mapping[str, Value], tuple[tuple[int, ...], ...]]:
    """(topic id, config overrides, replicas of each partition in index order)."""
    doc = expect_dict(value, "topic")
    try:
        topic_id = uuid.UUID(expect_str(required(doc, "topic_id"), "topic_id"))
    except ValueError as exc:
        raise CorruptValueError(f"topic_id: {exc}") from None
    replicas = tuple(int_list(r, "replicas") for r in expect_list(required(doc, "replicas"), "replicas"))
    return topic_id, configs_from_json(required(doc, "configs")), replicas


def partition_state_to_json(partition: PartitionImage) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "leader": partition.leader,
        "leader_epoch": partition.leader_epoch,
        "isr": list(partition.isr),
        "partition_epoch": partition.partition_epoch,
        "replicas": list(partition.replicas),
    }
    if partition.adding_replicas:
        doc["adding_replicas"] = list(partition.adding_replicas)
    if partition.removing_replicas:
        doc["removing_replicas"] = list(partition.removing_replicas)
    return doc


def partition_state_from_json(value: object, index: int, replicas: tuple[int, ...]) -> PartitionImage:
    """One partition's state; ``replicas`` is the fallback for a record written before the state held
    its own replica list (the topic's list). A record without the move fields has no move."""
    doc = expect_dict(value, "partition")
    own = int_list(doc["replicas"], "replicas") if "replicas" in doc else replicas
    adding = int_list(doc.get("adding_replicas", []), "adding_replicas")
    removing = int_list(doc.get("removing_replicas", []), "removing_replicas")
    if not set(adding) <= set(own) or not set(removing) <= set(own) or set(adding) & set(removing):
        raise CorruptValueError(f"adding {list(adding)} / removing {list(removing)} do not fit replicas {list(own)}")
    return PartitionImage(
        index,
        expect_int(required(doc, "leader"), "leader"),
        expect_int(required(doc, "leader_epoch"), "leader_epoch"),
        own,
        int_list(required(doc, "isr"), "isr"),
        expect_int(doc.get("partition_epoch", 0), "partition_epoch"),
        adding,
        removing,
    )


def controller_to_json(node_id: int, epoch: int) -> dict[str, int]:
    return {"node_id": node_id, "epoch": epoch}


def controller_from_json(value: object) -> tuple[int, int]:
    doc = expect_dict(value, "controller")
    return expect_int(required(doc, "node_id"), "node_id"), expect_int(required(doc, "epoch"), "epoch")


def quotas_to_json(quotas: Mapping[QuotaEntity, Mapping[str, float]]) -> list[dict[str, Any]]:
    return [
        {"entity": [{"type": kind, "name": name} for kind, name in entity], "values": dict(sorted(values.items()))}
        for entity, values in sorted(quotas.items(), key=lambda item: [(k, n or "") for k, n in item[0]])
    ]


def _quota_entity(value: object) -> QuotaEntity:
    parts = []
    for item in expect_list(value, "quota entity"):
        doc = expect_dict(item, "quota entity part")
        name = required(doc, "name")
        parts.append((expect_str(required(doc, "type"), "entity type"), None if name is None else expect_str(name, "entity name")))
    if not parts:
        raise CorruptValueError("quota entity: empty")
    return tuple(sorted(parts))


def _quota_values(value: object) -> Mapping[str, float]:
    values = {}
    for key, number in expect_dict(value, "quota values").items():
        if isinstance(number, bool) or not isinstance(number, int | float):
            raise CorruptValueError(f"quota {key}: expected a number, got {number!r}")
        values[expect_str(key, "quota key")] = float(number)
    return MappingProxyType(values)


def quotas_from_json(value: object) -> Mapping[QuotaEntity, Mapping[str, float]]:
    quotas = {}
    for item in expect_list(value, "client quotas"):
        doc = expect_dict(item, "client quota")
        quotas[_quota_entity(required(doc, "entity"))] = _quota_values(required(doc, "values"))
    return MappingProxyType(quotas)

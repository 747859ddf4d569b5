"""The single-node metadata store: the cluster image in one JSON file, replaced atomically.

File ``<first log dir>/__cluster_metadata.json``::

    {"version": 1,
     "cluster_id": "<22-char base64 uuid>",
     "broker_configs": {"log.retention.ms": 3600000, ...},          # dynamic broker configs
     "producer_id_block_end": 2000,                                 # ids below are handed out
     "topics": [{"name": "orders", "topic_id": "<uuid>",
                 "configs": {"retention.ms": 60000, ...},              # topic overrides only
                 "partitions": [{"index": 0, "leader": 1, "leader_epoch": 0,
                                 "replicas": [1], "isr": [1]}, ...]}, ...],
     "acls": [{"resource_type": 2, "resource_name": "orders", "pattern_type": 3,   # optional
               "principal": "User:app", "host": "*", "operation": 4, "permission_type": 3}, ...],
     "scram_credentials": [{"user": "app", "mechanism": "SCRAM-SHA-256",           # optional
                            "salt": "<base64>", "stored_key": "<base64>", "server_key": "<base64>",
                            "iterations": 8192}, ...],
     "client_quotas": [{"entity": [{"type": "user", "name": "app"}],                # optional
                        "values": {"producer_byte_rate": 1048576.0}}, ...]}

Writes go to a temporary file that is fsynced, renamed over the old file, and the directory fsynced,
so after a crash the file is either the old image or the new one, never a mix. Values are JSON
natives of the catalogue's types (lists for LIST settings); the parts' JSON forms are ``codec``'s,
except partitions, which the file keeps whole (``replicas`` with the state; no ``partition_epoch``: a
single node never changes leaders). A file that does not have this shape is refused with a
``ConfigError`` saying what is wrong. Keys added after version 1 was first
written (``acls``, ``scram_credentials``, ``client_quotas``) are optional: a file without them loads as having none.
"""

from __future__ import annotations

import json
import os
import pathlib
import threading
import uuid
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from tidelog.common.errors import ConfigError
from tidelog.metadata import codec
from tidelog.metadata.image import ClusterImage, PartitionImage, TopicImage

FILE_NAME = "__cluster_metadata.json"
FORMAT_VERSION = 1


def write_atomically(path: pathlib.Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: write temp, fsync, rename, fsync the directory.

    If the temporary file cannot be written (a full disk: ENOSPC, an I/O error) it is removed and the
    OSError raised: ``path`` keeps the old image and no stray ``.tmp`` is left behind."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _image_to_json(image: ClusterImage) -> dict[str, Any]:
    return {
        "version": FORMAT_VERSION,
        "cluster_id": image.cluster_id,
        "broker_configs": codec.configs_to_json(image.broker_configs),
        "producer_id_block_end": image.producer_id_block_end,
        "topics": [
            {
                "name": topic.name,
                "topic_id": str(topic.topic_id),
                "configs": codec.configs_to_json(topic.configs),
                "partitions": [
                    {
                        "index": p.index,
                        "leader": p.leader,
                        "leader_epoch": p.leader_epoch,
                        "replicas": list(p.replicas),
                        "isr": list(p.isr),
                    }
                    for p in topic.partitions
                ],
            }
            for topic in image.topics.values()
        ],
        "acls": [codec.acl_to_json(a) for a in image.acls],
        "scram_credentials": codec.scram_list_to_json(image.scram_credentials),
        "client_quotas": codec.quotas_to_json(image.client_quotas),
    }


def _partition_from_json(value: object) -> PartitionImage:
    doc = codec.expect_dict(value, "partition")
    return PartitionImage(
        codec.expect_int(codec.required(doc, "index"), "index"),
        codec.expect_int(codec.required(doc, "leader"), "leader"),
        codec.expect_int(codec.required(doc, "leader_epoch"), "leader_epoch"),
        codec.int_list(codec.required(doc, "replicas"), "replicas"),
        codec.int_list(codec.required(doc, "isr"), "isr"),
    )


def _topic_from_json(value: object) -> TopicImage:
    doc = codec.expect_dict(value, "topic")
    name = codec.expect_str(codec.required(doc, "name"), "name")
    partitions = tuple(_partition_from_json(p) for p in codec.expect_list(codec.required(doc, "partitions"), "partitions"))
    configs = codec.configs_from_json(codec.required(doc, "configs"))
    try:
        topic_id = uuid.UUID(codec.expect_str(codec.required(doc, "topic_id"), "topic_id"))
    except ValueError as exc:
        raise codec.CorruptValueError(f"topic {name}: topic_id: {exc}") from None
    return TopicImage(name, topic_id, partitions, configs)


def _image_from_json(doc: Mapping[str, Any]) -> ClusterImage:
    if doc.get("version") != FORMAT_VERSION:
        raise ConfigError(f"{FILE_NAME}: unsupported format version {doc.get('version')!r}")
    try:
        topics = {t.name: t for t in map(_topic_from_json, codec.expect_list(doc["topics"], "topics"))}
        return ClusterImage(
            cluster_id=codec.expect_str(doc["cluster_id"], "cluster_id"),
            topics=MappingProxyType(topics),
            broker_configs=codec.configs_from_json(doc.get("broker_configs", {})),
            producer_id_block_end=codec.expect_int(doc.get("producer_id_block_end", 0), "producer_id_block_end"),
            acls=tuple(codec.acl_from_json(a) for a in codec.expect_list(doc.get("acls", []), "acls")),
            scram_credentials=MappingProxyType(dict(
                codec.scram_from_json(c) for c in codec.expect_list(doc.get("scram_credentials", []), "scram")
            )),
            client_quotas=codec.quotas_from_json(doc.get("client_quotas", [])),
        )
    except (KeyError, codec.CorruptValueError) as exc:
        raise ConfigError(f"{FILE_NAME}: corrupt metadata file: {exc}") from None


class LocalMetadataStore:
    """Holds the current image and persists each new one before publishing it.

    Thread-safe: ``commit`` serialises writers; ``image`` is a plain attribute read (atomic).
    """

    def __init__(self, directory: pathlib.Path, cluster_id: str) -> None:
        self.path = directory / FILE_NAME
        self._lock = threading.Lock()
        if self.path.exists():
            self.image = _image_from_json(json.loads(self.path.read_bytes()))
        else:
            directory.mkdir(parents=True, exist_ok=True)
            self.image = ClusterImage(cluster_id=cluster_id)
            write_atomically(self.path, self._encode(self.image))

    @staticmethod
    def _encode(image: ClusterImage) -> bytes:
        return json.dumps(_image_to_json(image), indent=1, sort_keys=True).encode()

    async def commit(self, new_image: ClusterImage) -> None:
        """Persist ``new_image``, then publish it. The file write is short and stays on the caller's
        thread (the event loop), so commits are applied in the order they are made."""
        with self._lock:
            write_atomically(self.path, self._encode(new_image))
            self.image = new_image

    async def allocate_producer_ids(self, count: int) -> int:
        """Reserve ``count`` producer ids; the first of them."""
        start = self.image.producer_id_block_end
        await self.commit(self.image.with_producer_id_block_end(start + count))
        return start

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
                            "iterations": 8192}, ...]}

Writes go to a temporary file that is fsynced, renamed over the old file, and the directory fsynced,
so after a crash the file is either the old image or the new one, never a mix. Values are JSON
natives of the catalogue's types (lists for LIST settings). Keys added after version 1 was first
written (``acls``, ``scram_credentials``) are optional: a file without them loads as having none.
"""

from __future__ import annotations

import base64
import json
import os
import pathlib
import threading
import uuid
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from tidelog.common.errors import ConfigError
from tidelog.metadata.image import AclEntry, ClusterImage, PartitionImage, TopicImage
from tidelog.protocol.sasl import ScramCredential

FILE_NAME = "__cluster_metadata.json"
FORMAT_VERSION = 1


def write_atomically(path: pathlib.Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: write temp, fsync, rename, fsync the directory."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _image_to_json(image: ClusterImage) -> dict[str, Any]:
    return {
        "version": FORMAT_VERSION,
        "cluster_id": image.cluster_id,
        "broker_configs": dict(image.broker_configs),
        "producer_id_block_end": image.producer_id_block_end,
        "topics": [
            {
                "name": topic.name,
                "topic_id": str(topic.topic_id),
                "configs": dict(topic.configs),
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
        "acls": [
            {
                "resource_type": a.resource_type,
                "resource_name": a.resource_name,
                "pattern_type": a.pattern_type,
                "principal": a.principal,
                "host": a.host,
                "operation": a.operation,
                "permission_type": a.permission_type,
            }
            for a in image.acls
        ],
        "scram_credentials": [
            {
                "user": user,
                "mechanism": mechanism,
                "salt": base64.b64encode(c.salt).decode(),
                "stored_key": base64.b64encode(c.stored_key).decode(),
                "server_key": base64.b64encode(c.server_key).decode(),
                "iterations": c.iterations,
            }
            for (user, mechanism), c in sorted(image.scram_credentials.items())
        ],
    }


def _image_from_json(doc: Mapping[str, Any]) -> ClusterImage:
    if doc.get("version") != FORMAT_VERSION:
        raise ConfigError(f"{FILE_NAME}: unsupported format version {doc.get('version')!r}")
    topics = {}
    for t in doc["topics"]:
        partitions = tuple(
            PartitionImage(p["index"], p["leader"], p["leader_epoch"], tuple(p["replicas"]), tuple(p["isr"]))
            for p in t["partitions"]
        )
        topics[t["name"]] = TopicImage(
            t["name"], uuid.UUID(t["topic_id"]), partitions, MappingProxyType(dict(t["configs"]))
        )
    return ClusterImage(
        cluster_id=doc["cluster_id"],
        topics=MappingProxyType(topics),
        broker_configs=MappingProxyType(dict(doc.get("broker_configs", {}))),
        producer_id_block_end=int(doc.get("producer_id_block_end", 0)),
        acls=tuple(
            AclEntry(
                int(a["resource_type"]), str(a["resource_name"]), int(a["pattern_type"]), str(a["principal"]),
                str(a["host"]), int(a["operation"]), int(a["permission_type"]),
            )
            for a in doc.get("acls", ())
        ),
        scram_credentials=MappingProxyType({
            (str(c["user"]), str(c["mechanism"])): ScramCredential(
                base64.b64decode(c["salt"]), base64.b64decode(c["stored_key"]), base64.b64decode(c["server_key"]),
                int(c["iterations"]),
            )
            for c in doc.get("scram_credentials", ())
        }),
    )


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

"""``meta.properties``: the identity file Kafka keeps in every log dir.

Format (Java properties, as Kafka writes it in KRaft mode)::

    #
    #<date>
    cluster.id=<22-char base64 uuid>
    directory.id=<22-char base64 uuid>
    node.id=<int>
    version=1

On start, every log dir's file must agree on ``cluster.id`` and ``node.id`` with each other and with
the configuration; a mismatch is refused (the dir belongs to another broker or cluster). Missing files
are written.
"""

from __future__ import annotations

import base64
import datetime
import pathlib
import uuid

from tidelog.common.config import parse_properties
from tidelog.common.errors import ConfigError
from tidelog.metadata.local_store import write_atomically

FILE_NAME = "meta.properties"


def new_kafka_uuid() -> str:
    """A random UUID in Kafka's URL-safe base64 form without padding (22 chars)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def ensure_meta_properties(log_dirs: list[pathlib.Path], node_id: int, cluster_id: str | None) -> str:
    """Check or create meta.properties in each dir; return the cluster id in force."""
    found: dict[pathlib.Path, dict[str, str]] = {}
    for directory in log_dirs:
        path = directory / FILE_NAME
        if path.exists():
            found[directory] = parse_properties(path.read_text())
    cluster_ids = {props.get("cluster.id") for props in found.values()}
    if cluster_id is not None:
        cluster_ids.add(cluster_id)
    if len(cluster_ids) > 1:
        raise ConfigError(f"log dirs belong to different clusters: {sorted(str(c) for c in cluster_ids)}")
    for directory, props in found.items():
        if props.get("node.id") != str(node_id):
            raise ConfigError(
                f"{directory / FILE_NAME} has node.id={props.get('node.id')} but node.id={node_id} is configured"
            )
    chosen = next(iter(cluster_ids)) if cluster_ids else None
    chosen = chosen or new_kafka_uuid()
    stamp = datetime.datetime.now(datetime.UTC).strftime("%a %b %d %H:%M:%S UTC %Y")
    for directory in log_dirs:
        if directory not in found:
            directory.mkdir(parents=True, exist_ok=True)
            text = (
                f"#\n#{stamp}\ncluster.id={chosen}\ndirectory.id={new_kafka_uuid()}\n"
                f"node.id={node_id}\nversion=1\n"
            )
            write_atomically(directory / FILE_NAME, text.encode())
    return chosen

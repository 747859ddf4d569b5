"""``partition.metadata``: the topic id a partition directory belongs to (Kafka's file, same format).

::

    version: 0
    topic_id: <the topic id, URL-safe base64 without padding, as Kafka prints Uuids>

A topic deleted and created again under the same name gets a new id; a broker that finds a directory
whose file names another id than the cluster's topic holds the old topic's data, and must not serve it.
Written with the usual temp-file + fsync + rename, so a crash leaves the old file or the new one.
"""

from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path

FILE_NAME = "partition.metadata"


def encode_topic_id(topic_id: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def read_topic_id(partition_dir: Path) -> uuid.UUID | None:
    """The id recorded in the directory, or None when there is no (readable) file."""
    try:
        text = (partition_dir / FILE_NAME).read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "topic_id":
            try:
                return uuid.UUID(bytes=base64.urlsafe_b64decode(value.strip() + "=="))
            except ValueError:
                return None
    return None


def write_topic_id(partition_dir: Path, topic_id: uuid.UUID) -> None:
    path = partition_dir / FILE_NAME
    tmp = path.with_name(FILE_NAME + ".tmp")
    with open(tmp, "w") as handle:
        handle.write(f"version: 0\ntopic_id: {encode_topic_id(topic_id)}\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)

"""The positions topic: where the agent keeps, per source, how far its lines are shipped.

Format: a compacted topic (``agent.positions.topic``, default ``__tidelog_agent_positions``, one
partition, created by the agent when missing). One record per source, written in the same Kafka
transaction as that source's lines, so a position is visible (read_committed) exactly when the
lines before it are::

    key   = "<agent.id>|<sourceId>"                       (UTF-8)
    value = {"agent": "<agent.id>", "source": "<sourceId>", "path": "/var/log/app.log",
             "topic": "app-logs", "next_generation": 3,
             "generations": [{"generation": 2, "dev": 2049, "ino": 1234, "offset": 8192,
                              "head_len": 1024, "head_crc": 305419896}]}   (JSON)

``offset`` is the byte offset just past the last shipped record of that generation (where reading
resumes); the generations listed are those not yet finished (see files.py). The agent reads the topic
with isolation.level=read_committed after ``init_transactions()``, which has aborted whatever its
previous incarnation left open, up to the high watermark taken then: the last value per key wins.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Message

from tidelog.agent.files import SavedGeneration
from tidelog.clients.transactional import ReadError, read_to_end, shared_settings


class PositionsError(Exception):
    """The positions topic could not be read to its end."""


@dataclass(frozen=True)
class SavedSource:
    source_id: str
    path: str
    topic: str
    next_generation: int
    generations: list[SavedGeneration]


def key_of(agent_id: str, source_id: str) -> bytes:
    return f"{agent_id}|{source_id}".encode()


def encode(agent_id: str, source: SavedSource) -> bytes:
    return json.dumps({
        "agent": agent_id, "source": source.source_id, "path": source.path, "topic": source.topic,
        "next_generation": source.next_generation, "generations": [g.to_json() for g in source.generations],
    }, separators=(",", ":")).encode()


def decode(value: bytes) -> tuple[str, SavedSource]:
    return from_json(json.loads(value))


def from_json(data: dict[str, Any]) -> tuple[str, SavedSource]:
    return data["agent"], SavedSource(str(data["source"]), str(data["path"]), str(data["topic"]),
                                      int(data["next_generation"]),
                                      [SavedGeneration.from_json(g) for g in data["generations"]])


def consumer_settings(kafka: Mapping[str, Any]) -> dict[str, Any]:
    return {**shared_settings(kafka), "group.id": "tidelog-agent-positions", "enable.auto.commit": False,
            "isolation.level": "read_committed", "enable.partition.eof": True}


def load(kafka: Mapping[str, Any], topic: str, agent_id: str, timeout: float = 60.0) -> dict[str, SavedSource]:
    """The committed position of every source of ``agent_id``: read the topic to its high watermark."""
    found: dict[str, SavedSource] = {}

    def take(message: Message) -> None:
        try:
            owner, source = decode(message.value() or b"")
        except (ValueError, KeyError, TypeError) as exc:
            raise PositionsError(f"{topic} [{message.partition()}] offset {message.offset()}: not a "
                                 f"position record ({exc!r}); delete it or use another positions.topic") from None
        if owner == agent_id:
            found[source.source_id] = source

    try:
        read_to_end(shared_settings(kafka), topic, None, take, timeout)
    except ReadError as exc:
        raise PositionsError(str(exc)) from None
    return found

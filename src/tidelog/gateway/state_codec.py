"""The state topic's records: one per (topic, sourceId), compacted, written in the data's transaction.

Key: the UTF-8 JSON array ``["<topic>", "<sourceId>"]`` (compact separators), unambiguous whatever
characters the names hold. Value: the UTF-8 JSON object ``{"v": 1, "seqno": N, "partition": P}``. A record whose key or value does not decode is skipped with a warning by the loader
(never fatal: one bad record must not take a shard down), and a null value (tombstone) forgets the
source.

Shard: a source's state lives in partition ``shard_of(key, state_partitions)`` of the state topic
(murmur2 of the key, as Kafka's partitioner), so a shard is one state partition, and the shard's
owner is the only writer of that partition (through its transactional id, ``transactional_id``).
"""

from __future__ import annotations

import json

from tidelog.gateway.seqno import SourceState, default_partition

VERSION = 1


def state_key(topic: str, source_id: str) -> bytes:
    return json.dumps([topic, source_id], separators=(",", ":"), ensure_ascii=False).encode()


def decode_key(key: bytes) -> tuple[str, str]:
    value = json.loads(key)
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)):
        raise ValueError("state key is not [topic, sourceId]")
    return value[0], value[1]


def encode_state(state: SourceState) -> bytes:
    return json.dumps({"v": VERSION, "seqno": state.seqno, "partition": state.partition},
                      separators=(",", ":")).encode()


def decode_state(value: bytes) -> SourceState:
    obj = json.loads(value)
    if not isinstance(obj, dict) or obj.get("v") != VERSION:
        raise ValueError(f"state value of an unknown version: {str(obj)[:60]}")
    fields = [obj.get("seqno"), obj.get("partition")]
    ints = [x for x in fields if isinstance(x, int) and not isinstance(x, bool) and x >= 0]
    if len(ints) != 2:
        raise ValueError("state value fields are not non-negative integers")
    return SourceState(*ints)


def shard_of(key: bytes, state_partitions: int) -> int:
    return default_partition(key, state_partitions)


def transactional_id(prefix: str, shard: int) -> str:
    return f"{prefix}-shard-{shard}"

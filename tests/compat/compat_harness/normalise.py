"""Normalise a broker's observations, then compare two of them field by field.

Normalisation rules live in ``allowed_differences.toml`` (``[[normalise]]`` entries: a field name,
an action, a reason). Actions:

``drop``
    the field is removed (throttle times: each broker computes its own).
``token:CATEGORY``
    each distinct value becomes ``CATEGORY#n`` in order of first appearance within one broker's
    transcript, so identities are compared rather than values: a topic id that changes after a
    re-create still shows, a node id of 1 on one side and 3 on the other does not. Negative
    numbers, empty strings, ``None`` and the all-zero UUID are kept as they are (they mean "none").
``mask:LABEL``
    any value other than ``None``, ``""`` or a negative number becomes ``<LABEL>`` (host names, ports,
    human-readable error messages).
``records``
    record-batch bytes are decoded into batch headers and records (see ``decode_batches``) so that
    a difference names the batch field; the CRC is left out (it covers the producer id, which is a
    token) and every batch's producer id is tokenised in the ``pid`` category. A compressed batch's
    records are decompressed (by kafka-python, a third party) and its length is left out: two
    compressor implementations need not write the same bytes.

Lists of entities that carry a natural key (``name``, ``topic``, ``resource_name``, ``group_id``, ``api_key``,
``partition_index``, ``partition``, ``index``, ``member_id``) are turned into mappings keyed by it, written
``[key]`` in paths: brokers may order topics, partitions or config entries as they like, clients do
not depend on it.
"""

from __future__ import annotations

import re
import struct
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import zip_longest
from typing import Any

ZERO_UUID = "00000000-0000-0000-0000-000000000000"
KEY_FIELDS = ("name", "topic", "resource_name", "group_id", "api_key", "partition_index", "partition", "index",
              "member_id")
ABSENT = "<absent>"


@dataclass(frozen=True)
class Rule:
    field: str
    action: str
    reason: str


class Normaliser:
    """Applies the rules to one broker's transcript; tokens are numbered per instance."""

    def __init__(self, rules: Iterable[Rule]) -> None:
        self.rules = {rule.field: rule for rule in rules}
        self._tokens: dict[str, dict[Any, str]] = {}

    def token(self, category: str, value: Any) -> Any:
        if value is None or value == "" or value == ZERO_UUID or (isinstance(value, int) and value < 0):
            return value
        seen = self._tokens.setdefault(category, {})
        if value not in seen:
            seen[value] = f"{category}#{len(seen) + 1}"
        return seen[value]

    def apply(self, value: Any) -> Any:
        if isinstance(value, dict):
            out: dict[str, Any] = {}
            for name, item in value.items():
                rule = self.rules.get(name)
                if rule is None:
                    out[name] = self.apply(item)
                elif rule.action != "drop":
                    out[name] = self._act(rule.action, item)
            return out
        if isinstance(value, list):
            return _keyed([self.apply(item) for item in value])
        return value

    def _act(self, action: str, value: Any) -> Any:
        kind, _, argument = action.partition(":")
        if kind == "token":
            if isinstance(value, list):
                return [self.token(argument, item) for item in value]
            return self.token(argument, value)
        if kind == "mask":
            if value is None or value == "" or (isinstance(value, int) and value < 0):
                return value
            return f"<{argument}>"
        if kind == "records":
            return None if value is None else self._records(value)
        raise ValueError(f"unknown normalisation action {action!r}")

    def _records(self, data: bytes) -> list[Any]:
        batches = decode_batches(data)
        for batch in batches:
            if "producer_id" in batch:
                batch["producer_id"] = self.token("pid", batch["producer_id"])
        return batches


def _keyed(items: list[Any]) -> Any:
    """A list of dicts sharing a unique natural key becomes a ``{"[key]": item}`` mapping."""
    if not items or not all(isinstance(item, dict) for item in items):
        return items
    for field in KEY_FIELDS:
        if all(field in item for item in items):
            keys = [f"[{item[field]}]" for item in items]
            if len(set(keys)) == len(keys):
                return dict(sorted(zip(keys, items, strict=True), key=lambda pair: _sort_key(pair[0])))
            return items
    return items


def _sort_key(key: str) -> tuple[int, Any]:
    inner = key[1:-1]
    return (0, int(inner)) if re.fullmatch(r"-?\d+", inner) else (1, inner)


# ---------------------------------------------------------------------------------------------------
# record batches


_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")


def decode_batches(data: bytes) -> list[dict[str, Any]]:
    """Batch headers and (uncompressed) records of magic-2 batches; a trailing partial batch is
    reported as ``{"partial_batch_bytes": n}``; a magic other than 2 as ``{"magic": m, ...}``."""
    batches: list[dict[str, Any]] = []
    pos = 0
    while pos < len(data):
        if pos + 17 > len(data):
            batches.append({"partial_batch_bytes": len(data) - pos})
            break
        base_offset, length, leader_epoch, magic = struct.unpack_from(">qiib", data, pos)
        end = pos + 12 + length
        if end > len(data):
            batches.append({"partial_batch_bytes": len(data) - pos})
            break
        if magic != 2:
            batches.append({"base_offset": base_offset, "magic": magic, "bytes": length + 12})
            pos = end
            continue
        (_, _, _, _, _crc, attributes, last_delta, first_ts, max_ts, pid, epoch, base_seq, count) = (
            _BATCH_HEADER.unpack_from(data, pos)
        )
        batch: dict[str, Any] = {
            "base_offset": base_offset, "batch_length": length, "partition_leader_epoch": leader_epoch,
            "magic": magic, "attributes": attributes, "last_offset_delta": last_delta,
            "base_timestamp": first_ts, "max_timestamp": max_ts, "producer_id": pid,
            "producer_epoch": epoch, "base_sequence": base_seq, "record_count": count,
        }
        if attributes & 0x07 == 0:
            batch["records"] = _records(data[pos + _BATCH_HEADER.size : end], count)
        else:
            batch["batch_length"] = "<compressed>"
            batch["records"] = _compressed_records(data[pos:end], base_offset, first_ts)
        batches.append(batch)
        pos = end
    return batches


def _compressed_records(batch: bytes, base_offset: int, base_timestamp: int) -> list[dict[str, Any]]:
    """The records of a compressed batch, in ``_records``'s form (record attributes are always 0)."""
    with warnings.catch_warnings():  # kafka-python 3 imports importlib.resources' deprecated helpers
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.record.default_records import DefaultRecordBatch
    return [
        {
            "attributes": 0, "timestamp_delta": r.timestamp - base_timestamp, "offset_delta": r.offset - base_offset,
            "key": r.key, "value": r.value, "headers": [[k.encode(), v] for k, v in r.headers],
        }
        for r in DefaultRecordBatch(batch)
    ]


def _records(buf: bytes, count: int) -> list[dict[str, Any]]:
    records = []
    offset = 0
    for _ in range(count):
        _length, offset = _read_varint(buf, offset)
        attributes = buf[offset]
        offset += 1
        ts_delta, offset = _read_varint(buf, offset)
        offset_delta, offset = _read_varint(buf, offset)
        key, offset = _read_bytes(buf, offset)
        value, offset = _read_bytes(buf, offset)
        header_count, offset = _read_varint(buf, offset)
        headers = []
        for _ in range(header_count):
            header_key, offset = _read_bytes(buf, offset)
            header_value, offset = _read_bytes(buf, offset)
            headers.append([header_key, header_value])
        records.append({
            "attributes": attributes, "timestamp_delta": ts_delta, "offset_delta": offset_delta,
            "key": key, "value": value, "headers": headers,
        })
    return records


def _read_varint(buf: bytes, offset: int) -> tuple[int, int]:
    """A zig-zag varint (Kafka's signed varint/varlong) and the offset after it."""
    shift = raw = 0
    while True:
        byte = buf[offset]
        offset += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), offset
        shift += 7


def _read_bytes(buf: bytes, offset: int) -> tuple[bytes | None, int]:
    length, offset = _read_varint(buf, offset)
    if length < 0:
        return None, offset
    return bytes(buf[offset : offset + length]), offset + length


# ---------------------------------------------------------------------------------------------------
# diffing


@dataclass(frozen=True)
class Difference:
    path: str
    kafka: Any
    tidelog: Any

    def __str__(self) -> str:
        return f"{self.path}: kafka={show(self.kafka)} tidelog={show(self.tidelog)}"


def show(value: Any, limit: int = 160) -> str:
    if isinstance(value, bytes):
        text = repr(value) if len(value) <= 48 else f"<{len(value)} bytes>"
    else:
        text = value if value == ABSENT else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def diff(kafka: Any, tidelog: Any, path: str = "") -> list[Difference]:
    """Every leaf where the two normalised values differ, with its path."""
    if isinstance(kafka, Mapping) and isinstance(tidelog, Mapping):
        out: list[Difference] = []
        for key in [*kafka, *(k for k in tidelog if k not in kafka)]:
            out += diff(kafka.get(key, ABSENT), tidelog.get(key, ABSENT), _join(path, key))
        return out
    if isinstance(kafka, list) and isinstance(tidelog, list):
        out = []
        for index, (left, right) in enumerate(zip_longest(kafka, tidelog, fillvalue=ABSENT)):
            out += diff(left, right, f"{path}[{index}]")
        return out
    if type(kafka) is not type(tidelog) or kafka != tidelog:
        return [Difference(path, kafka, tidelog)]
    return []


def _join(path: str, key: str) -> str:
    if key.startswith("["):
        return f"{path}{key}"
    return f"{path}.{key}" if path else key

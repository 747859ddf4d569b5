"""The staged API's durable local spool: one append-only file per staged transaction, and a small
"outcome" file per finished one.

Layout of ``gateway.staged.dir``::

    <id>.spool    the transaction while it is open: its chunks and the steps taken, append-only
    <id>.done     a finished transaction's outcome (committed or expired), JSON, kept for
                  ``gateway.staged.timeout.ms`` so that a repeated /commit gets the same answer

A spool file is a sequence of frames::

    frame   := length:uint32 crc:uint32 payload       (big-endian; crc = CRC-32C of payload)
    payload := UTF-8 JSON object with a "type"

Frame types, in the order they can appear (bytes are base64 in JSON):

- ``begin`` (first, once): ``transactionId``, ``topic`` (the data topic, dc prefix applied),
  ``partition``, ``transactionalId`` (the Kafka one, so a restart fences the same one), ``createdMs``;
- ``chunk``: ``seqno``, ``records`` ``[{"k": key, "v": value, "h": [[name, value], ...]}]``;
- ``requesting``: about to open a Kafka transaction under ``transactionalId`` (one may be open from
  here on, so recovery must fence);
- ``requested``: every record was produced and acknowledged inside the open transaction:
  ``first`` and ``last`` offset in the partition, ``records``;
- ``committing``: about to send the commit; the outcome is unknown until ``<id>.done`` exists;
- ``aborted``: the Kafka transaction was aborted (``reason``); the chunks are intact, the
  transaction is back to ``stored`` and /commit_request may be called again.

Every frame is fsynced before the call that wrote it returns (and the folder after a file is
created or renamed), so an acknowledged /store survives kill -9 and power loss. A frame cut short or
failing its CRC can only be the last one, written by a call that never answered: ``read_spool``
stops there and ``Spool.open`` cuts the file back to the last whole frame.

A ``.done`` file is written whole (temporary name, fsync, rename, fsync of the folder) before the
spool is deleted; a crash between the two leaves both, and the ``.done`` file wins.
"""

from __future__ import annotations

import base64
import json
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import crc32c

from tidelog.gateway.model import Record

_FRAME = struct.Struct(">II")
MAX_FRAME = 1 << 30

STORED, REQUESTING, REQUESTED, COMMITTING = "stored", "requesting", "requested", "committing"


class SpoolCorrupt(ValueError):
    """A spool file's first frame is missing or unreadable: it cannot be recovered."""


@dataclass
class Replayed:
    """What a spool file says: the transaction's facts and the state its frames leave it in."""

    transaction_id: str
    topic: str
    partition: int
    transactional_id: str
    created_ms: int
    state: str = STORED
    last_seqno: int = -1
    chunks: int = 0
    records: int = 0
    first_offset: int = -1
    last_offset: int = -1
    aborted_reason: str = ""
    valid_bytes: int = 0  # length of the whole frames; anything after is a torn tail
    frames: list[dict[str, Any]] = field(default_factory=list, repr=False)


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def encode_frame(payload: dict[str, Any]) -> bytes:
    body = json.dumps(payload, separators=(",", ":")).encode()
    return _FRAME.pack(len(body), crc32c.crc32c(body)) + body


def chunk_frame(seqno: int, records: tuple[Record, ...]) -> dict[str, Any]:
    return {"type": "chunk", "seqno": seqno,
            "records": [{"k": _b64(r.key), "v": _b64(r.value), "h": [[n, _b64(v)] for n, v in r.headers]}
                        for r in records]}


def chunk_records(frame: dict[str, Any]) -> Iterator[tuple[bytes | None, bytes | None,
                                                          list[tuple[str, str | bytes | None]]]]:
    """(key, value, headers) of each record of a ``chunk`` frame."""
    for record in frame["records"]:
        yield _unb64(record["k"]), _unb64(record["v"]), [(n, _unb64(v) or b"") for n, v in record["h"]]


def _frames(data: bytes) -> Iterator[tuple[dict[str, Any], int]]:
    """Whole, CRC-checked frames and the position after each; stops at the first bad one."""
    pos = 0
    while pos + _FRAME.size <= len(data):
        length, crc = _FRAME.unpack_from(data, pos)
        end = pos + _FRAME.size + length
        if length > MAX_FRAME or end > len(data):
            return
        body = data[pos + _FRAME.size:end]
        if crc32c.crc32c(body) != crc:
            return
        try:
            payload = json.loads(body)
        except ValueError:
            return
        if not isinstance(payload, dict):
            return
        yield payload, end
        pos = end


def read_spool(path: Path, *, keep_frames: bool = False) -> Replayed:
    data = path.read_bytes()
    replayed: Replayed | None = None
    for frame, end in _frames(data):
        kind = frame.get("type")
        if replayed is None:
            if kind != "begin":
                break
            replayed = Replayed(frame["transactionId"], frame["topic"], frame["partition"],
                                frame["transactionalId"], frame["createdMs"])
        elif kind == "chunk":
            replayed.last_seqno = frame["seqno"]
            replayed.chunks += 1
            replayed.records += len(frame["records"])
        elif kind in (REQUESTING, COMMITTING):
            replayed.state = kind
        elif kind == REQUESTED:
            replayed.state = REQUESTED
            replayed.first_offset, replayed.last_offset = frame["first"], frame["last"]
        elif kind == "aborted":
            replayed.state = STORED
            replayed.aborted_reason = frame.get("reason", "")
            replayed.first_offset = replayed.last_offset = -1
        if keep_frames and kind == "chunk":
            replayed.frames.append(frame)
        replayed.valid_bytes = end
    if replayed is None:
        raise SpoolCorrupt(f"{path}: no readable begin frame")
    return replayed


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Spool:
    """The spool folder: create, append to, read, and finish transactions' files. Blocking I/O:
    callers run it off the event loop. One caller at a time per transaction (the staged manager
    holds the transaction's lock)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def open(self) -> tuple[list[Replayed], dict[str, dict[str, Any]], list[str]]:
        """Recover the folder: (open transactions, finished outcomes by id, problems to log).
        Torn tails are cut; a spool whose outcome file exists is deleted."""
        self.folder.mkdir(parents=True, exist_ok=True)
        problems: list[str] = []
        done: dict[str, dict[str, Any]] = {}
        for path in self.folder.glob("*.done"):
            try:
                outcome = json.loads(path.read_text())
                if not isinstance(outcome, dict) or outcome.get("state") not in ("committed", "expired"):
                    raise ValueError("not an outcome")
                done[path.stem] = outcome
            except ValueError as exc:
                problems.append(f"{path}: unreadable outcome file, removed ({exc})")
                path.unlink()
        for path in self.folder.glob("*.tmp"):
            path.unlink()
        open_: list[Replayed] = []
        for path in self.folder.glob("*.spool"):
            if path.stem in done:
                path.unlink()
                continue
            try:
                replayed = read_spool(path)
            except (SpoolCorrupt, KeyError, TypeError) as exc:
                problems.append(f"{path}: {exc}; moved aside to {path.name}.corrupt")
                path.rename(path.with_name(path.name + ".corrupt"))
                continue
            size = path.stat().st_size
            if replayed.valid_bytes < size:
                problems.append(f"{path}: cut a torn tail of {size - replayed.valid_bytes} bytes (never acknowledged)")
                with path.open("r+b") as handle:
                    handle.truncate(replayed.valid_bytes)
                    os.fsync(handle.fileno())
            open_.append(replayed)
        return open_, done, problems

    def path(self, transaction_id: str) -> Path:
        return self.folder / f"{transaction_id}.spool"

    def create(self, begin: dict[str, Any]) -> None:
        path = self.path(begin["transactionId"])
        with path.open("xb") as handle:
            handle.write(encode_frame({"type": "begin", **begin}))
            handle.flush()
            os.fsync(handle.fileno())
        _fsync_dir(self.folder)

    def append(self, transaction_id: str, payload: dict[str, Any]) -> None:
        with self.path(transaction_id).open("ab") as handle:
            handle.write(encode_frame(payload))
            handle.flush()
            os.fsync(handle.fileno())

    def chunks(self, transaction_id: str) -> list[dict[str, Any]]:
        return read_spool(self.path(transaction_id), keep_frames=True).frames

    def finish(self, transaction_id: str, outcome: dict[str, Any]) -> None:
        """Write the outcome file, then delete the spool (see the module docstring for the order)."""
        final = self.folder / f"{transaction_id}.done"
        temporary = final.with_suffix(".tmp")
        with temporary.open("w") as handle:
            json.dump(outcome, handle)
            handle.flush()
            os.fsync(handle.fileno())
        temporary.rename(final)
        _fsync_dir(self.folder)
        self.path(transaction_id).unlink(missing_ok=True)

    def forget(self, transaction_id: str) -> None:
        (self.folder / f"{transaction_id}.done").unlink(missing_ok=True)

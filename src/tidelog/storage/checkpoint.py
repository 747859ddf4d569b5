"""Checkpoint files: small text files replaced atomically.

Format (Kafka's ``CheckpointFile``), UTF-8, ``\\n`` line ends::

    0                      <- version
    2                      <- number of entries that follow
    orders 0 1200          <- one entry per line, fields separated by single spaces
    orders 1 880

Two kinds live in tidelog:

* per log dir, ``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint``: entries are
  ``<topic> <partition> <offset>`` (:class:`OffsetCheckpointFile`);
* per partition directory, ``leader-epoch-checkpoint``: entries are ``<epoch> <start offset>``
  (read and written by :mod:`tidelog.storage.leader_epoch` through :func:`write_entries`).

Writes go to ``<name>.tmp``, which is fsynced, renamed over the file, and then the directory is
fsynced, so a crash leaves either the old or the new content, never a mix. A reader treats a
malformed file as a :class:`CheckpointError` (callers decide whether to fall back to a full scan).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

VERSION = 0


class CheckpointError(ValueError):
    """A checkpoint file exists but cannot be parsed."""


def fsync_dir(path: Path) -> None:
    """fsync a directory so that renames and creations inside it are durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data``: write a temp file, fsync, rename, fsync the directory.

    With ``durable=False`` the two fsyncs are left out: the rename still makes the replacement
    atomic (a reader, or a restart, sees the old file or the new one, whole), but after a power loss
    it may be the old one. For files whose content the caller makes durable later.
    """
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


def write_entries(path: Path, entries: Iterable[tuple[object, ...]], *, durable: bool = True) -> None:
    """Write a versioned checkpoint whose entries are tuples of space-free fields."""
    rows = [" ".join(str(field) for field in entry) for entry in entries]
    text = f"{VERSION}\n{len(rows)}\n" + "".join(row + "\n" for row in rows)
    write_atomically(path, text.encode(), durable=durable)


def read_entries(path: Path, fields: int) -> list[list[str]]:
    """Read a checkpoint written by :func:`write_entries`; a missing file reads as no entries."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"{path}: not UTF-8") from exc
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2 or lines[0].strip() != str(VERSION):
        raise CheckpointError(f"{path}: bad version line")
    try:
        count = int(lines[1])
    except ValueError:
        raise CheckpointError(f"{path}: bad count line") from None
    body = lines[2:]
    if count != len(body):
        raise CheckpointError(f"{path}: {count} entries announced, {len(body)} present")
    rows = [line.split(" ") for line in body]
    if any(len(row) != fields for row in rows):
        raise CheckpointError(f"{path}: expected {fields} fields per entry")
    return rows


class OffsetCheckpointFile:
    """``<topic> <partition> <offset>`` checkpoints of one log dir."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, offsets: Mapping[tuple[str, int], int]) -> None:
        write_entries(self.path, ((t, p, o) for (t, p), o in sorted(offsets.items())))

    def read(self) -> dict[tuple[str, int], int]:
        out: dict[tuple[str, int], int] = {}
        for topic, partition, offset in read_entries(self.path, 3):
            try:
                out[(topic, int(partition))] = int(offset)
            except ValueError:
                raise CheckpointError(f"{self.path}: bad entry {topic} {partition} {offset}") from None
        return out

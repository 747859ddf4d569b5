"""A segment roll split in two: decided under the log's lock, its files made on another thread.

A roll creates the next segment's four files (``<base>.log``, ``.index``, ``.timeindex``,
``.txnindex``, empty, named by the new base offset = the log end offset), writes the sealed
segment's pending index entries and the producer-state snapshot ``<base>.snapshot``. Each of those
is a call that may wait for the disk (a file creation waits for the filesystem journal, a write for
dirty-page throttling, an fsync for the device). The broker's event loop must not make them, so the
broker rolls a partition in three steps (``PartitionLog.begin_roll`` / ``complete_roll``):

1. **plan** (on the loop, under the log's lock, no system call): the base offset is the log end
   offset; a :class:`RollPlan` is recorded on the log. From now on nothing is appended to the log
   until the plan is settled: the broker's appends to the partition wait for the roll (awaiting it,
   so the loop serves everybody else); any other write to the log (a follower's append, a
   transaction marker, a truncation, a close) *settles* the plan first, on its own thread.
2. **files** (the log dir's pool, no lock): :meth:`RollPlan.make_files` creates the new segment.
3. **install** (the same pool thread, under the lock, memory and page-cache writes only): the old
   segment is sealed, its pending index entries written, the producer state at the base encoded,
   the new segment becomes the active one. The snapshot bytes are then written off the lock: a
   ``<name>.tmp`` file, fsynced, renamed into place under the lock only if no truncation rewound
   producer state meanwhile (``snapshot_epoch``), then the directory fsynced.

Whoever settles a plan that the pool has not started yet *claims* it and makes the files itself;
one the pool is making is waited for (the pool needs no lock to finish it, so this cannot
deadlock). A claim is one compare-and-set under the plan's own small lock: exactly one thread
makes a plan's files.

Invariants, and why a ``kill -9`` at any point recovers:

- While a plan's files may exist but are not installed, the log's offsets all lie below the plan's
  base (nothing is appended until the plan is settled). A crash leaves an empty ``<base>.log`` (with
  or without its index files) after a segment whose offsets are all below ``base``: on restart it is
  a valid, empty active segment, so the log end offset is unchanged and nothing is lost.
- A crash before the snapshot is renamed into place leaves at most ``<base>.snapshot.tmp``, which
  the log deletes on open (every ``*.tmp``); producer state then comes from the previous snapshot
  and a replay of the batch headers after it (log.py, "Opening").
- A snapshot is renamed to ``<base>.snapshot`` only while the log's ``snapshot_epoch`` is the one it
  was encoded under: a truncation (which rewinds producer state and deletes the snapshots above the
  new end) bumps it, so a late write can never leave a snapshot describing a history that was cut.

File formats are unchanged: the segment files are segment.py's and index.py's, the snapshot is
producer_state.py's.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from tidelog.storage.segment import LogSegment, file_stem

_PENDING, _MAKING, _MADE = 0, 1, 2


@dataclass(eq=False)
class RollPlan:
    """A roll decided at ``base`` (the log end offset then) whose files are not installed yet."""

    directory: Path
    old: LogSegment
    base: int
    index_bytes: int
    now_ms: int
    new: LogSegment | None = None
    error: OSError | None = None
    _state: int = field(default=_PENDING, init=False)
    _state_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _made: threading.Event = field(default_factory=threading.Event, init=False, repr=False)

    def claim(self) -> bool:
        """True for exactly one caller: the one that must make the files."""
        with self._state_lock:
            if self._state != _PENDING:
                return False
            self._state = _MAKING
            return True

    def make_files(self) -> None:
        """Create the new segment's files (a claimed plan only); an OSError is kept for the installer."""
        try:
            self.new = LogSegment(self.directory, self.base, self.index_bytes, load=False, now_ms=self.now_ms)
        except OSError as exc:
            self.error = exc
            self._remove_partial_files()
        finally:
            with self._state_lock:
                self._state = _MADE
            self._made.set()

    def settle_files(self) -> None:
        """Make sure the files are made: by this thread if nobody started, else wait for the maker."""
        if self.claim():
            self.make_files()
        else:
            self._made.wait()

    def _remove_partial_files(self) -> None:
        """A failed creation may have left some of the files: none may outlive the plan (an empty
        ``<base>.log`` left behind would claim offsets the old segment goes on to take)."""
        stem = file_stem(self.base)
        for suffix in (".log", ".index", ".timeindex", ".txnindex"):
            try:
                (self.directory / f"{stem}{suffix}").unlink(missing_ok=True)
            except OSError:
                continue

    def discard(self) -> None:
        """Remove files made for a plan that will not be installed (the log went offline)."""
        if self.new is not None:
            try:
                self.new.delete_files()
                self.new.close()
            except OSError:
                pass


@dataclass(frozen=True)
class PendingSnapshot:
    """A rolled snapshot encoded under the lock, to be written off it."""

    path: Path
    data: bytes
    epoch: int


def write_snapshot_tmp(snapshot: PendingSnapshot) -> Path:
    """Write and fsync ``<snapshot>.tmp``; the caller renames it into place (or drops it)."""
    tmp = snapshot.path.with_name(snapshot.path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(snapshot.data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    return tmp

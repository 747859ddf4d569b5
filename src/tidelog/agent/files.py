"""Following one path through renames, copytruncate and truncation: a :class:`Source` and its generations.

A source is a path (``sourceId = host:path``). The files that have had that path, one after another,
are its *generations*, numbered from 0. A generation is pinned to an inode (``dev``, ``ino``) and an
open descriptor, and fingerprinted by the CRC-32 of its first bytes (up to 1 KiB: ``head_len``,
``head_crc``), so that a file can be recognised after a rename or a copy. Lines are read from the
oldest generation that is not finished; a later one waits until then, so a source's records come out
in (generation, byte offset) order, the order in which they were written.

How rotation is seen (each poll compares ``stat(path)`` with the newest generation):

* **Rename** (``mv app.log app.log.1``, then a new ``app.log``; or the file deleted): the path names
  another inode, or none. The generation keeps its descriptor (a renamed, even deleted, file stays
  readable through it) and is read until it has been quiet for ``rotate.wait.ms`` (a writer may
  still append before reopening), then it is *sealed*: its end, a last line without a newline
  included, is shipped, and it is *finished*. The new file at the path is the next generation.
* **Copytruncate** (``cp app.log app.log.1; : > app.log``) and plain truncation: the same inode is
  shorter than what was read, or its first bytes changed. The generation then continues in the
  *copy*: a file in the same folder whose head has the generation's fingerprint and which holds at
  least the committed bytes (the newest such file). Without a copy, what was not yet read is gone;
  this is logged. The truncated file, read from byte 0, is the next generation.

Positions (what a restart resumes from) are the ends of shipped records (``LineSplitter.committed_end``)
per generation; the shipper saves them with the records, in one transaction (see shipper.py). After
an aborted transaction every generation is *rewound* to its last committed position and read again.
A finished generation is closed and forgotten once its last position is committed.

At start (:meth:`Source.restore`) each saved generation is looked for: at the path (same inode, same
head, not shorter than the position), then in the path's folder by inode (renamed while the agent was
down), then by fingerprint (a copy made by copytruncate while it was down). A generation found
nowhere is reported as lost when it had unread bytes.
"""

from __future__ import annotations

import logging
import os
import stat
import zlib
from dataclasses import dataclass, field
from typing import Any

from tidelog.agent.config import FileGroup
from tidelog.agent.lines import Line, LineSplitter

log = logging.getLogger(__name__)

HEAD_BYTES = 1024
READ_CHUNK = 256 * 1024


@dataclass(frozen=True, slots=True)
class SavedGeneration:
    """A generation's committed state, as kept in the positions topic."""

    number: int
    dev: int
    ino: int
    offset: int
    head_len: int
    head_crc: int

    def to_json(self) -> dict[str, int]:
        return {"generation": self.number, "dev": self.dev, "ino": self.ino, "offset": self.offset,
                "head_len": self.head_len, "head_crc": self.head_crc}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SavedGeneration:
        return cls(int(data["generation"]), int(data["dev"]), int(data["ino"]), int(data["offset"]),
                   int(data["head_len"]), int(data["head_crc"]))


def _head(fd: int, length: int) -> tuple[int, int]:
    data = os.pread(fd, length, 0)
    return len(data), zlib.crc32(data)


@dataclass(eq=False)
class Generation:
    """One file that had the source's path (see the module docstring)."""

    number: int
    dev: int
    ino: int
    fd: int | None
    splitter: LineSplitter
    committed: int
    head_len: int = 0
    head_crc: int = 0
    sealed: bool = False  # nothing more will be appended: read to the end, then finish
    finished: bool = False  # sealed, read to the end, its last record out
    rotated_at: float | None = None
    last_growth: float = 0.0
    seen_size: int = -1
    seen_mtime: int = -1

    def head_matches(self, fd: int) -> bool:
        return self.head_len == 0 or _head(fd, self.head_len) == (self.head_len, self.head_crc)

    def saved(self) -> SavedGeneration:
        return SavedGeneration(self.number, self.dev, self.ino, self.splitter.committed_end, self.head_len,
                               self.head_crc)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


@dataclass(eq=False)
class Source:
    """One path and the generations of files that had it."""

    source_id: str
    path: str
    group: FileGroup
    generations: list[Generation] = field(default_factory=list)
    next_generation: int = 0
    lost_bytes: int = 0  # unread bytes of files that vanished (logged as they are found)

    # ---- opening -----------------------------------------------------------------------------------

    def _new_generation(self, fd: int, st: os.stat_result, offset: int, now: float,
                        number: int | None = None) -> Generation:
        if number is None:
            number = self.next_generation
        self.next_generation = max(self.next_generation, number + 1)
        gen = Generation(number, st.st_dev, st.st_ino, fd,
                         LineSplitter(offset, self.group.max_line_bytes, self.group.start_pattern), offset,
                         last_growth=now)
        return gen

    def open_path(self, now: float) -> bool:
        """Open the file at the path as the next generation, from byte 0. False when there is none."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
            if isinstance(exc, PermissionError):
                log.warning("%s: cannot open: %s", self.path, exc)
            return False
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            return False
        self.generations.append(self._new_generation(fd, st, 0, now))
        log.info("%s: generation %d is inode %d", self.source_id, self.generations[-1].number, st.st_ino)
        return True

    def restore(self, saved: list[SavedGeneration], next_generation: int, now: float) -> None:
        """Find the files of saved generations again after a restart (see the module docstring)."""
        self.next_generation = next_generation
        for index, item in enumerate(saved):
            found = _locate(self.path, item)
            if found is None:
                if item.offset > 0 or item.head_len > 0:
                    log.warning("%s: generation %d (inode %d) is gone; what it held after byte %d is lost",
                                self.source_id, item.number, item.ino, item.offset)
                continue
            fd, at_path = found
            st = os.fstat(fd)
            gen = self._new_generation(fd, st, item.offset, now, item.number)
            gen.head_len, gen.head_crc = item.head_len, item.head_crc
            live = at_path and index == len(saved) - 1
            if not live:
                gen.sealed = True
                gen.rotated_at = now
            log.info("%s: generation %d resumes at byte %d of %s", self.source_id, gen.number, item.offset,
                     "the path" if at_path else "a renamed file or a copy")
            self.generations.append(gen)
        if not self.generations or self.generations[-1].rotated_at is not None:
            self.open_path(now)  # the file now at the path (renamed or truncated meanwhile) is new

    # ---- rotation ----------------------------------------------------------------------------------

    def check(self, now: float) -> None:
        """Compare the path with the newest generation: rename, deletion, truncation, a new file."""
        newest = self.generations[-1] if self.generations else None
        if newest is None or newest.rotated_at is not None:
            if newest is None or _path_identity(self.path) not in (None, (newest.dev, newest.ino)):
                self.open_path(now)
            return
        assert newest.fd is not None
        identity = _path_identity(self.path)
        if identity != (newest.dev, newest.ino):
            log.info("%s: renamed or deleted; generation %d is read until quiet", self.source_id, newest.number)
            newest.rotated_at = newest.last_growth = now
            if identity is not None:
                self.open_path(now)
            return
        st = os.fstat(newest.fd)
        # The mtime too: a truncation followed by as many bytes as before keeps the size.
        if (st.st_size, st.st_mtime_ns) != (newest.seen_size, newest.seen_mtime):
            if st.st_size < newest.splitter.offset or not newest.head_matches(newest.fd):
                self._truncated(newest, now)
                return
            newest.seen_size, newest.seen_mtime = st.st_size, st.st_mtime_ns

    def _truncated(self, gen: Generation, now: float) -> None:
        assert gen.fd is not None
        copy = _find_copy(self.path, gen, exclude_ino=gen.ino)
        os.close(gen.fd)
        gen.fd = None
        if copy is not None:
            gen.fd, name = copy
            log.info("%s: truncated; generation %d continues in its copy %s", self.source_id, gen.number, name)
        else:
            unread = max(0, gen.seen_size - gen.splitter.offset)
            self.lost_bytes += unread
            if unread:
                log.warning("%s: truncated with no copy beside it; %d unread bytes of generation %d are lost",
                            self.source_id, unread, gen.number)
            else:
                log.info("%s: truncated; generation %d had been read to its end", self.source_id, gen.number)
        gen.sealed = True
        gen.rotated_at = now
        self.open_path(now)

    # ---- reading -----------------------------------------------------------------------------------

    def read(self, budget: int, now: float, rotate_wait: float, multiline_timeout: float
             ) -> list[tuple[Generation, Line]]:
        """Up to about ``budget`` records, oldest generation first."""
        out: list[tuple[Generation, Line]] = []
        for gen in self.generations:
            if gen.finished:
                continue
            self._read_generation(gen, budget - len(out), now, out)
            if not gen.finished and gen.rotated_at is not None and not gen.sealed \
                    and now - gen.last_growth >= rotate_wait:
                gen.sealed = True
                self._read_generation(gen, budget - len(out), now, out)
            if not gen.finished:
                if gen.splitter.has_pending and now - gen.last_growth >= multiline_timeout:
                    out.extend((gen, line) for line in gen.splitter.flush_pending())
                break  # later generations wait for this one
        return out

    def _read_generation(self, gen: Generation, budget: int, now: float,
                         out: list[tuple[Generation, Line]]) -> None:
        # One chunk with records per call: the shipper visits every source in turn, so one file's
        # backlog does not hold the others back. A chunk inside one long line does not count.
        while budget > 0 and gen.fd is not None:
            data = os.pread(gen.fd, READ_CHUNK, gen.splitter.offset)
            if not data:
                break
            gen.last_growth = now
            lines = gen.splitter.feed(data)
            out.extend((gen, line) for line in lines)
            budget -= len(lines)
            if gen.head_len < HEAD_BYTES and gen.splitter.offset > gen.head_len:
                gen.head_len, gen.head_crc = _head(gen.fd, min(HEAD_BYTES, gen.splitter.offset))
            if lines:
                break
        if gen.sealed and budget > 0 and (gen.fd is None or gen.splitter.offset >= os.fstat(gen.fd).st_size):
            out.extend((gen, line) for line in gen.splitter.finish())
            gen.finished = True

    # ---- transactions ------------------------------------------------------------------------------

    def saved_state(self) -> list[SavedGeneration]:
        """The generations a restart needs, as they will be once the open transaction commits."""
        return [gen.saved() for gen in self.generations if not gen.finished]

    def committed(self) -> None:
        """The open transaction committed: positions move on, finished generations are let go."""
        for gen in self.generations:
            gen.committed = gen.splitter.committed_end
            if gen.finished:
                gen.close()
        self.generations = [gen for gen in self.generations if not gen.finished]

    def rewind(self) -> None:
        """The open transaction was aborted: read again from the committed positions."""
        for gen in self.generations:
            if gen.fd is None and gen.splitter.committed_end > gen.committed:
                log.warning("%s: generation %d was truncated without a copy; bytes %d..%d are lost with the "
                            "aborted transaction", self.source_id, gen.number, gen.committed,
                            gen.splitter.committed_end)
            gen.splitter = LineSplitter(gen.committed, self.group.max_line_bytes, self.group.start_pattern)
            gen.finished = False
            gen.seen_size = gen.seen_mtime = -1

    def close(self) -> None:
        for gen in self.generations:
            gen.close()


def _path_identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def _open_if(path: str, check: Any) -> int | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    if check(fd, os.fstat(fd)):
        return fd
    os.close(fd)
    return None


def _siblings(path: str) -> list[os.DirEntry[str]]:
    folder = os.path.dirname(path) or "."
    try:
        return [entry for entry in os.scandir(folder) if entry.is_file(follow_symlinks=False)]
    except OSError:
        return []


def _find_copy(path: str, gen: Generation | SavedGeneration, exclude_ino: int | None = None
               ) -> tuple[int, str] | None:
    """The newest file beside ``path`` with the generation's head and at least its committed bytes."""
    if gen.head_len == 0:
        return None
    committed = gen.committed if isinstance(gen, Generation) else gen.offset
    candidates = []
    for entry in _siblings(path):
        st = entry.stat(follow_symlinks=False)
        if st.st_ino != exclude_ino and st.st_size >= max(committed, gen.head_len):
            candidates.append((st.st_mtime_ns, entry.path))
    for _, candidate in sorted(candidates, reverse=True):
        fd = _open_if(candidate, lambda fd, _st: _head(fd, gen.head_len) == (gen.head_len, gen.head_crc))
        if fd is not None:
            return fd, candidate
    return None


def _locate(path: str, saved: SavedGeneration) -> tuple[int, bool] | None:
    """Open the saved generation's file: (descriptor, found at the path itself), or None."""
    def same(fd: int, st: os.stat_result) -> bool:
        return ((st.st_dev, st.st_ino) == (saved.dev, saved.ino) and st.st_size >= saved.offset
                and (saved.head_len == 0 or _head(fd, saved.head_len) == (saved.head_len, saved.head_crc)))

    fd = _open_if(path, same)
    if fd is not None:
        return fd, True
    for entry in _siblings(path):
        if entry.inode() == saved.ino and entry.path != path:
            fd = _open_if(entry.path, same)
            if fd is not None:
                return fd, False
    copy = _find_copy(path, saved)
    return (copy[0], False) if copy is not None else None

"""Cutting a file's bytes into records: lines, multi-line records, a maximum size. Pure: no I/O.

A :class:`LineSplitter` is fed the bytes of one file in order, from a known byte offset, and returns
:class:`Line` records. Invariants:

* A record ends at a newline; ``end`` is the byte offset just past that newline (the agent's seqno
  and the position it saves). Bytes after the last newline wait for more data, except when the file
  is finished (:meth:`LineSplitter.finish`), when they make a last record ending at the file's end.
* The record's value is the line without its newline. A line longer than ``max_bytes`` keeps its
  first ``max_bytes`` bytes; the rest is skipped up to the newline (memory stays bounded) and the
  record says how long the line was (``original_size``), so nothing is cut silently.
* With a start-of-record pattern, a line that matches starts a record and lines that do not are
  appended to it (joined by ``\\n``); the record is emitted when the next start line arrives, when
  the file is finished, or when the agent calls :meth:`LineSplitter.flush_pending` after a quiet
  period. Lines before the first start line form records on their own. ``max_bytes`` caps the whole
  record the same way.
* ``committed_end`` is the offset from which a restart must read to lose nothing and repeat nothing:
  the end of the last record returned. Bytes after it (a partial line, a pending multi-line record)
  are read again after a restart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Line:
    """One record cut from a file: ``value`` ends at byte offset ``end`` of the file (seqno)."""

    value: bytes
    end: int
    original_size: int = 0  # the size before cutting to max_bytes; 0 when not cut


class LineSplitter:
    """Cuts a byte stream into :class:`Line` records (see the module docstring)."""

    __slots__ = ("_cut", "_max", "_partial", "_pattern", "_pending", "_pending_len", "_pending_size", "_skipping",
                 "committed_end", "offset")

    def __init__(self, offset: int, max_bytes: int, start_pattern: re.Pattern[bytes] | None = None) -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be at least 1")
        self.offset = offset  # bytes fed so far, as a file offset
        self.committed_end = offset
        self._max = max_bytes
        self._pattern = start_pattern
        self._partial = bytearray()  # the current line's first bytes (at most max_bytes)
        self._skipping = 0  # bytes of the current line dropped beyond max_bytes
        self._pending: list[bytes] = []  # a multi-line record's lines so far
        self._pending_size = 0  # its full size with separators, cut or not
        self._pending_len = 0  # the size of its value so far (at most max_bytes)
        self._cut = False  # the pending record reached max_bytes

    @property
    def has_pending(self) -> bool:
        """True when a multi-line record waits for its next start line."""
        return bool(self._pending)

    def feed(self, data: bytes) -> list[Line]:
        out: list[Line] = []
        start = 0
        size = len(data)
        base = self.offset
        while start < size:
            newline = data.find(b"\n", start)
            if newline < 0:
                self._keep_partial(data, start, size)
                break
            if self._partial or self._skipping:
                self._keep_partial(data, start, newline)
                line, full = bytes(self._partial), len(self._partial) + self._skipping
                self._partial.clear()
                self._skipping = 0
            else:
                line = data[start:newline]
                full = len(line)
            start = newline + 1
            self._add_line(line, full, base + start, out)
        self.offset = base + size
        return out

    def flush_pending(self) -> list[Line]:
        """Emit a waiting multi-line record (its lines are complete): the quiet period is over."""
        out: list[Line] = []
        if self._pending:
            out.append(self._take_pending(self.offset - len(self._partial) - self._skipping))
        return out

    def finish(self) -> list[Line]:
        """The file will not grow: emit what waits, a last line without a newline included."""
        out = self.flush_pending() if not (self._partial or self._skipping) else []
        if self._partial or self._skipping:
            line, full = bytes(self._partial), len(self._partial) + self._skipping
            self._partial.clear()
            self._skipping = 0
            self._add_line(line, full, self.offset, out)
            out.extend(self.flush_pending())
        return out

    def _keep_partial(self, data: bytes, start: int, stop: int) -> None:
        room = self._max - len(self._partial)
        take = min(room, stop - start)
        if take > 0:
            self._partial += data[start : start + take]
        self._skipping += (stop - start) - max(take, 0)

    def _add_line(self, line: bytes, full: int, end: int, out: list[Line]) -> None:
        if self._pattern is None:
            self.committed_end = end
            out.append(Line(line[: self._max], end, full if full > self._max else 0))
            return
        if self._pending and self._pattern.search(line) is not None:
            out.append(self._take_pending(end - full - 1))
        if not self._pending:
            self._pending_size = full
            self._cut = full > self._max
            self._pending.append(line[: self._max])
            self._pending_len = min(full, self._max)
            return
        self._pending_size += 1 + full
        if self._cut:
            return
        room = self._max - self._pending_len - 1  # bytes left for this line after its separator
        if room <= 0 or full > room:
            self._cut = True
        if room > 0:
            kept = line[:room]
            self._pending.append(kept)
            self._pending_len += 1 + len(kept)

    def _take_pending(self, end: int) -> Line:
        value = b"\n".join(self._pending)
        size = self._pending_size
        self._pending.clear()
        self._pending_size = 0
        cut, self._cut = self._cut, False
        self.committed_end = end
        return Line(value, end, size if cut else 0)

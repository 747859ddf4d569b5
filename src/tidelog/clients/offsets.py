"""The done prefix: which position may be committed when work finishes out of order.

Items (a consumed record, a replayed spool batch) are *begun* in increasing position order and
*finished* in any order. :attr:`DonePrefix.position` is the position below which every begun item
is finished: the start of the oldest unfinished item, or the end of the newest item when all are
finished. Committing that position never skips an unfinished item, whatever order workers finish
in; it is the offset a consumer commits (Kafka's "next offset to read") and the point below which
the producer's spool may delete what was replayed.

Items need not be contiguous (a consumed partition skips transaction markers and compacted
offsets): each item names its own ``[start, end)``; the gap between one item's end and the next
item's start counts as done.

Pure and not thread-safe: the owner serialises calls (the consumer under its lock, the producer in
its sender thread).
"""

from __future__ import annotations

from collections import deque


class DonePrefix:
    """The committable position of one ordered stream of items (see the module docstring)."""

    __slots__ = ("_done", "_pending", "position")

    def __init__(self, position: int) -> None:
        self.position = position
        self._pending: deque[tuple[int, int]] = deque()  # (start, end) of unfinished-or-blocked items
        self._done: set[int] = set()

    @property
    def in_flight(self) -> int:
        """Items begun and not yet released into the prefix (finished ones behind a slow one count)."""
        return len(self._pending)

    @property
    def end(self) -> int:
        """One past the newest item begun (``position`` when nothing is pending)."""
        return self._pending[-1][1] if self._pending else self.position

    def begin(self, start: int, end: int) -> None:
        """Register the item ``[start, end)``; items must be begun in order, without overlap."""
        if end <= start:
            raise ValueError(f"empty item [{start}, {end})")
        if start < self.end:
            raise ValueError(f"item [{start}, {end}) begun before the end of the previous one ({self.end})")
        if not self._pending:
            self.position = start  # the gap before a first item is done by definition
        self._pending.append((start, end))

    def finish(self, start: int) -> bool:
        """Mark the item beginning at ``start`` finished; True when :attr:`position` moved.

        Finishing an item that is not pending (already released, or dropped by :meth:`reset`) is
        ignored: a late completion never moves the position backwards or past unfinished work.
        """
        pending = self._pending
        if not pending or start < pending[0][0] or start > pending[-1][0]:
            return False
        self._done.add(start)
        moved = False
        while pending and pending[0][0] in self._done:
            first, end = pending.popleft()
            self._done.discard(first)
            self.position = end
            moved = True
        return moved

    def cancel(self, start: int) -> None:
        """Take back the newest item, begun at ``start`` (it could not be handed out after all)."""
        if not self._pending or self._pending[-1][0] != start:
            raise ValueError(f"the newest item does not begin at {start}")
        self._pending.pop()
        self._done.discard(start)

    def advance_to(self, position: int) -> None:
        """Treat everything below ``position`` as done (records dropped on purpose): pending items
        ending at or below it are forgotten, and the position moves up to it."""
        while self._pending and self._pending[0][1] <= position:
            self._done.discard(self._pending.popleft()[0])
        if position > self.position:
            self.position = position
        while self._pending and self._pending[0][0] in self._done:
            first, end = self._pending.popleft()
            self._done.discard(first)
            self.position = end

    def reset(self, position: int) -> None:
        """Forget every pending item and restart at ``position`` (a rewind, a seek, a new assignment)."""
        self._pending.clear()
        self._done.clear()
        self.position = position

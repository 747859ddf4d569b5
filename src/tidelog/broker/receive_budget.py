"""``queued.max.request.bytes``: one broker-wide budget for the memory of requests being received.

A request that fits a connection's 64 KiB receive area costs nothing beyond it. A larger one needs a
buffer of its own (``protocol/framing.py``), and before its connection reads past the receive area it
reserves the request's declared size here. If the budget cannot take it, the connection stops reading
(the kernel's socket buffer fills, then the client's TCP window closes: back-pressure, nothing is
buffered) and waits in line; when reservations are released the waiting connections are served in
the order they asked. A reservation is released once its request has been served (its response
written) or its connection is gone.

Invariants:

- ``reserved <= max(limit, the largest single reservation)``: a request larger than the whole budget
  (up to ``socket.request.max.bytes``) is admitted when nothing else is reserved, so every request
  the per-request limit allows can be read; otherwise a reservation is granted only if it fits.
- First come, first served: while a connection waits, later ones wait behind it even if they would
  fit, so a large request is not starved by a stream of smaller ones.
- A connection that holds a reservation and stops sending keeps it until ``socket.request.read.timeout.ms``
  closes it; that is what bounds how long others wait for a budget taken by a stalled sender.

``limit <= 0`` (Kafka's -1) means no budget: every reservation is granted at once.
Not thread-safe: used from the event loop only.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(eq=False)
class Waiter:
    """A connection waiting for ``size`` bytes; ``granted()`` is called once they are reserved for it."""

    size: int
    granted: Callable[[], None]
    cancelled: bool = field(default=False)


class ReceiveBudget:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.reserved = 0
        self._waiting: deque[Waiter] = deque()

    @property
    def waiting(self) -> int:
        """Connections whose reading is paused until the budget takes their request."""
        return sum(1 for waiter in self._waiting if not waiter.cancelled)

    def _fits(self, size: int) -> bool:
        return self.limit <= 0 or self.reserved == 0 or self.reserved + size <= self.limit

    def try_reserve(self, size: int) -> bool:
        """Reserve ``size`` bytes now if the budget allows and nobody waits; False otherwise."""
        if self._waiting or not self._fits(size):
            return False
        self.reserved += size
        return True

    def wait(self, size: int, granted: Callable[[], None]) -> Waiter:
        """Queue for ``size`` bytes; ``granted`` runs (from a later ``release``) once they are reserved."""
        waiter = Waiter(size, granted)
        self._waiting.append(waiter)
        return waiter

    def cancel(self, waiter: Waiter) -> None:
        """The connection went away while waiting."""
        waiter.cancelled = True
        self._grant()

    def release(self, size: int) -> None:
        """Give back a reservation; grant waiting connections what now fits, in order."""
        self.reserved -= size
        assert self.reserved >= 0, "released more than was reserved"
        self._grant()

    def _grant(self) -> None:
        while self._waiting:
            head = self._waiting[0]
            if head.cancelled:
                self._waiting.popleft()
                continue
            if not self._fits(head.size):
                return
            self._waiting.popleft()
            self.reserved += head.size
            head.granted()

"""``queued.max.request.bytes``: one broker-wide budget for the memory of requests being received,
queued and served.

Every request counts, whatever its size, from the moment its bytes are taken off the socket until
its response has been written (or its connection is gone):

- **Received frames** are charged in bulk, once per read (``received``): one addition per chunk of
  up to 64 KiB however many small requests it held, so the hot path pays one call per read, not
  per request. They are given back one by one as they are served (``discharge``).
- **A request larger than the receive area** needs a buffer of its own (``protocol/framing.py``), so
  its connection reserves the declared size before reading past the first 64 KiB (``try_reserve``
  / ``wait``); when the request has arrived the reservation becomes an ordinary received charge
  (``settle``), and one whose request never arrives is given back (``release``).

Two ways of waiting:

- A large request that does not fit waits in line with its connection's reading paused (the
  kernel's socket buffer fills, then the client's TCP window closes: back-pressure, nothing
  buffered); waiting large requests are granted first come, first served.
- A connection that holds received frames stops reading while the budget is full
  (``reserved >= limit``) until it holds none or the budget has room again (``may_read``,
  ``pause_reading``). A connection that holds nothing may always read its next request: when the
  budget is full, every client still gets one request at a time through, so one that fills the
  budget with queued requests stalls itself, not the others.

Invariants (``limit > 0``):

- A large request is granted when ``reserved + size <= limit``, or when no other large request holds
  a reservation (``ahead == 0``) and the budget is not full (``reserved < limit``, Kafka's
  non-strict memory pool): every request ``socket.request.max.bytes`` allows can be read (also one
  larger than the whole budget), and a stream of small requests cannot starve a large one (the
  budget falls below its limit whenever they are served faster than they come).
- Received charges grow past ``limit`` by at most one read per connection (a connection checks the
  budget after each read, and a read is at most its 64 KiB receive area): the memory held is at
  most ``limit`` + one large request + one receive area per reading connection.
- A connection that holds a reservation and stops sending keeps it until ``socket.request.read.timeout.ms``
  closes it; that is what bounds how long others wait for a budget taken by a stalled sender.

``limit <= 0`` (Kafka's -1) means no budget: every reservation is granted at once and reading never
pauses (the charges are still counted, for the gauge). Not thread-safe: the event loop's only.
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
        self.reserved = 0  # everything held: reservations ahead of large requests plus received frames
        self.ahead = 0  # of which: reservations for large requests still arriving
        self._waiting: deque[Waiter] = deque()
        self._readers: dict[object, Callable[[], None]] = {}  # paused because the budget is full

    @property
    def waiting(self) -> int:
        """Connections whose reading is paused until the budget can hold their requests."""
        return sum(1 for waiter in self._waiting if not waiter.cancelled) + len(self._readers)

    def _fits(self, size: int) -> bool:
        if self.limit <= 0 or self.reserved + size <= self.limit:
            return True
        return self.ahead == 0 and self.reserved < self.limit  # one large request beyond the budget at a time

    # -- large requests: reserved before they are read ------------------------------------------

    def try_reserve(self, size: int) -> bool:
        """Reserve ``size`` bytes now if the budget allows and nobody waits; False otherwise."""
        if self._waiting or not self._fits(size):
            return False
        self.reserved += size
        self.ahead += size
        return True

    def wait(self, size: int, granted: Callable[[], None]) -> Waiter:
        """Queue for ``size`` bytes; ``granted`` runs (from a later release) once they are reserved."""
        waiter = Waiter(size, granted)
        self._waiting.append(waiter)
        return waiter

    def cancel(self, waiter: Waiter) -> None:
        """The connection went away while waiting."""
        waiter.cancelled = True
        self._grant()

    def release(self, size: int) -> None:
        """Give back a reservation whose request will never arrive (its connection is gone)."""
        self.reserved -= size
        self.ahead -= size
        assert self.ahead >= 0, "released more than was reserved"
        self._grant()

    def settle(self, size: int) -> None:
        """The request a reservation was for has arrived: it is held as a received frame from now on."""
        self.ahead -= size
        assert self.ahead >= 0, "settled more than was reserved"
        self._grant()

    # -- received frames -----------------------------------------------------------------------

    def received(self, size: int) -> None:
        """Frames of ``size`` bytes in all were taken off a socket without a reservation."""
        self.reserved += size

    def discharge(self, size: int) -> None:
        """Received frames of ``size`` bytes have been served (or dropped with their connection)."""
        self.reserved -= size
        assert self.reserved >= self.ahead, "discharged more than was received"
        if self._waiting or self._readers:  # the per-request path: nothing to do when nobody waits
            self._grant()

    def may_read(self, holding: bool) -> bool:
        """May a connection go on reading? Always when it holds no received frame (``holding`` False)."""
        return self.limit <= 0 or not holding or self.reserved < self.limit

    def pause_reading(self, key: object, resume: Callable[[], None]) -> None:
        """``key``'s reading is paused for a full budget; ``resume`` runs once the budget has room."""
        self._readers[key] = resume

    def forget_reader(self, key: object) -> None:
        """``key`` resumed on its own (it holds nothing any more) or is gone."""
        self._readers.pop(key, None)

    def _grant(self) -> None:
        waiting = self._waiting
        while waiting:
            head = waiting[0]
            if head.cancelled:
                waiting.popleft()
                continue
            if not self._fits(head.size):
                break
            waiting.popleft()
            self.reserved += head.size
            self.ahead += head.size
            head.granted()
        if self._readers and (self.limit <= 0 or self.reserved < self.limit):
            readers = list(self._readers.values())
            self._readers.clear()
            for resume in readers:
                resume()

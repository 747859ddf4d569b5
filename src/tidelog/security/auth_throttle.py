"""The failed-authentication throttle: exponential back-off per address and per user, with a cap.

Kafka's only brake on password guessing is ``connection.failed.authentication.delay.ms`` before each
failure's answer: a client with 20 connections tried 200 passwords on a super user in about a second.
Here each attempt is checked only when the throttle allows, and the delay never depends on whether
the password is right (the wait comes before the check, so an answer's timing tells nothing).

The policy (docs/security.md, "Failed authentications"), with ``base`` =
``connection.failed.authentication.delay.ms`` and ``cap`` = ``connection.failed.authentication.backoff.max.ms``,
``delay(n) = min(base * 2**(n-1), cap)`` after ``n`` failures (0 for none):

- **per address**: attempts from one address are checked one after another, ``delay(n)`` apart,
  whatever the number of connections or users they name. An attempt whose turn would come more than
  ``cap`` from now is refused without being checked (its connection is not held for minutes, and a
  right password sent then fails too: the address has to slow down).
- **per user**: every attempt naming a user with ``n`` recent failures waits ``delay(n)`` first (at
  the same time as the others: never more than ``cap``). So a guesser spread over many addresses is
  slowed too, while the user still logs in from a new address within ``cap``.
- **trusted pairs**: a user that has authenticated from an address is trusted there: its attempts
  from that address wait for neither throttle, so its own clients keep logging in at once while it is
  under attack, and a misconfigured client on the same host (another user, a wrong password) does
  not lock them out. One failure naming that user from that address ends the trust.
- Failures are forgotten ``FORGET_AFTER_S`` after the last one; a success forgets nothing (an
  attacker holding one valid account cannot use it to reset their address).
- At most ``MAX_KEYS`` addresses, users and (user, address) pairs are remembered, the oldest
  forgotten first: user names come from the client and must not grow memory without bound.

``cap`` = 0 (or ``base`` = 0) turns the throttle off. Pure: times are passed in (monotonic seconds).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

FORGET_AFTER_S = 300.0
MAX_KEYS = 10_000


@dataclass
class _Failures:
    count: int = 0
    last: float = 0.0
    next_turn: float = 0.0  # addresses only: when the next attempt may be checked


class FailedAuthThrottle:
    def __init__(self, settings: Callable[[], tuple[int, int]]) -> None:
        """``settings()`` returns (base_ms, cap_ms), read at each attempt (both may change at run time)."""
        self._settings = settings
        self._addresses: dict[str, _Failures] = {}
        self._users: dict[str, _Failures] = {}
        self._trusted: dict[tuple[str, str], None] = {}  # (user, address) that authenticated before

    def _delay(self, count: int) -> float:
        base_ms, cap_ms = self._settings()
        if count <= 0 or base_ms <= 0 or cap_ms <= 0:
            return 0.0
        return min(base_ms * 2.0 ** min(count - 1, 40), cap_ms) / 1000

    @staticmethod
    def _get(table: dict[str, _Failures], key: str, now: float) -> _Failures:
        found = table.pop(key, None)
        if found is None or now - found.last > FORGET_AFTER_S:
            found = _Failures()
        table[key] = found  # most recently used last
        while len(table) > MAX_KEYS:
            del table[next(iter(table))]
        return found

    def before_attempt(self, user: str | None, address: str, now: float) -> float | None:
        """Seconds to wait before checking this attempt; None: refuse it unchecked (too soon)."""
        cap_s = self._settings()[1] / 1000
        if cap_s <= 0 or (user is not None and (user, address) in self._trusted):
            return 0.0
        wait = 0.0
        at_address = self._get(self._addresses, address, now)
        if at_address.count:
            turn = max(now, at_address.next_turn)
            if turn - now > cap_s:
                return None
            at_address.next_turn = turn + self._delay(at_address.count)
            wait = turn - now
        if user is not None:
            wait = max(wait, self._delay(self._get(self._users, user, now).count))
        return wait

    def failed(self, user: str | None, address: str, now: float) -> None:
        self._trusted.pop((user or "", address), None)
        for table, key in ((self._addresses, address), (self._users, user)):
            if key is not None:
                entry = self._get(table, key, now)
                entry.count += 1
                entry.last = now

    def succeeded(self, user: str, address: str) -> None:
        self._trusted.pop((user, address), None)
        self._trusted[(user, address)] = None
        while len(self._trusted) > MAX_KEYS:
            del self._trusted[next(iter(self._trusted))]

    def failures(self, user: str) -> int:
        """Recent failures naming ``user`` (for log lines)."""
        entry = self._users.get(user)
        return entry.count if entry is not None else 0

"""Asyncio locks by key: what touches one key is serialised, different keys run side by side.

``hold(*keys)`` takes the locks of every key named, in sorted order, so two holders of several keys
never wait for each other in a circle; a key's lock is forgotten once nobody holds or awaits it, so
the table stays as small as the number of keys in use.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class KeyedLocks(Generic[K]):
    def __init__(self) -> None:
        self._locks: dict[K, tuple[asyncio.Lock, int]] = {}  # key -> (lock, holders and waiters)

    def __len__(self) -> int:
        return len(self._locks)

    def locked(self, key: K) -> bool:
        entry = self._locks.get(key)
        return entry is not None and entry[0].locked()

    @asynccontextmanager
    async def hold(self, *keys: K) -> AsyncIterator[None]:
        ordered = sorted(set(keys), key=repr) if len(keys) > 1 else list(keys)
        registered: list[K] = []  # counted as users (holding or waiting)
        acquired: list[K] = []
        try:
            for key in ordered:
                lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
                self._locks[key] = (lock, users + 1)
                registered.append(key)
                await lock.acquire()
                acquired.append(key)
            yield
        finally:
            for key in reversed(acquired):
                self._locks[key][0].release()
            for key in registered:
                lock, users = self._locks[key]
                if users == 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)

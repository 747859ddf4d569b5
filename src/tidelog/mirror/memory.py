"""The mirror process's C heap: few glibc malloc arenas, freed memory handed back to the system.

Most of a transactional mirror's memory is librdkafka's, allocated on librdkafka's own threads (a
main thread and one per broker in every client, and the mirror has a client per shard). glibc gives
threads that allocate at the same time arenas of their own, up to eight per core, and keeps what is
freed in each arena for reuse instead of returning it: the start-up's large transient allocations
(10,000-partition metadata answers, parsed once per client) stay resident in many arenas. So, before
the first client is created:

- ``M_ARENA_MAX`` = ``ARENA_MAX``: the threads share a few arenas, so freed memory is reused rather
  than kept per thread;
- ``M_MMAP_THRESHOLD`` = ``MMAP_THRESHOLD``: blocks this large or larger (fetch answers, metadata
  answers, produce requests) are mapped on their own and unmapped when freed. Setting it also turns
  off glibc's sliding threshold, which raises itself after each large free until such blocks come
  from (and stay in) the arenas;

and ``trim()`` (``malloc_trim``) hands free pages back after start-up steps that free a lot.

Only on glibc; a setting the environment already gives (``MALLOC_ARENA_MAX``, ``MALLOC_MMAP_THRESHOLD_``)
is left as the operator set it. Elsewhere these are no-ops.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import platform

log = logging.getLogger(__name__)
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter numbers (malloc.h)
M_ARENA_MAX = -8
ARENA_MAX = 2
MMAP_THRESHOLD = 256 * 1024

_libc: ctypes.CDLL | None = None


def _glibc() -> ctypes.CDLL | None:
    global _libc
    if _libc is None and platform.libc_ver()[0] == "glibc":
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        except OSError:
            return None
    return _libc


def tune() -> dict[str, int]:
    """Set the arena count and the mmap threshold (see the module docstring); returns what was set."""
    libc = _glibc()
    if libc is None:
        return {}
    done: dict[str, int] = {}
    for env, parameter, value in (("MALLOC_ARENA_MAX", M_ARENA_MAX, ARENA_MAX),
                                  ("MALLOC_MMAP_THRESHOLD_", M_MMAP_THRESHOLD, MMAP_THRESHOLD)):
        if env in os.environ:
            continue
        if libc.mallopt(parameter, value) == 1:
            done[env] = value
        else:
            log.debug("mallopt(%d, %d) refused", parameter, value)
    return done


def trim() -> None:
    """Hand the C heap's free pages back to the system (``malloc_trim(0)``)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)

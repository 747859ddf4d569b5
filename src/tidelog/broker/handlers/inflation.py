"""Appends that decompress, moved off the event loop.

Most produce requests are appended on the event loop: the batches are written as received and no record
is decoded. A topic whose ``compression.type`` names another codec than a batch's, or a compacted topic
(which checks every record's key), must inflate each compressed batch first; that costs CPU in
proportion to the *inflated* size, which a hostile client controls (a 48 KB zstd frame can declare a
gigabyte). Such a partition's validation and recompression (:meth:`PartitionLog.prepare_append`, capped
at the topic's ``max.message.bytes``) run on a small pool of worker threads instead, and the append on
the loop then writes the prepared batches.

The pool has :data:`WORKERS` threads, so at most that many batches are inflated at once whatever the
number of connections: the memory they take is bounded by ``WORKERS`` x (the cap + one 1 MiB chunk).
The decoders release the GIL while they inflate, so other connections keep being served meanwhile.
On Linux the workers run at a lower CPU priority (nice +:data:`WORKER_NICENESS`, set per thread): with
two of them inflating on a two-core machine, the event loop thread would otherwise get a third of the
CPU and every other client's latency would grow with the bombs.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tidelog.broker.context import BrokerContext
from tidelog.broker.handlers.common import partition_log
from tidelog.common.errors import KafkaError
from tidelog.storage.log import PreparedAppend

WORKERS = 2
WORKER_NICENESS = 10
_pool: ThreadPoolExecutor | None = None


def _lower_priority() -> None:
    """Lower this worker thread's CPU priority (Linux schedules threads one by one; elsewhere a no-op)."""
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WORKER_NICENESS)


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="tidelog-inflate",
                                   initializer=_lower_priority)
    return _pool


async def prepare(ctx: BrokerContext, topic: str, pdata: Any) -> PreparedAppend | KafkaError | None:
    """The partition's batches validated and recompressed on a worker thread, when appending them
    decompresses; the error that preparing raised (the append answers it); None to append as usual."""
    records = pdata.records
    if records is None:
        return None
    try:
        plog = partition_log(ctx, topic, pdata.index)
    except KafkaError:
        return None  # the append answers the lookup's error
    if not plog.inflates(records):
        return None
    work = functools.partial(plog.prepare_append, records, now_ms=ctx.now_ms())
    try:
        return await asyncio.get_running_loop().run_in_executor(_executor(), work)
    except KafkaError as exc:
        return exc

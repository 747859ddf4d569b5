"""Moving a replica between log dirs of one broker (AlterReplicaLogDirs), Kafka's way.

A move creates a *future* replica in the destination dir, ``<topic>-<p>.<32 hex>-future``, and copies
the current log into it in the background, batch by batch as the segment files hold them
(``append_as_follower``: offsets, leader epochs and producer state come from the batches). The
current log keeps serving reads and appends meanwhile. When the future has caught up, the swap runs
under the current log's lock, so no append slips between the last copy and the switch:

1. copy what is left; give the future the current log start and high watermark and the
   ``partition.metadata`` file; close both logs;
2. rename the current dir to ``<topic>-<p>.<32 hex>-delete`` (removed in the background), fsync;
3. rename the future dir to ``<topic>-<p>``, fsync; open it as the partition's log.

Crash safety, at the next start (``LogManager.startup``):

- a future dir whose partition still has a current log (a crash before step 2, or any time during the
  copy) is opened as that partition's future and the copy resumes from its log end;
- a future dir with no current log (a crash between steps 2 and 3) is the caught-up copy: it is
  renamed to the partition's name and becomes the log;
- ``-delete`` dirs are removed as always.

The copy keeps the future a prefix of the current log: before copying, the future is cut back to the
current log's end for the future's latest leader epoch (the follower rule of KIP-101), and restarted
from the current log start when it fell behind it (retention, DeleteRecords) or shares no epoch with
it. ``replica.alter.log.dirs.io.max.bytes.per.second`` bounds the bytes copied per second, all
moves together.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from tidelog.storage.checkpoint import fsync_dir
from tidelog.storage.log import PartitionLog
from tidelog.storage.partition_metadata import FILE_NAME as PARTITION_METADATA

log = logging.getLogger(__name__)

FUTURE_SUFFIX = "-future"
CHUNK_BYTES = 1024 * 1024


def is_future_dir(path: Path) -> bool:
    return path.name.endswith(FUTURE_SUFFIX) and path.is_dir()


def reconcile(current: PartitionLog, future: PartitionLog) -> None:
    """Cut the future back so that it is a prefix of the current log (or restart it empty)."""
    start = current.log_start_offset
    if future.log_end_offset < start or future.log_start_offset > current.log_end_offset:
        future.truncate_fully_and_start_at(start)
        return
    epoch = future.epoch_cache.latest_epoch
    if epoch < 0:
        target = min(future.log_end_offset, current.log_end_offset)
    else:
        found_epoch, end = current.end_offset_for_epoch(epoch)
        if found_epoch < 0:
            future.truncate_fully_and_start_at(start)
            return
        target = min(future.log_end_offset, end)
    if target < future.log_end_offset:
        future.truncate_to(target)
    if future.log_start_offset < start <= future.log_end_offset:
        future.delete_records_before(start)


def copy(current: PartitionLog, future: PartitionLog, budget: int) -> int:
    """Copy up to about ``budget`` bytes of batches from the current log's end of the future; the bytes copied."""
    copied = 0
    while copied < budget and future.log_end_offset < current.log_end_offset:
        data = current.read(future.log_end_offset, min(CHUNK_BYTES, budget - copied), min_one_batch=True)
        if not data.size:
            break
        future.append_as_follower(data.read_bytes())
        copied += data.size
    return copied


def copy_partition_metadata(source: Path, target: Path) -> None:
    """The topic id file, if the current log has one (temp file, fsync, rename)."""
    found = source / PARTITION_METADATA
    if not found.exists():
        return
    temp = target / (PARTITION_METADATA + ".tmp")
    shutil.copyfile(found, temp)
    with open(temp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(temp, target / PARTITION_METADATA)
    fsync_dir(target)

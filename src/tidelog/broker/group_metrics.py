"""Scrape-time group metrics: group counts by state and consumer lag per group and partition.

Read through the group runtime's public queries (ListGroups, OffsetFetch) and the log manager, once
per scrape: lag = the partition's high watermark - the group's committed offset (0 when the commit is
ahead, e.g. just after a truncation). Cost is one pass over the groups and their committed offsets.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from tidelog.broker.group_runtime import GroupRuntime
from tidelog.common.errors import ErrorCode
from tidelog.storage.manager import LogManager


def group_counts_by_state(groups: GroupRuntime) -> dict[str, int]:
    error, listed = groups.list_groups([], [])
    if error is not ErrorCode.NONE:
        return {}
    return dict(Counter(g.state for g in listed))


def consumer_lag(groups: GroupRuntime, logs: LogManager) -> Iterator[tuple[str, str, int, int]]:
    error, listed = groups.list_groups([], [])
    if error is not ErrorCode.NONE:
        return
    for group in listed:
        fetched = groups.fetch_offsets(group.group_id, None)
        if fetched.error is not ErrorCode.NONE:
            continue
        for topic, partitions in fetched.topics:
            for p in partitions:
                log = logs.get_log(topic, p.partition)
                if p.error is ErrorCode.NONE and p.offset >= 0 and log is not None:
                    yield group.group_id, topic, p.partition, max(0, log.high_watermark - p.offset)

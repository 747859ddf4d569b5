"""One mirror process over 1,000 partitions (2,000 were measured once: docs/mirror.md) stays within its memory bound: the budget is one per
link, shared by every partition (librdkafka's prefetch is one total for the consumer, the open
transactions are bounded by budget.bytes), so RSS does not grow with buffers per partition.
The 10,000-partition figure comes from bench/mirror_bench.py (the same helper)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.broker_process import GROUP_TEST_BROKER, BrokerProcess
from helpers.clients import unique_topic
from helpers.mirror_run import create_wide_topic, fill_partitions, footprint, read_all

PARTITIONS = 1000  # bench/mirror_bench.py goes wider; this keeps the suite within its budget
PER_PARTITION = 10
BUDGET = 16 << 20
RSS_BOUND_MIB = 300


@pytest.mark.slow  # two brokers with 1,000 partitions each
def test_a_thousand_partitions_are_mirrored_within_the_memory_bound(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "a", GROUP_TEST_BROKER) as a, BrokerProcess(tmp_path / "b", GROUP_TEST_BROKER) as b:
        topic = create_wide_topic(a.bootstrap, unique_topic("wide"), PARTITIONS)
        fill_partitions(a.bootstrap, topic, PARTITIONS, PER_PARTITION, 1024)
        peak_mib, seconds = footprint(a.bootstrap, b.bootstrap, tmp_path, topic=topic, partitions=PARTITIONS,
                                      records=PARTITIONS * PER_PARTITION, budget_bytes=BUDGET)
        print(f"\n{PARTITIONS} partitions, {PARTITIONS * PER_PARTITION} records of 1 KiB: peak RSS "
              f"{peak_mib:.0f} MiB, caught up in {seconds:.1f} s")
        assert peak_mib < RSS_BOUND_MIB
        copied = read_all(b.bootstrap, topic, PARTITIONS, strip_header=True)
        assert all(len(records) == PER_PARTITION for records in copied.values())

"""One mirror process over 1,000 partitions (2,000 were measured once: docs/mirror.md) stays within its
memory bound, in both modes: the budget is one per link, shared by every partition, so RSS does not
grow with buffers per partition. Transactional mode: librdkafka's prefetch is one total for the
consumer and the open transactions are bounded by budget.bytes. Offset-preserving mode: one fetch
round at a time, a quarter of budget.bytes shared by the busy partitions (mirror/budget.py).
The 10,000-partition figures come from bench/mirror_bench.py (the same helper)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.broker_process import GROUP_TEST_BROKER, BrokerProcess
from helpers.clients import unique_topic
from helpers.mirror_run import create_wide_topic, fill_partitions, footprint, read_all

PARTITIONS = 1000  # bench/mirror_bench.py goes wider; this keeps the suite within its budget
PER_PARTITION = 10
BUDGET = 16 << 20
RSS_BOUND_MIB = 300


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    base = tmp_path_factory.mktemp("mirror-memory")
    with BrokerProcess(base / "a", GROUP_TEST_BROKER) as a, BrokerProcess(base / "b", GROUP_TEST_BROKER) as b:
        yield a, b


@pytest.mark.slow  # two brokers with 1,000 partitions each
@pytest.mark.parametrize("offsets", ["translate", "preserve"])
def test_a_thousand_partitions_are_mirrored_within_the_memory_bound(
        clusters: tuple[BrokerProcess, BrokerProcess], tmp_path: Path, offsets: str) -> None:
    a, b = clusters
    topic = create_wide_topic(a.bootstrap, unique_topic(f"wide-{offsets}"), PARTITIONS)
    fill_partitions(a.bootstrap, topic, PARTITIONS, PER_PARTITION, 1024)
    peak_mib, seconds = footprint(a.bootstrap, b.bootstrap, tmp_path, topic=topic, partitions=PARTITIONS,
                                  records=PARTITIONS * PER_PARTITION, budget_bytes=BUDGET, offsets=offsets)
    print(f"\n{offsets}: {PARTITIONS} partitions, {PARTITIONS * PER_PARTITION} records of 1 KiB: peak RSS "
          f"{peak_mib:.0f} MiB, caught up in {seconds:.1f} s")
    assert peak_mib < RSS_BOUND_MIB
    copied = read_all(b.bootstrap, topic, PARTITIONS, strip_header=True)
    assert all(len(records) == PER_PARTITION for records in copied.values())

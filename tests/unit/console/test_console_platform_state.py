"""A governor move's state as the Platform page derives it from the replica lists in Metadata, the
mirror's lag from its metrics, and the cached Metadata the pages read (refreshed in the background)."""

from __future__ import annotations

import threading
import time

import pytest

from tidelog.common.platform_records import GovernorMove
from tidelog.console.config import ConsoleConfig, parse_config
from tidelog.console.kafka import ClusterInfo, KafkaView
from tidelog.console.platform import mirror_lag, move_state


@pytest.mark.parametrize("before, after, replicas, cancelled, state", [
    ((1, 2), (3, 2), (3, 2), False, "done"),
    ((1, 2), (3, 2), (2, 3), False, "done"),          # a replica move is done whatever the order
    ((1, 2), (3, 2), (1, 2, 3), False, "moving"),     # Kafka lists the union while copying
    ((1, 2), (3, 2), (1, 2), False, "pending"),
    ((1, 2), (2, 1), (2, 1), False, "done"),          # a leader-only move needs the order
    ((1, 2), (2, 1), (1, 2), False, "pending"),
    ((1, 2), (3, 2), (1, 2), True, "cancelled"),
    ((1, 2), (3, 2), None, False, "gone"),
])
def test_move_state_follows_the_replica_list(before: tuple[int, ...], after: tuple[int, ...],
                                             replicas: tuple[int, ...] | None, cancelled: bool, state: str) -> None:
    assert move_state(GovernorMove("t", 0, before, after, 1), replicas, cancelled) == state


def test_mirror_lag_is_read_per_source_partition_from_the_mirror_metrics() -> None:
    text = "\n".join([
        "# TYPE tidelog_mirror_lag_records gauge",
        'tidelog_mirror_lag_records{topic="orders",partition="0"} 12',
        'tidelog_mirror_lag_records{topic="orders",partition="1"} 0',
        'tidelog_mirror_lag_seconds{topic="orders",partition="0"} 3.5',
        'tidelog_mirror_lag_records{topic="bad",partition="x"} 1',
    ])
    assert mirror_lag(text) == {("orders", 0): (12.0, 3.5), ("orders", 1): (0.0, 0.0)}


class CountingView(KafkaView):
    """A KafkaView whose Metadata fetch (the seam) is counted and can be held."""

    def __init__(self, config: ConsoleConfig) -> None:
        super().__init__(config)
        self.fetches = 0
        self.gate = threading.Event()
        self.gate.set()

    def _fetch_cluster(self) -> ClusterInfo:
        self.gate.wait(10)
        self.fetches += 1
        return ClusterInfo(f"c{self.fetches}", 1, (), {}, time.monotonic())


def test_stale_metadata_is_answered_at_once_while_one_background_fetch_replaces_it() -> None:
    view = CountingView(parse_config({"bootstrap.servers": "127.0.0.1:1", "console.metadata.max.age.ms": "50"}))
    assert view.cluster().cluster_id == "c1" and view.cluster().cluster_id == "c1"  # fresh: cached
    time.sleep(0.08)
    view.gate.clear()  # the next fetch hangs until released
    started = time.monotonic()
    assert [view.cluster().cluster_id for _ in range(5)] == ["c1"] * 5  # stale, answered without waiting
    assert time.monotonic() - started < 0.5
    view.gate.set()
    wait_for = time.monotonic() + 5
    while view.cluster().cluster_id != "c2" and time.monotonic() < wait_for:
        time.sleep(0.01)
    assert view.cluster().cluster_id == "c2" and view.fetches == 2  # one background fetch, not five
    view.invalidate()
    assert view.cluster().cluster_id == "c3"  # after a change the caller waits for the new answer
    assert view.cluster(fresh=True).cluster_id == "c4"

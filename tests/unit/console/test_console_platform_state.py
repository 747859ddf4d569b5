"""A governor move's state as the Platform page derives it from the replica lists in Metadata."""

from __future__ import annotations

import pytest

from tidelog.common.platform_records import GovernorMove
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

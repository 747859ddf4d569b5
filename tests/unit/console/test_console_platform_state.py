"""A governor move's state as the Platform page derives it from the replica lists in Metadata, the
mirror's lag from its metrics, an offset-preserving link's source topic and lag, the links' files
(``console.mirror.config``), and the cached Metadata the pages read (refreshed in the background)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from tidelog.common.platform_records import GovernorMove
from tidelog.console.config import ConfigError, ConsoleConfig, parse_config
from tidelog.console.kafka import ClusterInfo, KafkaView, TopicInfo
from tidelog.console.platform import PlatformView, PreservedRow, mirror_lag, move_state, source_topic


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


def link_file(tmp_path: Path, name: str, rename: str = "{topic}", offsets: str = "preserve") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(f'[link]\nname = "{name}"\noffsets = "{offsets}"\nshards = 8\n\n'
                    f'[topics]\ninclude = [".*"]\nrename = "{rename}"\n\n'
                    '[source]\n"bootstrap.servers" = "127.0.0.1:1"\n\n[destination]\n"bootstrap.servers" = "127.0.0.1:2"\n')
    return path


@pytest.mark.parametrize("rename, destination, source", [
    ("{topic}", "orders", "orders"),
    ("dc1.{topic}", "dc1.orders", "orders"),
    ("{topic}.copy", "orders.copy", "orders"),
    ("dc1.{topic}", "orders", ""),          # not a name this link writes
    ("dc1.{topic}", "dc1.", ""),            # the source name would be empty
    ("{topic}-{topic}", "a-a", "a"),        # undone, then checked by renaming again
    ("{topic}-{topic}", "a-b", ""),
])
def test_a_preserving_links_rename_is_undone_to_find_the_source_topic(tmp_path: Path, rename: str, destination: str,
                                                                    source: str) -> None:
    link = parse_config({"console.mirror.config": str(link_file(tmp_path, "keep", rename))}).mirror_links[0]
    assert source_topic(link, destination) == source


@pytest.mark.parametrize("dest_end, source_start, source_end, lag", [
    (100, 0, 130, 30),
    (130, 0, 130, 0),
    (10, 50, 80, 30),      # the source's log start passed the position: only what the source still has
    (10, 0, None, None),   # the source side unknown (no link file, or not readable)
    (None, 0, 80, None),   # the destination partition did not answer
])
def test_a_preserved_partitions_lag_counts_what_the_source_has_and_the_destination_lacks(
        dest_end: int | None, source_start: int, source_end: int | None, lag: int | None) -> None:
    row = PreservedRow("keep", "orders", 0, 0, dest_end, "orders", 3, "", source_start, source_end, None)
    assert row.lag_records == lag


def test_mirror_link_files_are_read_at_start_and_a_bad_one_names_the_key(tmp_path: Path) -> None:
    files = f"{link_file(tmp_path, 'a')},{link_file(tmp_path, 'b', offsets='translate')}"
    links = parse_config({"console.mirror.config": files}).mirror_links
    assert [(link.name, link.preserves_offsets, link.shards) for link in links] == [("a", True, 8), ("b", False, 8)]
    with pytest.raises(ConfigError, match=r"console.mirror.config=.*missing.toml"):
        parse_config({"console.mirror.config": str(tmp_path / "missing.toml")})
    with pytest.raises(ConfigError, match="two files name the same link"):
        parse_config({"console.mirror.config": f"{link_file(tmp_path, 'a')},{link_file(tmp_path, 'a')}"})


class MarkingView(KafkaView):
    """A KafkaView whose DescribeConfigs of the topics' ``mirror.source`` (the seam) is counted and can be held."""

    def __init__(self, config: ConsoleConfig) -> None:
        super().__init__(config)
        self.asked = 0
        self.gate = threading.Event()
        self.gate.set()

    def topic_overrides(self, topics: Sequence[str], name: str) -> dict[str, str]:
        self.gate.wait(10)
        self.asked += 1
        return {t: f"link-{self.asked}" for t in topics}


def test_preserving_links_marks_are_asked_once_per_metadata_and_then_in_the_background() -> None:
    config = parse_config({"bootstrap.servers": "127.0.0.1:1"})
    view = MarkingView(config)
    platform = PlatformView(config, view)
    first, second = (ClusterInfo("c", 1, (), {"orders": TopicInfo("orders", (), False)}, at) for at in (1.0, 2.0))
    assert platform._marked(first) == {"orders": "link-1"}       # the first view waits for the answer
    assert platform._marked(first) == {"orders": "link-1"} and view.asked == 1  # same metadata: not asked again
    view.gate.clear()
    started = time.monotonic()
    assert platform._marked(second) == {"orders": "link-1"}      # newer metadata: the old answer at once
    assert platform._marked(second) == {"orders": "link-1"} and time.monotonic() - started < 0.5
    view.gate.set()
    deadline = time.monotonic() + 5
    while platform._marked(second) != {"orders": "link-2"} and time.monotonic() < deadline:
        time.sleep(0.01)
    assert platform._marked(second) == {"orders": "link-2"} and view.asked == 2  # one background ask, not two

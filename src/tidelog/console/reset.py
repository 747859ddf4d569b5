"""Planning a consumer group's offset reset, as the groups page shows it before anything is written.

``plan`` is pure: from each partition's committed offset, log start and log end (and, for a reset to
a time, the first offset at or after that time as the broker answered ListOffsets) to the new offset,
clamped to [log start, log end] as Kafka's kafka-consumer-groups tool does. A partition whose time
lookup found no record that recent goes to the log end. The page always shows the plan first (dry
run); executing it commits exactly the offsets shown (the page sends the plan back, it is not made
again), and Kafka refuses it while the group has members (the page says to stop the consumers first).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

TP = tuple[str, int]
TARGETS = ("earliest", "latest", "timestamp", "offset")


@dataclass(frozen=True)
class Position:
    committed: int | None
    earliest: int
    latest: int
    at_time: int | None = None


@dataclass(frozen=True)
class PlannedMove:
    topic: str
    partition: int
    committed: int | None
    new_offset: int
    latest: int

    @property
    def lag_after(self) -> int:
        return max(0, self.latest - self.new_offset)


def new_offset(position: Position, target: str, value: int = 0) -> int:
    if target == "earliest":
        return position.earliest
    if target == "latest":
        return position.latest
    if target == "timestamp":
        found = position.at_time
        return position.latest if found is None or found < 0 else _clamp(found, position)
    if target == "offset":
        return _clamp(value, position)
    raise ValueError(f"reset target must be one of {', '.join(TARGETS)}, got {target!r}")


def _clamp(offset: int, position: Position) -> int:
    return max(position.earliest, min(offset, position.latest))


def plan(positions: Mapping[TP, Position], target: str, value: int = 0) -> list[PlannedMove]:
    return [PlannedMove(t, p, pos.committed, new_offset(pos, target, value), pos.latest)
            for (t, p), pos in sorted(positions.items())]

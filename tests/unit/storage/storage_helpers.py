"""Helpers for the storage unit tests: batch builders and a log factory."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tidelog.protocol.records import Record, build_batch
from tidelog.storage.log import PartitionLog
from tidelog.storage.log_config import LogConfig

NOW = 1_700_000_000_000


def make_batch(
    n: int = 1,
    *,
    ts: int = NOW,
    key: bytes | None = b"k",
    value: bytes = b"v" * 20,
    pid: int = -1,
    epoch: int = -1,
    seq: int = -1,
    transactional: bool = False,
) -> bytes:
    records = [Record(i, ts, key, value + str(i).encode()) for i in range(n)]
    return build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=transactional)


LogFactory = Callable[..., PartitionLog]


@pytest.fixture
def open_log(tmp_path: Path) -> Iterator[LogFactory]:
    opened: list[PartitionLog] = []

    def factory(config: LogConfig | None = None, name: str = "t-0", **kwargs: object) -> PartitionLog:
        log = PartitionLog(tmp_path / name, config or LogConfig(), now_ms=NOW, **kwargs)  # type: ignore[arg-type]
        opened.append(log)
        return log

    yield factory
    for log in opened:
        log.close(clean=False)

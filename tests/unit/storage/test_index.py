import struct
from pathlib import Path

import pytest

from tidelog.storage.index import IndexCorrupt, OffsetIndex, TimeIndex


def test_offset_index_lookup_returns_the_last_entry_at_or_before(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "0.index", 100, 1024, load=False)
    for offset, pos in [(110, 400), (120, 900), (135, 1500)]:
        idx.append(offset, pos)
    cases = [(99, (100, 0)), (100, (100, 0)), (109, (100, 0)), (110, (110, 400)), (119, (110, 400)),
             (134, (120, 900)), (10**9, (135, 1500))]
    for target, expected in cases:
        assert idx.lookup(target) == expected


def test_offset_index_file_holds_relative_offsets_and_positions(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    idx = OffsetIndex(path, 100, 1024, load=False)
    idx.append(110, 400)
    idx.append(120, 900)
    idx.write_pending()
    assert path.read_bytes() == struct.pack(">IIII", 10, 400, 20, 900)
    idx.close()
    again = OffsetIndex(path, 100, 1024, load=True)
    assert again.lookup(125) == (120, 900)
    again.close()


def test_offset_index_truncation_shrinks_the_file(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    idx = OffsetIndex(path, 0, 1024, load=False)
    for i in range(1, 6):
        idx.append(i * 10, i * 100)
    idx.write_pending()
    idx.truncate_to(30)
    assert len(idx) == 2 and path.stat().st_size == 16
    assert idx.lookup(45) == (20, 200)
    idx.close()


def test_offset_index_is_full_at_segment_index_bytes(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "0.index", 0, 24, load=False)
    for i in range(3):
        assert not idx.is_full
        idx.append(i + 1, i + 1)
    assert idx.is_full
    idx.close()


def test_offset_index_rejects_non_increasing_offsets(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "0.index", 0, 1024, load=False)
    idx.append(5, 10)
    with pytest.raises(ValueError):
        idx.append(5, 20)
    idx.close()


@pytest.mark.parametrize(
    "content",
    [b"\x00" * 7, struct.pack(">IIII", 5, 100, 3, 200), struct.pack(">II", 5, 10**6)],
    ids=["partial entry", "offsets go back", "position past the log"],
)
def test_garbled_offset_index_fails_its_check(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "0.index"
    path.write_bytes(content)
    with pytest.raises(IndexCorrupt):
        idx = OffsetIndex(path, 0, 1024, load=True)
        try:
            idx.sanity_check(log_size=1000)
        finally:
            idx.close()


def test_time_index_only_grows_and_looks_up_floor_entries(tmp_path: Path) -> None:
    path = tmp_path / "0.timeindex"
    idx = TimeIndex(path, 50, 1200, load=False)
    idx.maybe_append(1000, 50)
    idx.maybe_append(900, 60)  # smaller timestamp: ignored
    idx.maybe_append(2000, 70)
    assert idx.keys == [1000, 2000]
    assert idx.lookup(999) == (-1, 50)
    assert idx.lookup(1500) == (1000, 50)
    assert idx.lookup(2000) == (2000, 70)
    idx.write_pending()
    assert path.read_bytes() == struct.pack(">qIqI", 1000, 0, 2000, 20)
    idx.truncate_to(70)
    assert idx.last_entry == (1000, 50)
    idx.close()

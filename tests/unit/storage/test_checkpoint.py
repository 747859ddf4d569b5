from pathlib import Path

import pytest

from tidelog.storage.checkpoint import CheckpointError, OffsetCheckpointFile, read_entries, write_entries


def test_offset_checkpoint_round_trips_in_kafka_text_format(tmp_path: Path) -> None:
    f = OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint")
    f.write({("orders", 1): 880, ("orders", 0): 1200, ("a.b-c", 12): 0})
    assert f.path.read_text() == "0\n3\na.b-c 12 0\norders 0 1200\norders 1 880\n"
    assert f.read() == {("orders", 0): 1200, ("orders", 1): 880, ("a.b-c", 12): 0}
    assert not f.path.with_name(f.path.name + ".tmp").exists()


def test_missing_checkpoint_reads_as_empty(tmp_path: Path) -> None:
    assert OffsetCheckpointFile(tmp_path / "nope").read() == {}


@pytest.mark.parametrize(
    "text",
    [
        "1\n0\n",  # unknown version
        "0\n2\nt 0 1\n",  # count lies
        "0\nx\n",  # count not a number
        "0\n1\nt 0\n",  # missing field
        "0\n1\nt zero 5\n",  # partition not a number
        "",
    ],
)
def test_garbled_checkpoint_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CheckpointError):
        OffsetCheckpointFile(path).read()


def test_rewrite_replaces_previous_content(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    write_entries(path, [(0, 0), (3, 1500)])
    write_entries(path, [(0, 0)])
    assert read_entries(path, 2) == [["0", "0"]]

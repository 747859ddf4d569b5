from pathlib import Path

from tidelog.storage.leader_epoch import LeaderEpochCache


def cache_with(tmp_path: Path, entries: list[tuple[int, int]]) -> LeaderEpochCache:
    cache = LeaderEpochCache(tmp_path)
    for epoch, offset in entries:
        cache.assign(epoch, offset)
    return cache


def test_end_offset_for_epoch_answers_like_offset_for_leader_epoch(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, [(1, 0), (3, 100), (4, 250)])
    leo = 300
    cases = {
        -1: (-1, -1),
        0: (0, 0),  # below the first epoch: ends where the first known epoch starts
        1: (1, 100),
        2: (1, 100),  # unknown epoch between known ones: the floor epoch and the next start
        3: (3, 250),
        4: (4, 300),  # latest epoch ends at the log end
        5: (-1, -1),
    }
    for epoch, expected in cases.items():
        assert cache.end_offset_for(epoch, leo) == expected, epoch


def test_cache_survives_reopen_and_ignores_repeats(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, [(1, 0), (1, 50), (2, 60)])
    assert cache.entries() == [(1, 0), (2, 60)]
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n2\n1 0\n2 60\n"
    assert LeaderEpochCache(tmp_path).entries() == [(1, 0), (2, 60)]


def test_truncations_from_both_ends(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, [(1, 0), (2, 60), (5, 90)])
    cache.truncate_from_end(90)
    assert cache.entries() == [(1, 0), (2, 60)]
    cache.truncate_from_start(70)
    assert cache.entries() == [(2, 70)]
    assert LeaderEpochCache(tmp_path).entries() == [(2, 70)]


def test_a_new_epoch_starting_earlier_replaces_conflicting_entries(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, [(1, 0), (2, 60)])
    cache.assign(3, 40)
    assert cache.entries() == [(1, 0), (3, 40)]


def test_garbled_checkpoint_reads_as_empty(tmp_path: Path) -> None:
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n5\n1 0\n")
    assert LeaderEpochCache(tmp_path).entries() == []

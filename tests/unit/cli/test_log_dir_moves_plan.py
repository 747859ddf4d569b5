"""The state of a log-dir move as DescribeLogDirs shows it (cli/log_dir_moves.py's move_state)."""

from __future__ import annotations

from tidelog.cli.log_dir_moves import move_state
from tidelog.cli.reassign_calls import ReplicaDir

MIB = 1048576


def test_a_future_replica_in_the_target_dir_is_a_move_in_progress_with_its_bytes() -> None:
    found = [ReplicaDir("/a", "t", 0, 10 * MIB, 0, False), ReplicaDir("/b", "t", 0, 4 * MIB, 321, True),
             ReplicaDir("/a", "t", 1, 5, 0, False)]
    state = move_state(("t", 0, 1), "/b", found)
    assert (state.done, state.moving, state.copied, state.total) == (False, True, 4 * MIB, 10 * MIB)
    assert state.text == ("Log dir move of t-0 on broker 1 is still in progress: 4.0 MiB of 10.0 MiB copied to /b, "
                          "321 offsets to go.")


def test_a_replica_in_its_target_dir_with_no_future_left_is_done() -> None:
    state = move_state(("t", 0, 1), "/b", [ReplicaDir("/b", "t", 0, 10, 0, False)])
    assert state.done and not state.moving


def test_a_replica_elsewhere_or_missing_is_a_problem_said_in_words() -> None:
    elsewhere = move_state(("t", 0, 1), "/b", [ReplicaDir("/a", "t", 0, 10, 0, False)])
    assert not elsewhere.done and not elsewhere.moving and "is in /a and is not being moved to /b" in elsewhere.text
    other = move_state(("t", 0, 1), "/b", [ReplicaDir("/a", "t", 0, 10, 0, False), ReplicaDir("/c", "t", 0, 1, 9, True)])
    assert not other.moving and "being moved to /c instead of /b" in other.text
    missing = move_state(("t", 0, 1), "/b", [])
    assert not missing.done and "not in any online log dir" in missing.text

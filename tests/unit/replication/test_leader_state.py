"""The leader's ISR and high-watermark rules (replication/leader_state.py), table by table."""

from __future__ import annotations

from tidelog.replication.leader_state import LeaderState

LAG = 10_000


def leader(isr: tuple[int, ...] = (1, 2, 3), leo: int = 100, hw: int = 100, now: int = 0) -> LeaderState:
    return LeaderState.become_leader(1, 5, 7, (1, 2, 3), isr, leo, hw, now, LAG)


def test_high_watermark_is_the_lowest_isr_log_end_offset() -> None:
    state = leader()
    assert state.on_append(110) is None  # followers have not fetched the new batch yet
    assert state.on_follower_fetch(2, 110, 110, 1)[0] is None  # 3 still at an unknown offset
    assert state.on_follower_fetch(3, 105, 110, 1)[0] == 105
    assert state.on_follower_fetch(3, 110, 110, 2)[0] == 110


def test_high_watermark_never_moves_back_nor_past_the_leader() -> None:
    state = leader(hw=100)
    state.on_follower_fetch(2, 100, 100, 1)
    state.on_follower_fetch(3, 90, 100, 1)
    assert state.high_watermark == 100
    assert state.on_follower_fetch(3, 500, 120, 1)[0] is None  # clamped to the follower's 100 in the ISR
    assert state.high_watermark == 100


def test_a_leader_alone_in_the_isr_commits_on_append() -> None:
    state = leader(isr=(1,))
    assert state.on_append(130) == 130


def test_a_silent_follower_leaves_the_isr_after_the_lag_limit() -> None:
    state = leader(now=0)
    state.on_follower_fetch(2, 100, 100, 5_000)
    assert state.check_lagging(LAG) is None
    proposal = state.check_lagging(LAG + 1)
    assert proposal is not None and proposal.isr == (1, 2)  # 3 never fetched
    assert state.check_lagging(LAG + 2) is None  # one proposal at a time


def test_a_shrink_holds_the_high_watermark_until_the_store_confirms_it() -> None:
    state = leader(now=0)
    state.on_follower_fetch(2, 100, 100, 0)
    state.on_append(120)
    state.on_follower_fetch(2, 120, 120, LAG + 1)
    proposal = state.check_lagging(LAG + 1)
    assert proposal is not None and proposal.isr == (1, 2)
    assert state.high_watermark == 100  # 3 still counts while the shrink is pending
    assert state.isr_committed((1, 2), 8, 120) == 120


def test_a_follower_behind_but_keeping_up_with_earlier_fetches_stays_in_sync() -> None:
    state = leader(now=0)
    # Each fetch reaches the leader's end as of the previous fetch: caught up then, so never lagging.
    leo = 100
    for t in range(1_000, 40_000, 1_000):
        state.on_follower_fetch(2, leo, leo + 10, t)
        state.on_follower_fetch(3, leo, leo + 10, t)
        leo += 10
    assert state.check_lagging(40_000) is None


def test_a_caught_up_follower_rejoins_the_isr_in_replica_order() -> None:
    state = leader(isr=(1, 3), hw=100)
    state.on_follower_fetch(3, 100, 100, 0)
    _, proposal = state.on_follower_fetch(2, 90, 100, 1)
    assert proposal is None  # below the high watermark
    _, proposal = state.on_follower_fetch(2, 100, 100, 2)
    assert proposal is not None and proposal.isr == (1, 2, 3)
    state.isr_committed(proposal.isr, 8, 100)
    assert state.isr == (1, 2, 3) and state.partition_epoch == 8


def test_a_follower_must_reach_the_start_of_this_leaders_epoch_to_rejoin() -> None:
    state = LeaderState.become_leader(1, 5, 7, (1, 2), (1,), 200, 150, 0, LAG)
    _, proposal = state.on_follower_fetch(2, 160, 200, 1)
    assert proposal is None  # past the high watermark, but short of the epoch's start offset 200


def test_a_lost_compare_and_set_lets_the_leader_propose_again() -> None:
    state = leader(now=0)
    assert state.check_lagging(LAG + 1) is not None
    state.proposal_failed()
    assert state.check_lagging(LAG + 2) is not None


def test_an_isr_write_confirmed_after_a_later_change_does_not_bring_back_its_isr() -> None:
    # The leader writes (1, 2, 3) at epoch 8; before its write is confirmed the store's watch delivers
    # epoch 9, the controller ending a move: replica 3 gone. The late confirmation must not undo it.
    state = leader(isr=(1, 2))
    state.on_follower_fetch(2, 100, 100, 1)
    _, proposal = state.on_follower_fetch(3, 100, 100, 1)
    assert proposal is not None and proposal.isr == (1, 2, 3)
    state.replicas = (1, 2)
    state.isr_committed((1, 2), 9, 100)
    assert state.isr_committed(proposal.isr, 8, 100) is None
    assert state.isr == (1, 2) and state.partition_epoch == 9
    state.on_append(120)
    assert state.on_follower_fetch(2, 120, 120, 2)[0] == 120  # 3 no longer holds the high watermark back

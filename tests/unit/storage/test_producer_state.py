from pathlib import Path

import pytest

from tidelog.common.errors import ErrorCode, KafkaError
from tidelog.storage.producer_state import ProducerStateManager, next_sequence, snapshot_name


def test_sequence_wraps_after_int32_max() -> None:
    assert next_sequence(2**31 - 1, 1) == 0
    assert next_sequence(2**31 - 3, 5) == 2
    assert next_sequence(7, 3) == 10


def written(psm: ProducerStateManager, pid: int, epoch: int, first: int, last: int, offset: int) -> None:
    psm.record_batch(pid, epoch, first, last, offset, offset + (last - first) % 2**31, 1000, False)


# (epoch, first seq, last seq) appended after producer 7 wrote epoch 2 seqs 0..4 -> expected outcome
CASES = [
    ((2, 5, 9), None),
    ((2, 0, 4), "duplicate"),
    ((2, 6, 9), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
    ((2, 3, 7), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
    ((1, 5, 9), ErrorCode.INVALID_PRODUCER_EPOCH),
    ((3, 0, 0), None),
    ((3, 5, 6), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
]


@pytest.mark.parametrize(("batch", "outcome"), CASES)
def test_sequence_and_epoch_rules(tmp_path: Path, batch: tuple[int, int, int], outcome: object) -> None:
    psm = ProducerStateManager(tmp_path)
    written(psm, 7, 2, 0, 4, 100)
    epoch, first, last = batch
    if isinstance(outcome, ErrorCode):
        with pytest.raises(KafkaError) as err:
            psm.check(7, epoch, first, last, {})
        assert err.value.code is outcome
    elif outcome == "duplicate":
        dup = psm.check(7, epoch, first, last, {})
        assert dup is not None and (dup.first_offset, dup.last_offset) == (100, 104)
    else:
        assert psm.check(7, epoch, first, last, {}) is None


def test_unknown_producer_may_start_at_any_sequence(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    assert psm.check(9, 4, 1234, 1240, {}) is None


def test_only_the_last_five_batches_are_recognised_as_duplicates(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    for i in range(6):
        written(psm, 1, 0, i * 10, i * 10 + 9, i * 10)
    with pytest.raises(KafkaError):
        psm.check(1, 0, 0, 9, {})  # the oldest batch fell out: now just out of order
    assert psm.check(1, 0, 10, 19, {}) is not None


def test_batches_in_one_append_are_checked_against_each_other(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    written(psm, 1, 0, 0, 9, 0)
    pending: dict[int, tuple[int, int]] = {}
    assert psm.check(1, 0, 10, 19, pending) is None
    with pytest.raises(KafkaError):
        psm.check(1, 0, 10, 19, pending)
    assert psm.check(1, 0, 20, 29, pending) is None


def test_snapshot_round_trip_and_corrupt_snapshot_fallback(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    written(psm, 1, 0, 0, 9, 0)
    psm.record_batch(2, 5, 0, 0, 10, 10, 2000, True)
    first = psm.take_snapshot()
    written(psm, 1, 0, 10, 19, 11)
    second = psm.take_snapshot()
    assert second.name == snapshot_name(21)
    data = bytearray(second.read_bytes())
    data[-1] ^= 1
    second.write_bytes(bytes(data))
    loaded = ProducerStateManager(tmp_path)
    assert loaded.load_snapshot(100) == 11
    assert first.exists() and not second.exists()
    assert loaded.producers[1].last_seq == 9
    assert loaded.first_unstable_offset() == 10


def test_snapshots_above_the_log_end_are_discarded(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    written(psm, 1, 0, 0, 9, 0)
    psm.take_snapshot()
    loaded = ProducerStateManager(tmp_path)
    assert loaded.load_snapshot(5) == 0
    assert loaded.producers == {} and loaded.snapshot_offsets() == []


def test_markers_end_transactions(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    psm.record_batch(3, 1, 0, 4, 50, 54, 1000, True)
    psm.record_batch(4, 1, 0, 0, 55, 55, 1000, True)
    assert psm.first_unstable_offset() == 50
    done = psm.record_marker(3, 1, 56, False, 0, 1000)
    assert done is not None and (done.first_offset, done.last_offset, done.aborted) == (50, 56, True)
    assert psm.first_unstable_offset() == 55
    assert psm.record_marker(3, 1, 57, True, 0, 1000) is None


def test_idle_producers_expire_unless_in_a_transaction(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path, expiration_ms=1000)
    psm.record_batch(1, 0, 0, 0, 0, 0, 5000, False)
    psm.record_batch(2, 0, 0, 0, 1, 1, 5000, True)
    assert psm.remove_expired(5999) == 0
    assert psm.remove_expired(6000) == 1
    assert list(psm.producers) == [2]

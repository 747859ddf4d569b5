"""``__transaction_state`` records: Kafka's byte layout, both value versions, and bad input."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.coordinator.txn_records import (
    InvalidTxnRecord,
    TxnRecord,
    TxnState,
    TxnValue,
    decode,
    encode_key,
    encode_value,
)


def test_key_is_version_zero_and_the_id_as_a_string() -> None:
    assert encode_key("tx") == b"\x00\x00\x00\x02tx"


def test_value_v0_layout_byte_for_byte() -> None:
    value = TxnValue(7, 3, 60_000, TxnState.ONGOING, frozenset({("b", 2), ("a", 1), ("a", 0)}), 111, 100)
    expected = (
        struct.pack(">hqhib", 0, 7, 3, 60_000, 1)
        + struct.pack(">i", 2)
        + struct.pack(">h", 1) + b"a" + struct.pack(">iii", 2, 0, 1)
        + struct.pack(">h", 1) + b"b" + struct.pack(">ii", 1, 2)
        + struct.pack(">qq", 111, 100)
    )
    assert encode_value(value) == expected


def test_a_flexible_v1_value_with_tagged_producer_ids_decodes() -> None:
    body = struct.pack(">hqhib", 1, 9, 0, 1000, 4)
    body += bytes([2]) + bytes([2]) + b"t" + bytes([2]) + struct.pack(">i", 5) + bytes([0])  # one topic, one partition
    body += struct.pack(">qq", 5, 4)
    body += bytes([2]) + bytes([0, 8]) + struct.pack(">q", 3) + bytes([1, 8]) + struct.pack(">q", 11)
    record = decode(encode_key("x"), body)
    assert record.value == TxnValue(9, 0, 1000, TxnState.COMPLETE_COMMIT, frozenset({("t", 5)}), 5, 4, 3, 11)


def test_a_tombstone_has_no_value() -> None:
    assert encode_value(None) is None
    assert decode(encode_key("gone"), None) == TxnRecord("gone", None)


@pytest.mark.parametrize("value", [b"", b"\x00\x07", struct.pack(">hqhib", 0, 1, 0, 1, 42) + b"\x00" * 20])
def test_malformed_values_raise_the_record_error(value: bytes) -> None:
    with pytest.raises(InvalidTxnRecord):
        decode(encode_key("x"), value)


def test_state_names_are_kafkas() -> None:
    assert [s.display for s in TxnState] == [
        "Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
        "PrepareEpochFence",
    ]
    assert TxnState.from_display("PrepareAbort") is TxnState.PREPARE_ABORT
    assert TxnState.from_display("Bogus") is None


@given(
    st.text(min_size=1, max_size=20),
    st.integers(0, 2**63 - 1), st.integers(0, 32767), st.integers(1, 2**31 - 1), st.sampled_from(list(TxnState)),
    st.frozensets(st.tuples(st.text(min_size=1, max_size=8), st.integers(0, 1000)), max_size=6),
    st.integers(-1, 2**62), st.integers(-1, 2**62),
)
def test_values_round_trip(txn_id: str, pid: int, epoch: int, timeout: int, state: TxnState,
                           partitions: frozenset[tuple[str, int]], updated: int, started: int) -> None:
    value = TxnValue(pid, epoch, timeout, state, partitions, updated, started)
    encoded = encode_value(value)
    assert encoded is not None
    assert decode(encode_key(txn_id), encoded) == TxnRecord(txn_id, value)

"""Property tests: every codec round-trips, corruption and truncation never pass unnoticed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.common.errors import KafkaError
from tidelog.protocol.compression import Compression
from tidelog.protocol.records import Record, build_batch, decode_records, iter_batches, scan_valid_prefix

optional_bytes = st.one_of(st.none(), st.binary(max_size=64))
headers = st.lists(st.tuples(st.text(max_size=8), optional_bytes), max_size=3).map(tuple)


@st.composite
def record_lists(draw: st.DrawFn, base_offset: int = 0) -> list[Record]:
    gaps = draw(st.lists(st.integers(min_value=1, max_value=3), min_size=1, max_size=20))
    base_ts = draw(st.integers(min_value=0, max_value=2**45))
    offsets = [base_offset + sum(gaps[:i]) for i in range(len(gaps))]
    return [
        Record(
            offset,
            base_ts + draw(st.integers(min_value=-(2**20), max_value=2**20)),
            draw(optional_bytes),
            draw(optional_bytes),
            draw(headers),
        )
        for offset in offsets
    ]


codecs = st.sampled_from(list(Compression))


@given(recs=record_lists(base_offset=0), codec=codecs, base=st.integers(min_value=0, max_value=2**40))
def test_build_then_decode_round_trips(recs: list[Record], codec: Compression, base: int) -> None:
    shifted = [Record(r.offset + base, r.timestamp, r.key, r.value, r.headers) for r in recs]
    batch = build_batch(shifted, base_offset=base, compression=codec)
    [(header, pos)] = list(iter_batches(batch))
    assert pos == 0 and header.size == len(batch)
    assert header.base_offset == base and header.last_offset == shifted[-1].offset
    assert header.records_count == len(shifted)
    assert decode_records(batch) == shifted


@given(recs=record_lists(), codec=codecs, data=st.data())
def test_any_bit_flip_in_crc_or_covered_range_is_detected(
    recs: list[Record], codec: Compression, data: st.DataObject
) -> None:
    batch = bytearray(build_batch(recs, compression=codec))
    index = data.draw(st.integers(min_value=17, max_value=len(batch) - 1))
    batch[index] ^= 1 << data.draw(st.integers(min_value=0, max_value=7))
    with pytest.raises(KafkaError):
        list(iter_batches(batch))


@given(
    batches=st.lists(st.tuples(record_lists(), codecs), min_size=1, max_size=4),
    data=st.data(),
)
def test_truncation_is_detected_and_the_valid_prefix_is_exact(
    batches: list[tuple[list[Record], Compression]], data: st.DataObject
) -> None:
    encoded = [build_batch(recs, compression=codec) for recs, codec in batches]
    buf = b"".join(encoded)
    cut = data.draw(st.integers(min_value=0, max_value=len(buf) - 1))
    boundaries = [sum(len(b) for b in encoded[:i]) for i in range(len(encoded) + 1)]
    expected = max(b for b in boundaries if b <= cut)
    result = scan_valid_prefix(buf[:cut])
    assert result.valid_bytes == expected
    assert len(result.batches) == boundaries.index(expected)
    if cut != expected:
        assert result.error is not None
        with pytest.raises(KafkaError):
            list(iter_batches(buf[:cut]))

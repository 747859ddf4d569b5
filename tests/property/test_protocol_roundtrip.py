"""Every request kio can write, for every key and version tidelog accepts, decodes to an equal object."""

from __future__ import annotations

import io
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.request_header.v1.header import RequestHeader as KioHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as KioHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records, i16, i32

from tidelog.protocol import apis
from tidelog.protocol.codec import decode_request
from tidelog.protocol.errors import InvalidRequest
from tidelog.protocol.headers import parse_request_header

st.register_type_strategy(Records, st.binary(max_size=200))  # type: ignore[type-abstract]

CASES = [
    (key, version) for key, (low, high) in sorted(apis.ACCEPTED.items()) for version in range(low, high + 1)
]


def write(entity: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def frame_for(request: Any, correlation_id: int, client_id: str | None) -> bytes:
    header_cls = KioHeaderV2 if type(request).__flexible__ else KioHeaderV1
    header = header_cls(
        request_api_key=i16(request.__api_key__),
        request_api_version=i16(request.__version__),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    return write(header) + write(request)


@pytest.mark.parametrize(("key", "version"), CASES, ids=[f"{k.name}-v{v}" for k, v in CASES])
@settings(max_examples=5)
@given(data=st.data())
def test_kio_written_requests_decode_to_equal_objects(key: int, version: int, data: st.DataObject) -> None:
    request = data.draw(st.from_type(apis.request_class(key, version)))
    correlation_id = data.draw(st.integers(-(2**31), 2**31 - 1))
    client_id = data.draw(st.none() | st.text(max_size=20))
    frame = frame_for(request, correlation_id, client_id)
    header = parse_request_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id) == (key, version, correlation_id)
    assert header.client_id == client_id
    try:
        entity_reader(type(request))(frame, header.body_offset)
    except ValueError:
        # kio writes durations it cannot read back (an int64 of milliseconds near its limit
        # overflows kio's microsecond timedelta): tidelog must refuse those bodies, not crash.
        with pytest.raises(InvalidRequest):
            decode_request(header, frame)
        return
    assert decode_request(header, frame) == request

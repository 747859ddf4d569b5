"""KIP-227 fetch sessions: the (session id, epoch) rules and what incremental responses leave out."""

from tidelog.broker.fetch_sessions import FetchSessionCache, SessionPartition
from tidelog.common.errors import ErrorCode


def req(*tps: tuple[str, int], offset: int = 0) -> list[tuple[tuple[str, int], SessionPartition]]:
    return [(tp, SessionPartition(offset, 1024)) for tp in tps]


def include(ctx, tp, state, **kw):  # type: ignore[no-untyped-def]
    defaults = dict(has_records=False, error=ErrorCode.NONE, high_watermark=10, last_stable_offset=10, log_start_offset=0)
    defaults.update(kw)
    return ctx.should_include(tp, state, **defaults)


def test_sessionless_fetch_returns_every_partition_and_no_session_id() -> None:
    cache = FetchSessionCache()
    ctx = cache.new_context(0, -1, req(("a", 0), ("a", 1)), [], now_ms=0)
    assert ctx.error is ErrorCode.NONE
    assert ctx.response_session_id == 0
    assert [tp for tp, _ in ctx.partitions] == [("a", 0), ("a", 1)]
    assert len(cache) == 0


def test_initial_epoch_opens_a_session_and_incremental_fetch_omits_unchanged_partitions() -> None:
    cache = FetchSessionCache()
    full = cache.new_context(0, 0, req(("a", 0), ("a", 1)), [], now_ms=0)
    session_id = full.response_session_id
    assert session_id > 0
    for tp, state in full.partitions:
        assert include(full, tp, state)  # a full response lists everything
    inc = cache.new_context(session_id, 1, [], [], now_ms=1)
    assert inc.error is ErrorCode.NONE
    states = dict(inc.partitions)
    assert not include(inc, ("a", 0), states[("a", 0)])  # nothing new
    assert include(inc, ("a", 1), states[("a", 1)], high_watermark=11)  # high watermark moved


def test_incremental_fetch_with_records_or_error_is_included() -> None:
    cache = FetchSessionCache()
    full = cache.new_context(0, 0, req(("a", 0)), [], now_ms=0)
    for tp, state in full.partitions:
        include(full, tp, state)
    inc = cache.new_context(full.response_session_id, 1, [], [], now_ms=1)
    (tp, state), = inc.partitions
    assert include(inc, tp, state, has_records=True)
    inc2 = cache.new_context(full.response_session_id, 2, [], [], now_ms=2)
    (tp, state), = inc2.partitions
    assert include(inc2, tp, state, error=ErrorCode.OFFSET_OUT_OF_RANGE)


def test_incremental_fetch_adds_updates_and_forgets_partitions() -> None:
    cache = FetchSessionCache()
    full = cache.new_context(0, 0, req(("a", 0), ("a", 1)), [], now_ms=0)
    sid = full.response_session_id
    inc = cache.new_context(sid, 1, req(("b", 0), ("a", 0), offset=7), [("a", 1)], now_ms=1)
    parts = dict(inc.partitions)
    assert set(parts) == {("a", 0), ("b", 0)}
    assert parts[("a", 0)].fetch_offset == 7


def test_unknown_session_and_wrong_epoch_are_refused_with_kafka_codes() -> None:
    cache = FetchSessionCache()
    assert cache.new_context(12345, 1, [], [], now_ms=0).error is ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    sid = cache.new_context(0, 0, req(("a", 0)), [], now_ms=0).response_session_id
    assert cache.new_context(sid, 5, [], [], now_ms=0).error is ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert cache.new_context(sid, 1, [], [], now_ms=0).error is ErrorCode.NONE
    assert cache.new_context(sid, 1, [], [], now_ms=0).error is ErrorCode.INVALID_FETCH_SESSION_EPOCH


def test_final_epoch_closes_the_session_and_refuses_forgotten_topics() -> None:
    cache = FetchSessionCache()
    sid = cache.new_context(0, 0, req(("a", 0)), [], now_ms=0).response_session_id
    assert cache.new_context(sid, -1, req(("a", 0)), [], now_ms=0).response_session_id == 0
    assert len(cache) == 0
    assert cache.new_context(0, -1, [], [("a", 0)], now_ms=0).error is ErrorCode.INVALID_REQUEST


def test_full_cache_evicts_only_idle_sessions() -> None:
    cache = FetchSessionCache(max_slots=1)
    first = cache.new_context(0, 0, req(("a", 0)), [], now_ms=0)
    assert first.response_session_id > 0
    busy = cache.new_context(0, 0, req(("b", 0)), [], now_ms=1000)
    assert busy.response_session_id == 0  # no slot, first session not idle long enough: sessionless
    later = cache.new_context(0, 0, req(("b", 0)), [], now_ms=10**6)
    assert later.response_session_id > 0
    assert cache.new_context(first.response_session_id, 1, [], [], now_ms=10**6).error is ErrorCode.FETCH_SESSION_ID_NOT_FOUND

"""KIP-599's controller_mutation_rate: the token bucket, strict and permissive requests, sharing."""

from __future__ import annotations

import pytest

from tidelog.quotas.entity import entity
from tidelog.quotas.manager import QuotaManager
from tidelog.quotas.mutation import MutationQuota, TokenBucket, is_strict, throttle_ms_of

RATE = 10.0  # partitions per second
BURST = RATE * 11  # controller.quota.window.num x controller.quota.window.size.seconds


def quota(strict: bool, bucket: TokenBucket | None = None) -> MutationQuota:
    return MutationQuota(bucket or TokenBucket(BURST, 0), RATE, BURST, strict)


@pytest.mark.parametrize(("api_key", "version", "strict"), [
    (19, 5, False), (19, 6, True), (19, 7, True),  # CreateTopics
    (20, 4, False), (20, 5, True),  # DeleteTopics
    (37, 2, False), (37, 3, True),  # CreatePartitions
    (0, 11, False),  # anything else is never strict
])
def test_strict_from_the_first_version_that_knows_the_error(api_key: int, version: int, strict: bool) -> None:
    assert is_strict(api_key, version) is strict


def test_strict_accepts_while_not_exceeded_even_past_zero_then_refuses_until_refilled() -> None:
    q = quota(strict=True)
    assert q.admit(90, 0) and q.bucket.tokens == 20
    assert q.admit(90, 0), "a full-enough bucket is not exceeded yet: the topic goes through"
    assert q.bucket.tokens == -70 and not q.exceeded and q.throttle_ms(0) == 0
    assert not q.admit(1, 0), "the tokens are below zero: refused"
    assert q.exceeded and q.throttle_ms(0) == 7000  # -(-70) / 10 per second
    assert q.bucket.tokens == -70, "a refused topic takes nothing"
    assert q.throttle_ms(3500) == 3500, "the time already waited is deducted"
    later = quota(strict=True, bucket=q.bucket)
    assert not later.admit(5, 6999)
    assert later.admit(5, 7001), "refilled past zero: accepted again"


def test_permissive_accepts_everything_and_throttles_once_below_zero() -> None:
    q = quota(strict=False)
    assert q.admit(100, 0) and q.throttle_ms(0) == 0
    assert q.admit(20, 0) and q.throttle_ms(0) == 1000  # -10 tokens at 10/s
    assert q.admit(30, 0) and q.throttle_ms(0) == 4000
    assert q.admitted == 150 and q.refused == 0


def test_tokens_refill_at_the_rate_up_to_the_burst() -> None:
    bucket = TokenBucket(BURST, 0)
    assert bucket.take(BURST, RATE, BURST, 0) == 0
    assert bucket.measure(RATE, BURST, 2500) == pytest.approx(25)
    assert bucket.measure(RATE, BURST, 1_000_000) == BURST, "never above the burst"


def test_a_lower_quota_caps_the_tokens_at_its_smaller_burst() -> None:
    bucket = TokenBucket(BURST, 0)
    assert bucket.measure(1.0, 11.0, 0) == 11.0


def test_throttle_time_is_what_refills_the_deficit() -> None:
    assert throttle_ms_of(5, RATE) == 0
    assert throttle_ms_of(-1, RATE) == 100
    assert throttle_ms_of(-1, 0) == 0


def test_clients_of_a_user_share_its_bucket_and_unlimited_clients_get_none() -> None:
    manager = QuotaManager()
    manager.update({entity(user="alice"): {"controller_mutation_rate": RATE}}, 0)
    first = manager.mutation_quota("alice", "a", True, 11, 0)
    second = manager.mutation_quota("alice", "b", True, 11, 0)
    assert first is not None and second is not None
    assert first[1] == second[1] == ("alice", "")
    assert first[0].admit(BURST + 1, 0)
    assert not second[0].admit(1, 0), "alice's other client sees the same empty bucket"
    assert manager.mutation_quota("bob", "c", True, 11, 0) is None


def test_default_client_quota_gives_each_client_its_own_bucket() -> None:
    manager = QuotaManager()
    manager.update({entity(client_id=None): {"controller_mutation_rate": 1.0}}, 0)
    a = manager.mutation_quota("ANONYMOUS", "a", True, 11, 0)
    b = manager.mutation_quota("ANONYMOUS", "b", True, 11, 0)
    assert a is not None and b is not None
    assert a[0].admit(12, 0) and not a[0].admit(1, 0)
    assert b[0].admit(1, 0), "client b has its own bucket"

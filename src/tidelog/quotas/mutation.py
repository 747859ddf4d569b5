"""KIP-599's ``controller_mutation_rate``: a token bucket per quota entity, strict or permissive per request.

CreateTopics, CreatePartitions and DeleteTopics mutate partitions; each topic of such a request is
charged, once it has passed every other check, the number of partitions it creates or deletes. The
charge goes to the entity the connection's (user, client-id) takes ``controller_mutation_rate`` from
(``manager.resolve``; the same precedence and sharing as the other keys).

The bucket (Kafka's ``TokenBucket`` stat): ``rate`` tokens a second accumulate up to a burst of
``samples * window seconds * rate`` (Kafka's ``controller.quota.window.num`` x
``controller.quota.window.size.seconds``, 11 s of the quota by default); a charge takes its
partitions off, and the tokens may go negative. A new bucket starts full. The quota is exceeded
while the tokens are below zero; the time that brings them back to zero, ``-tokens / rate`` seconds,
is the throttle time.

Two ways to apply it, chosen by the request's version (``strict_since``):

- **strict** (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+: clients that know the
  error): a topic is accepted whenever the quota is *not already* exceeded, even if its partitions
  take the tokens below zero (so one large topic always gets through a full bucket); once the
  tokens are below zero every further topic is refused with THROTTLING_QUOTA_EXCEEDED and the
  throttle time, until they refill;
- **permissive** (older versions, whose clients do not know the error): every topic is accepted;
  when the charge leaves the tokens below zero, the response carries the throttle time and the
  connection is muted that long, as for a byte-rate quota.

A ``MutationQuota`` lives for one request. Its ``throttle_ms`` is the last throttle time observed,
less the time since (Kafka's ``AbstractControllerMutationQuota.throttleTime``), so a request that
waited does not add its wait on top. Times are milliseconds from any monotonic clock the caller
passes in.
"""

from __future__ import annotations

from collections.abc import Mapping

# The first version of each API whose clients know THROTTLING_QUOTA_EXCEEDED (KIP-599).
CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
STRICT_SINCE: Mapping[int, int] = {CREATE_TOPICS: 6, DELETE_TOPICS: 5, CREATE_PARTITIONS: 3}


def is_strict(api_key: int, api_version: int) -> bool:
    return api_version >= STRICT_SINCE.get(api_key, 1 << 15)


class TokenBucket:
    """Tokens of one quota entity; ``rate`` and ``burst`` are passed in, so a new quota applies at once."""

    __slots__ = ("last_ms", "tokens")

    def __init__(self, burst: float, now_ms: int) -> None:
        self.tokens = burst
        self.last_ms = now_ms

    def _refill(self, rate: float, burst: float, now_ms: int) -> None:
        elapsed = max(0, now_ms - self.last_ms)
        self.tokens = min(burst, self.tokens + rate * elapsed / 1000.0)
        self.last_ms = max(self.last_ms, now_ms)

    def measure(self, rate: float, burst: float, now_ms: int) -> float:
        self._refill(rate, burst, now_ms)
        return self.tokens

    def take(self, permits: float, rate: float, burst: float, now_ms: int) -> float:
        """Take ``permits`` (the tokens may go negative); the tokens left."""
        self._refill(rate, burst, now_ms)
        self.tokens = min(burst, self.tokens - permits)
        return self.tokens


def throttle_ms_of(tokens: float, rate: float) -> int:
    """How long until ``tokens`` below zero refill to zero at ``rate`` tokens/s (0 if not below)."""
    if tokens >= 0 or rate <= 0:
        return 0
    return round(-tokens / rate * 1000)


class MutationQuota:
    """One request's view of its entity's bucket: admits or refuses each topic's partitions."""

    def __init__(self, bucket: TokenBucket, rate: float, burst: float, strict: bool) -> None:
        self.bucket = bucket
        self.rate = rate
        self.burst = burst
        self.strict = strict
        self.last_throttle_ms = 0
        self.last_recorded_ms = 0
        self.admitted = 0.0  # partitions charged by this request
        self.refused = 0  # topics refused by this request (strict only)

    def admit(self, permits: int, now_ms: int) -> bool:
        """Charge ``permits`` partitions; False (strict only) when the quota is already exceeded."""
        if self.strict:
            tokens = self.bucket.measure(self.rate, self.burst, now_ms)
            if tokens < 0:
                self._throttled(tokens, now_ms)
                self.refused += 1
                return False
            self.bucket.take(permits, self.rate, self.burst, now_ms)
        else:
            tokens = self.bucket.take(permits, self.rate, self.burst, now_ms)
            if tokens < 0:
                self._throttled(tokens, now_ms)
        self.admitted += permits
        return True

    def _throttled(self, tokens: float, now_ms: int) -> None:
        self.last_throttle_ms = throttle_ms_of(tokens, self.rate)
        self.last_recorded_ms = now_ms

    @property
    def exceeded(self) -> bool:
        return self.last_throttle_ms > 0

    def throttle_ms(self, now_ms: int) -> int:
        """The throttle time to answer with: the last one observed, less the time since."""
        return max(0, self.last_throttle_ms - (now_ms - self.last_recorded_ms))

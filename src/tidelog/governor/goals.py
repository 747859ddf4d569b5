"""The goals, in the priority order the planner runs them: each a small object with pure methods
over a ``State``:

- ``violations(s)``: how many brokers or partitions break the goal (0: met);
- ``score(s)``: a number for reports, lower is better (0 for a met hard goal);
- ``propose(s, allowed)``: moves, best first, generated lazily against the *current* state: the
  planner applies each move it is given before asking for the next, so each candidate is re-checked
  before it is yielded and alternatives for a replica already moved are skipped. ``allowed(move)`` is
  the verdict of the higher goals; a goal yields only moves they allow (filtering while choosing a
  destination, rather than after, is what keeps a 100,000-partition plan fast);
- ``accepts(s, move)``: False when the move would make this goal worse. ``allowed`` for goal k is
  "goals 0..k-1 all accept": lower goals never undo higher ones. ``accepts_all(s, moves)`` judges an
  ``Exchange`` (replica moves of distinct partitions applied together) by their sum: a goal whose
  verdict is per partition (racks, pools, excluded brokers) checks each move, a goal of per-broker
  totals (capacities, balance) the net change of each broker.

Hard goals (the plan fails if they cannot be met): excluded brokers emptied (dead, draining, offline
log dir), rack awareness (no rack holds more than ceil(RF / racks) replicas of a partition), tenant
pools (a tenant's topics only on its brokers), replica capacity, disk capacity. Tenant pools are hard
and sit with the placement constraints, above the balance goals: as the lowest goal they could never
move a replica back into its pool without unbalancing a higher goal.

Exchanges: a count goal (replica count) whose single moves the bytes goals above it refuse (the
under-loaded broker is at the top of its disk or network-in band) proposes 2-for-1 exchanges: two
small replicas from the over-loaded broker, one replica from the under-loaded broker back whose
bytes are the nearest to their sum, so the counts move by one and the bytes barely. The leadership
goals do the same with preferred leaders, copying nothing: the leader-count goal trades two
leaderships for one back whose network out is the nearest to theirs (when the network-out goal
refuses single leader moves), the leader-bytes-in goal swaps one leadership for one (when the
leader-count goal, above it, refuses to change the counts).

Soft goals keep each broker's level within ``[mean * (1 - t), mean * (1 + t)]`` (counts round the
bounds outwards): disk usage (ratio of capacity), network in, network out, replica count, leader
count, leader bytes in. A balance move transfers an ``amount`` of the metric from one broker to
another; ``amount`` depends on the replica's role (leader or follower), see ``Metric``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import combinations

from tidelog.governor.model import NO_TENANT
from tidelog.governor.state import Exchange, LeaderMove, Move, ReplicaMove, State

Proposal = Move | Exchange
Allowed = Callable[[Proposal], bool]


class Goal(ABC):
    name = "goal"
    hard = False

    def prepare(self, s: State) -> None:
        """Called once before the planner works on this goal with ``s`` (caches bounds); none by default."""
        return None

    @abstractmethod
    def violations(self, s: State) -> int:
        """How many brokers (or partitions) break the goal in ``s``."""

    def score(self, s: State) -> float:
        return float(self.violations(s))

    @abstractmethod
    def propose(self, s: State, allowed: Allowed) -> Iterator[Proposal]:
        """Moves toward the goal, best first, each one ``allowed`` by the goals above."""

    def accepts(self, s: State, move: Move) -> bool:
        return True

    def propose_exchanges(self, s: State, allowed: Allowed) -> Iterator[Proposal]:
        """Exchanges, tried once single moves are exhausted (none by default)."""
        return iter(())

    def accepts_all(self, s: State, moves: tuple[Move, ...]) -> bool:
        """An exchange: right for goals judged per partition (the moves touch distinct partitions)."""
        return all(self.accepts(s, m) for m in moves)


def net_change(moves: tuple[Move, ...], amount: Callable[[Move], float]) -> dict[int, float]:
    """Broker -> what an exchange adds to it (negative: takes away)."""
    out: dict[int, float] = {}
    for m in moves:
        value = amount(m)
        out[m.source] = out.get(m.source, 0.0) - value
        out[m.destination] = out.get(m.destination, 0.0) + value
    return out


def _replica(amount: Callable[[Move], float]) -> Callable[[Move], float]:
    """``amount`` for replica moves, 0 for leadership moves (which move no replica and no byte of disk)."""
    return lambda m: amount(m) if isinstance(m, ReplicaMove) else 0.0


def _by_disk_ratio(s: State, brokers: list[int]) -> list[int]:
    return sorted(brokers, key=s.disk_ratio)


# ----------------------------------------------------------------------------------- hard goals


class ExcludedBrokersGoal(Goal):
    """No replica and no leadership on a broker that is dead, draining or has an offline log dir."""

    name, hard = "excluded-brokers", True

    def violations(self, s: State) -> int:
        return sum(s.replica_count[b] for b in s.brokers() if s.model.excluded[b])

    def propose(self, s: State, allowed: Allowed) -> Iterator[Move]:
        rack = s.model.broker_rack
        usable = [b for b in s.brokers() if s.usable(b)]
        for b in s.brokers():
            if not s.model.excluded[b]:
                continue
            for p in sorted(s.on_broker[b]):
                taken = {rack[r] for r in s.replicas[p] if r != b}
                order = sorted(usable, key=lambda d: (rack[d] in taken, s.disk_ratio(d)))
                for d in order:
                    if p not in s.on_broker[b]:
                        break
                    if d not in s.replicas[p] and allowed(move := ReplicaMove(p, b, d)):
                        yield move

    def accepts(self, s: State, move: Move) -> bool:
        return s.usable(move.destination)


class RackAwareGoal(Goal):
    """No rack (or virtual rack group) holds more than ceil(RF / racks) replicas of one partition."""

    name, hard = "rack-awareness", True

    def prepare(self, s: State) -> None:
        self.racks = len({s.model.broker_rack[b] for b in s.brokers() if s.usable(b)}) or 1

    def allowed(self, rf: int) -> int:
        return math.ceil(rf / self.racks)

    def _worst(self, s: State, p: int) -> int:
        counts: dict[int, int] = {}
        for b in s.replicas[p]:
            r = s.model.broker_rack[b]
            counts[r] = counts.get(r, 0) + 1
        return max(counts.values(), default=0)

    def violations(self, s: State) -> int:
        self.prepare(s)
        return sum(1 for p, replicas in enumerate(s.replicas) if self._worst(s, p) > self.allowed(len(replicas)))

    def propose(self, s: State, allowed: Allowed) -> Iterator[Move]:
        self.prepare(s)
        rack = s.model.broker_rack
        usable = [b for b in s.brokers() if s.usable(b)]
        for p, replicas in enumerate(s.replicas):
            limit = self.allowed(len(replicas))
            if self._worst(s, p) <= limit:
                continue
            for b in replicas:
                same = sum(1 for r in s.replicas[p] if rack[r] == rack[b])
                if same <= limit or b not in s.replicas[p]:
                    continue
                counts = [rack[r] for r in s.replicas[p]]
                for d in _by_disk_ratio(s, [d for d in usable if counts.count(rack[d]) < limit]):
                    if b not in s.replicas[p]:
                        break
                    if d not in s.replicas[p] and allowed(move := ReplicaMove(p, b, d)):
                        yield move

    def accepts(self, s: State, move: Move) -> bool:
        if isinstance(move, LeaderMove):
            return True
        rack = s.model.broker_rack
        target = rack[move.destination]
        if target == rack[move.source]:
            return True
        after = sum(1 for r in s.replicas[move.partition] if r != move.source and rack[r] == target) + 1
        return after <= self.allowed(len(s.replicas[move.partition]))


class TenantPoolGoal(Goal):
    """A tenant's topics keep their replicas on the tenant's brokers."""

    name, hard = "tenant-pools", True

    def _outside(self, s: State, p: int) -> list[int]:
        tenant = s.model.tenant_of(p)
        if tenant == NO_TENANT:
            return []
        pool = s.model.tenant_brokers[tenant]
        return [b for b in s.replicas[p] if b not in pool]

    def violations(self, s: State) -> int:
        if not s.model.tenant_brokers:
            return 0
        return sum(len(self._outside(s, p)) for p in range(len(s.replicas)))

    def propose(self, s: State, allowed: Allowed) -> Iterator[Move]:
        if not s.model.tenant_brokers:
            return
        for p in range(len(s.replicas)):
            for b in self._outside(s, p):
                pool = [d for d in s.model.tenant_brokers[s.model.tenant_of(p)] if s.usable(d)]
                for d in _by_disk_ratio(s, pool):
                    if b not in s.replicas[p]:
                        break
                    if d not in s.replicas[p] and allowed(move := ReplicaMove(p, b, d)):
                        yield move

    def accepts(self, s: State, move: Move) -> bool:
        tenant = s.model.tenant_of(move.partition)
        return tenant == NO_TENANT or move.destination in s.model.tenant_brokers[tenant]


@dataclass
class ReplicaCapacityGoal(Goal):
    """At most ``max_replicas`` replicas per broker."""

    max_replicas: int = 10_000
    name = "replica-capacity"
    hard = True

    def violations(self, s: State) -> int:
        return sum(1 for b in s.brokers() if s.replica_count[b] > self.max_replicas)

    def propose(self, s: State, allowed: Allowed) -> Iterator[Move]:
        usable = [b for b in s.brokers() if s.usable(b)]
        for b in s.brokers():
            for p in sorted(s.on_broker[b], key=lambda p: s.model.size[p]):
                if s.replica_count[b] <= self.max_replicas:
                    break
                for d in sorted(usable, key=lambda d: s.replica_count[d]):
                    if d not in s.replicas[p] and p in s.on_broker[b] and allowed(move := ReplicaMove(p, b, d)):
                        yield move

    def accepts(self, s: State, move: Move) -> bool:
        return isinstance(move, LeaderMove) or s.replica_count[move.destination] + 1 <= max(
            self.max_replicas, s.replica_count[move.destination])

    def accepts_all(self, s: State, moves: tuple[Move, ...]) -> bool:
        return all(s.replica_count[b] + delta <= max(self.max_replicas, s.replica_count[b])
                   for b, delta in net_change(moves, _replica(lambda m: 1.0)).items() if delta > 0)


@dataclass
class DiskCapacityGoal(Goal):
    """No broker's logs use more than ``threshold`` of its disk capacity."""

    threshold: float = 0.8
    name = "disk-capacity"
    hard = True

    def _limit(self, s: State, b: int) -> float:
        return self.threshold * s.model.disk_capacity[b]

    def violations(self, s: State) -> int:
        return sum(1 for b in s.brokers() if s.usable(b) and s.disk[b] > self._limit(s, b))

    def score(self, s: State) -> float:
        return max((s.disk_ratio(b) for b in s.brokers() if s.usable(b)), default=0.0)

    def propose(self, s: State, allowed: Allowed) -> Iterator[Move]:
        usable = [b for b in s.brokers() if s.usable(b)]
        for b in usable:
            for p in sorted(s.on_broker[b], key=lambda p: -s.model.size[p]):
                if s.disk[b] <= self._limit(s, b):
                    break
                for d in _by_disk_ratio(s, usable):
                    if p not in s.on_broker[b]:
                        break
                    if (d not in s.replicas[p] and s.disk[d] + s.model.size[p] <= self._limit(s, d)
                            and allowed(move := ReplicaMove(p, b, d))):
                        yield move

    def accepts(self, s: State, move: Move) -> bool:
        if isinstance(move, LeaderMove):
            return True
        d = move.destination
        return s.disk[d] + s.model.size[move.partition] <= max(self._limit(s, d), s.disk[d])

    def accepts_all(self, s: State, moves: tuple[Move, ...]) -> bool:
        return all(s.disk[b] + delta <= max(self._limit(s, b), s.disk[b])
                   for b, delta in net_change(moves, _replica(lambda m: float(s.model.size[m.partition]))).items()
                   if delta > 0)


# ----------------------------------------------------------------------------------- balance goals

# (state, partition, broker) -> the amount a move of that replica (or that leadership) transfers
Amount = Callable[[State, int, int], float]


@dataclass(frozen=True)
class Metric:
    name: str
    load: Callable[[State], list[float] | list[int]]
    replica_amount: Amount | None     # None: this metric is balanced by leader moves only
    leader_amount: Amount | None      # None: leadership does not change this metric
    by_capacity: bool = False         # level = load / disk capacity
    integral: bool = False
    exchanges: bool = False           # also 2-for-1 exchanges (a count of replicas)
    leader_exchanges: int = 0         # also leadership exchanges: this many leaderships over for one back


def _if_leader(value: Callable[[State, int], float]) -> Amount:
    return lambda s, p, b: value(s, p) if s.leader[p] == b else 0.0


DISK = Metric("disk-usage", lambda s: s.disk, lambda s, p, b: float(s.model.size[p]), None, by_capacity=True)
NETWORK_IN = Metric("network-in", lambda s: s.nw_in, lambda s, p, b: s.model.bytes_in[p], None)
NETWORK_OUT = Metric("network-out", lambda s: s.nw_out, _if_leader(State.leader_out),
                     lambda s, p, b: s.leader_out(p))
REPLICAS = Metric("replica-count", lambda s: s.replica_count, lambda s, p, b: 1.0, None, integral=True, exchanges=True)
LEADERS = Metric("leader-count", lambda s: s.leader_count, None, lambda s, p, b: 1.0, integral=True,
                 leader_exchanges=2)
LEADER_IN = Metric("leader-bytes-in", lambda s: s.leader_in, None, lambda s, p, b: s.model.bytes_in[p],
                   leader_exchanges=1)


class BalanceGoal(Goal):
    hard = False

    def __init__(self, metric: Metric, threshold: float = 0.10) -> None:
        self.metric = metric
        self.threshold = threshold
        self.name = metric.name

    def capacity(self, s: State, b: int) -> float:
        return float(s.model.disk_capacity[b]) if self.metric.by_capacity else 1.0

    def level(self, s: State, b: int) -> float:
        capacity = self.capacity(s, b)
        return self.metric.load(s)[b] / capacity if capacity > 0 else math.inf

    def _levels(self, s: State) -> Callable[[int], float]:
        """A fast ``level`` bound to ``s`` (the load list is updated in place by moves)."""
        load = self.metric.load(s)
        if not self.metric.by_capacity:
            return load.__getitem__
        inverse = [1.0 / c if c > 0 else math.inf for c in s.model.disk_capacity]
        return lambda b: load[b] * inverse[b]

    def bounds(self, s: State) -> tuple[float, float]:
        cached = s.cache.get(self.name)
        if cached is None:
            usable = [b for b in s.brokers() if s.usable(b)]
            load = self.metric.load(s)
            total = float(sum(load))
            capacity = sum(self.capacity(s, b) for b in usable)
            mean = total / capacity if capacity > 0 else 0.0
            lo, hi = mean * (1 - self.threshold), mean * (1 + self.threshold)
            if self.metric.integral:
                lo, hi = math.floor(lo), math.ceil(hi)
            cached = s.cache[self.name] = (lo, hi, mean)
        return cached[0], cached[1]

    def prepare(self, s: State) -> None:
        s.cache.pop(self.name, None)
        self.bounds(s)

    def violations(self, s: State) -> int:
        lo, hi = self.bounds(s)
        eps = 1e-9 * max(abs(hi), 1.0)
        level = self._levels(s)
        return sum(1 for b in s.brokers() if s.usable(b) and not lo - eps <= level(b) <= hi + eps)

    def score(self, s: State) -> float:
        """Largest deviation of a broker from the mean, as a fraction of the mean."""
        self.bounds(s)
        mean = s.cache[self.name][2]
        if mean <= 0:
            return 0.0
        level = self._levels(s)
        return max((abs(level(b) - mean) / mean for b in s.brokers() if s.usable(b)), default=0.0)

    def _amount(self, s: State, move: Move) -> float:
        fn = self.metric.replica_amount if isinstance(move, ReplicaMove) else self.metric.leader_amount
        return fn(s, move.partition, move.source) if fn is not None else 0.0

    def accepts(self, s: State, move: Move) -> bool:
        amount = self._amount(s, move)
        if amount == 0:
            return True
        lo, hi = self.bounds(s)
        src, dst = move.source, move.destination
        new_dst = self.level(s, dst) + amount / self.capacity(s, dst)
        new_src = self.level(s, src) - amount / self.capacity(s, src)
        return new_dst <= hi and (new_src >= lo or not s.usable(src))

    def accepts_all(self, s: State, moves: tuple[Move, ...]) -> bool:
        """Every broker the exchange adds to stays under the upper bound, every one it takes from over
        the lower bound (the rule of ``accepts`` on the net change)."""
        lo, hi = self.bounds(s)
        for b, delta in net_change(moves, lambda m: self._amount(s, m)).items():
            level = self.level(s, b) + delta / self.capacity(s, b)
            if (delta > 0 and level > hi) or (delta < 0 and level < lo and s.usable(b)):
                return False
        return True

    def _candidates(self, s: State, b: int) -> list[tuple[float, int, bool]]:
        """(amount, partition, is-leader-move) of what broker ``b`` could hand over, largest first."""
        out: list[tuple[float, int, bool]] = []
        replica, leader = self.metric.replica_amount, self.metric.leader_amount
        for p in s.on_broker[b]:
            if replica is not None:
                out.append((replica(s, p, b), p, False))
            if leader is not None and s.leader[p] == b and len(s.replicas[p]) > 1:
                out.append((leader(s, p, b), p, True))
        size = s.model.size
        # equal amounts: a leader move (copies nothing) first, then the smallest replica
        out.sort(key=lambda c: (-c[0], not c[2], size[c[1]], c[1]))
        return out

    def propose(self, s: State, allowed: Allowed) -> Iterator[Proposal]:
        lo, hi = self.bounds(s)
        level = self._levels(s)
        usable = [b for b in s.brokers() if s.usable(b)]
        candidates: dict[int, list[tuple[float, int, bool]]] = {}
        for b in sorted(usable, key=lambda b: -level(b)):
            if level(b) <= hi:
                break
            yield from self._shed(s, b, usable, lo, hi, candidates, allowed, lambda b=b: level(b) <= hi)  # type: ignore[misc]
        for d in sorted(usable, key=level):
            if level(d) >= lo:
                break
            if self.metric.leader_amount is not None:
                yield from self._pull_leadership(s, d, lo, hi, allowed)
            if self.metric.replica_amount is None:
                continue
            for b in sorted(usable, key=lambda b: -level(b)):
                if level(d) >= lo or level(b) <= level(d):
                    break
                yield from self._shed(s, b, [d], lo, hi, candidates, allowed, lambda d=d: level(d) >= lo)  # type: ignore[misc]

    def propose_exchanges(self, s: State, allowed: Allowed) -> Iterator[Proposal]:
        lo, hi = self.bounds(s)
        usable = [b for b in s.brokers() if s.usable(b)]
        if self.metric.exchanges:
            yield from self._exchanges(s, usable, lo, hi, allowed)
        if self.metric.leader_exchanges:
            yield from self._leader_exchanges(s, usable, lo, hi, allowed)

    def _leader_exchanges(self, s: State, usable: list[int], lo: float, hi: float,
                          allowed: Allowed) -> Iterator[Proposal]:
        """Leadership exchanges between an over-loaded broker ``b`` and an under-loaded ``d`` (or one
        outside the band on either side) that follow each other's partitions: ``k`` leaderships from
        ``b`` to ``d`` for one from ``d`` back, nothing copied (preferred-leader changes only).

        - k = 2 (leader count): the counts move by one while network out barely does: ``q``'s
          leader network-out is the nearest to the sum of ``p1``'s and ``p2``'s (the single leader
          move the network-out goal refused is traded for a near-neutral one);
        - k = 1 (leader bytes in): a swap; the counts stay and ``in(p) - in(q)`` moves from ``b`` to
          ``d``, chosen nearest to half the gap between them (so neither overshoots).

        The goal's own band is kept as by single moves (``b`` stays above ``lo``, ``d`` below
        ``hi``); the higher goals judge the net change (``accepts_all``)."""
        k, fn = self.metric.leader_exchanges, self.metric.leader_amount
        assert fn is not None
        level, out = self._levels(s), s.leader_out
        led_with: dict[int, dict[int, list[int]]] = {}  # leader -> follower -> partitions (stale: re-checked)

        def shared(b: int, d: int) -> list[int]:
            if b not in led_with:
                by_follower: dict[int, list[int]] = {}
                for p in s.on_broker[b]:
                    if s.leader[p] == b:
                        for f in s.replicas[p]:
                            if f != b:
                                by_follower.setdefault(f, []).append(p)
                led_with[b] = by_follower
            return [p for p in led_with[b].get(d, ()) if s.leader[p] == b and d in s.replicas[p]]

        def fits(b: int, d: int, x: float) -> bool:
            return x > 0 and level(b) - x >= lo and level(d) + x <= hi

        for b in sorted(usable, key=lambda b: -level(b)):
            for d in sorted(usable, key=level):
                if level(d) >= level(b) or (level(b) <= hi and level(d) >= lo):
                    break
                tried = 0
                while tried < EXCHANGES_TRIED and not (level(b) <= hi and level(d) >= lo):
                    over, back = shared(b, d), shared(d, b)
                    if len(over) < k or not back:
                        break
                    options: list[tuple[float, Exchange]] = []
                    if k == 2:
                        outs = {p: out(p) for p in over}
                        back_by_out = sorted((out(q), q) for q in back)
                        small = sorted(over, key=lambda p: (outs[p], p))[:8]
                        for p1, p2 in combinations(small, 2):
                            want = outs[p1] + outs[p2]
                            i = bisect_left(back_by_out, (want, -1))
                            for q_out, q in back_by_out[max(0, i - 1):i + 1]:  # the nearest below and above
                                x = fn(s, p1, b) + fn(s, p2, b) - fn(s, q, d)
                                if fits(b, d, x):
                                    options.append((abs(q_out - want) / max(want, 1e-9), Exchange(
                                        (LeaderMove(p1, b, d), LeaderMove(p2, b, d), LeaderMove(q, d, b)))))
                    else:
                        half = (level(b) - level(d)) / 2
                        back_by_amount = sorted((fn(s, q, d), q) for q in back)
                        for p in sorted(over, key=lambda p: (-fn(s, p, b), p))[:16]:
                            amount = fn(s, p, b)
                            i = bisect_left(back_by_amount, (amount - half, -1))
                            for q_amount, q in back_by_amount[max(0, i - 1):i + 1]:
                                x = amount - q_amount
                                if fits(b, d, x):
                                    options.append((abs(x - half), Exchange((LeaderMove(p, b, d), LeaderMove(q, d, b)))))
                    options.sort(key=lambda o: o[0])
                    chosen = None
                    for _distance, exchange in options[:EXCHANGES_TRIED - tried]:
                        tried += 1
                        if allowed(exchange):
                            chosen = exchange
                            break
                    if chosen is None:
                        break
                    yield chosen

    def _exchanges(self, s: State, usable: list[int], lo: float, hi: float, allowed: Allowed) -> Iterator[Proposal]:
        """2-for-1 exchanges between an over-loaded broker ``b`` and an under-loaded ``d`` (or one
        outside the band on either side): ``p1``, ``p2`` from ``b`` to ``d`` (among ``b``'s smallest),
        ``q`` from ``d`` to ``b`` with the size nearest to theirs. Each pair of brokers is given
        ``EXCHANGES_TRIED`` candidates; each broker's candidates are sorted once per pass."""
        level, size, bytes_in = self._levels(s), s.model.size, s.model.bytes_in
        smallest: dict[int, list[int]] = {}
        by_size: dict[int, list[tuple[int, int]]] = {}
        for b in sorted(usable, key=lambda b: -level(b)):
            if level(b) - 1 < lo:
                break
            for d in sorted(usable, key=level):
                if level(d) + 1 > hi or level(b) - level(d) < 2 or (level(b) <= hi and level(d) >= lo):
                    break
                if b not in smallest:
                    smallest[b] = sorted(s.on_broker[b], key=lambda p: (size[p], p))[:4 * EXCHANGES_TRIED]
                if d not in by_size:
                    by_size[d] = sorted((size[q], q) for q in s.on_broker[d])
                small = [p for p in smallest[b] if p in s.on_broker[b] and d not in s.replicas[p]][:8]
                back = by_size[d]
                tried = 0
                for p1, p2 in combinations(small, 2):
                    if tried >= EXCHANGES_TRIED or level(b) - level(d) < 2 or (level(b) <= hi and level(d) >= lo):
                        break
                    if p1 not in s.on_broker[b] or p2 not in s.on_broker[b]:
                        continue
                    want_size, want_in = size[p1] + size[p2], bytes_in[p1] + bytes_in[p2]
                    i = bisect_left(back, (want_size, -1))
                    # nearest in size, then in network in (the two bytes goals above judge both)
                    nearest = sorted(back[max(0, i - 8):i + 8], key=lambda c: (
                        abs(c[0] - want_size) / max(want_size, 1) + abs(bytes_in[c[1]] - want_in) / max(want_in, 1e-9)))
                    for _size, q in nearest:
                        if q not in s.on_broker[d] or b in s.replicas[q] or d in s.replicas[p1] or d in s.replicas[p2]:
                            continue
                        tried += 1
                        exchange = Exchange((ReplicaMove(p1, b, d), ReplicaMove(p2, b, d), ReplicaMove(q, d, b)))
                        if allowed(exchange):
                            yield exchange
                            break

    def _pull_leadership(self, s: State, d: int, lo: float, hi: float, allowed: Allowed) -> Iterator[Move]:
        """Leader moves onto an under-loaded broker ``d`` from the leaders of partitions it follows."""
        level, fn = self._levels(s), self.metric.leader_amount
        assert fn is not None
        followed = sorted(((fn(s, p, s.leader[p]), p) for p in s.on_broker[d] if 0 <= s.leader[p] != d),
                          key=lambda c: (-c[0], c[1]))
        for _amount, p in followed:
            if level(d) >= lo:
                return
            b = s.leader[p]
            if b == d or b < 0 or not s.usable(b):
                continue
            amount = fn(s, p, b)
            if (level(b) - amount / self.capacity(s, b) >= lo and level(d) + amount / self.capacity(s, d) <= hi
                    and allowed(move := LeaderMove(p, b, d))):
                yield move

    def _shed(self, s: State, b: int, destinations: list[int], lo: float, hi: float,
              cache: dict[int, list[tuple[float, int, bool]]], allowed: Allowed,
              done: Callable[[], bool]) -> Iterator[Move]:
        """Moves handing load from ``b`` to ``destinations`` until ``done()``; each candidate replica is
        tried on at most ``DESTINATIONS_TRIED`` destinations (least loaded first)."""
        level = self._levels(s)
        inverse = 1.0 / self.capacity(s, b)
        if b not in cache:
            cache[b] = self._candidates(s, b)
        for _stale_amount, p, leader_move in cache[b]:
            if done():
                return
            fn = self.metric.leader_amount if leader_move else self.metric.replica_amount
            assert fn is not None
            if (s.leader[p] != b) if leader_move else (p not in s.on_broker[b]):
                continue
            amount = fn(s, p, b)
            if amount <= 0 or level(b) - amount * inverse < lo:
                continue
            tried = 0
            if leader_move:
                among = set(destinations)
                options = sorted((r for r in s.replicas[p] if r != b and r in among), key=level)
            else:
                options = sorted(destinations, key=level)
            for d in options:
                if tried >= DESTINATIONS_TRIED or level(d) + amount / self.capacity(s, d) > hi:
                    break
                if not leader_move and d in s.replicas[p]:
                    continue
                tried += 1
                move: Move = LeaderMove(p, b, d) if leader_move else ReplicaMove(p, b, d)
                if not allowed(move):
                    continue
                yield move
                if (s.leader[p] != b) if leader_move else (p not in s.on_broker[b]):
                    break


DESTINATIONS_TRIED = 40
EXCHANGES_TRIED = 12


def default_goals(*, disk_threshold: float = 0.8, max_replicas: int = 10_000, balance_threshold: float = 0.10,
                  leader_threshold: float = 0.10) -> list[Goal]:
    return [
        ExcludedBrokersGoal(), RackAwareGoal(), TenantPoolGoal(), ReplicaCapacityGoal(max_replicas),
        DiskCapacityGoal(disk_threshold),
        BalanceGoal(DISK, balance_threshold), BalanceGoal(NETWORK_IN, balance_threshold),
        BalanceGoal(NETWORK_OUT, balance_threshold), BalanceGoal(REPLICAS, balance_threshold),
        BalanceGoal(LEADERS, leader_threshold), BalanceGoal(LEADER_IN, leader_threshold),
    ]


def hard_goals(goals: list[Goal]) -> list[Goal]:
    return [g for g in goals if g.hard]

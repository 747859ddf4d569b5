"""One governor round (``Operator.tick``): observe, heal, plan, execute, all through ``Cluster`` and
``Store``. The service (``app``) runs it every ``governor.interval.ms``; ``tidelog governor execute``
and ``drain`` run it in the foreground until their plan is done.

A round:

1. observe: Metadata, DescribeCluster, DescribeLogDirs of every broker, ListPartitionReassignments,
   the Prometheus endpoints; the stored plan and control records;
2. heal: missing brokers past the grace period, offline log dirs and drained brokers are excluded;
3. with no plan stored: a hard-goals plan when an excluded broker still holds replicas, a full plan
   when a broker was added (self-healing) or a balance goal is violated (``governor.auto.balance``);
4. with a plan: the circuit breaker's verdict (cancel / pause / resume a breaker pause), preferred
   elections for finished moves, cancellation of stalled ones, throttles for what will be in flight,
   then AlterPartitionReassignments for the next moves; when nothing is left, throttles are removed
   and the plan is closed (``last``).

Anything the cluster refuses is logged in ``events`` (shown by the API and ``status``), never fatal:
the next round starts from the cluster's answer again.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from tidelog.governor import healing
from tidelog.governor.breaker import Health, Verdict, isr_shrinks, judge
from tidelog.governor.cluster import Cluster, ClusterError, Snapshot
from tidelog.governor.collect import build_model
from tidelog.governor.config import GovernorConfig
from tidelog.governor.execution import Progress, Throttles, classify, key, next_moves, throttles, track
from tidelog.governor.goals import Goal, default_goals, hard_goals
from tidelog.governor.metrics import FLAVOURS, BrokerLoad, Scrape, broker_load, scrape
from tidelog.governor.model import ClusterModel
from tidelog.governor.planner import PartitionMove, Plan, plan
from tidelog.governor.store import Store

log = logging.getLogger(__name__)
PERMANENT = ("UNKNOWN_TOPIC_OR_PARTITION", "INVALID_REPLICA_ASSIGNMENT", "INVALID_REQUEST")


class Engine:
    def __init__(self, config: GovernorConfig, cluster: Cluster, store: Store,
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.cluster = cluster
        self.store = store
        self.clock = clock
        self.snapshot: Snapshot | None = None
        self.model: ClusterModel | None = None
        self.health = Health()
        self.verdict = Verdict("ok")
        self.excluded: dict[int, str] = {}
        self.reassignment_supported = False
        self.stored: dict[str, Any] = {}
        self.events: collections.deque[dict[str, Any]] = collections.deque(maxlen=200)
        self._missing: dict[int, int] = {}
        self._progress: dict[tuple[str, int], Progress] = {}
        self._isr: dict[tuple[str, int], frozenset[int]] = {}
        self._scrapes: dict[int, Scrape] = {}
        self._healthy_since_ms: int | None = None
        self.rounds = 0
        # a round and an operator's cancel (the service's API) never interleave: both rewrite the plan
        self.acting = asyncio.Lock()

    # -- helpers -----------------------------------------------------------------------------------

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def event(self, kind: str, message: str) -> None:
        log.info("%s: %s", kind, message)
        self.events.append({"atMs": self.now_ms(), "kind": kind, "message": message})

    def goals(self) -> list[Goal]:
        c = self.config
        return default_goals(disk_threshold=c.disk_threshold, max_replicas=c.max_replicas,
                             balance_threshold=c.balance_threshold, leader_threshold=c.balance_threshold)

    @property
    def control(self) -> dict[str, Any]:
        found: dict[str, Any] = self.stored.get("control") or {}
        return {"paused": False, "pausedBy": "", "reason": "", "drained": [], **found}

    async def write(self, key_: str, value: object | None) -> None:
        await asyncio.to_thread(self.store.write, key_, value)
        if value is None:
            self.stored.pop(key_, None)
        else:
            self.stored[key_] = value

    async def set_control(self, **changes: Any) -> None:
        await self.write("control", {**self.control, **changes, "updatedMs": self.now_ms()})

    # -- observe -----------------------------------------------------------------------------------

    async def observe(self) -> ClusterModel:
        snap = await self.cluster.snapshot()
        self.reassignment_supported = await self.cluster.supports_reassignment()
        self.stored = await asyncio.to_thread(self.store.read)
        loads = await asyncio.to_thread(self._loads, snap)
        now = self.now_ms()
        referenced = {b for p in snap.partitions.values() for b in p.replicas}
        self._missing = healing.missing_since(self._missing, snap.brokers, referenced, now)
        offline = [b for b, dirs in snap.log_dirs.items() if any(d.offline for d in dirs)]
        excluded = healing.exclusions(self._missing, offline, self.control["drained"], now, self.config.grace_ms)
        for b, why in excluded.items():
            if b not in self.excluded:
                self.event("exclude", f"broker {b}: {why}")
        self.excluded = excluded
        self.model = build_model(snap, loads, self.config.model, excluded)
        self.health = self._health(snap, loads)
        self.snapshot = snap
        return self.model

    def _loads(self, snap: Snapshot) -> dict[int, BrokerLoad]:
        flavour = FLAVOURS[self.config.flavour]
        out = {}
        for b, broker in snap.brokers.items():
            url = self.config.metrics_url(b, broker.host)
            if url is None:
                continue
            current = scrape(url, self.clock())
            if current is None:
                continue
            out[b] = broker_load(self._scrapes.get(b), current, flavour)
            self._scrapes[b] = current
        return out

    def _health(self, snap: Snapshot, loads: dict[int, BrokerLoad]) -> Health:
        # the plan's own partitions are expected to be under-replicated for a moment (a move listed as
        # finished by ListPartitionReassignments may still show its old ISR in the Metadata just read)
        moving = set(snap.reassigning) | {key(m) for m in self.current_moves()}
        isr = {k: p.isr for k, p in snap.partitions.items()}
        under_replicated = sorted(k for k, p in snap.partitions.items() if k not in moving and len(p.isr) < len(p.replicas))
        under = len(under_replicated)
        offline_partitions = sorted(k for k, p in snap.partitions.items() if p.leader < 0)
        offline = len(offline_partitions)
        shrinks = isr_shrinks(self._isr, isr, {k: p.replicas for k, p in snap.partitions.items()}, moving)
        self._isr = isr
        latencies = [load.p99_ms for load in loads.values() if load.p99_ms is not None]
        ratios = [1 - d.usable_bytes / d.total_bytes for dirs in snap.log_dirs.values() for d in dirs
                  if not d.offline and d.total_bytes > 0 and d.usable_bytes >= 0]
        return Health(under, shrinks, offline, max(latencies) if latencies else None, max(ratios, default=0.0),
                      tuple(f"{t}-{p}" for t, p in under_replicated[:5]),
                      tuple(f"{t}-{p}" for t, p in offline_partitions[:5]))

    # -- plans -------------------------------------------------------------------------------------

    def propose(self, *, hard_only: bool = False, leadership_only: bool = False,
                model: ClusterModel | None = None) -> Plan:
        chosen = model or self.model
        if chosen is None:
            raise RuntimeError("observe() first")
        goals = self.goals()
        return plan(chosen, hard_goals(goals) if hard_only else goals, leadership_only=leadership_only)

    async def submit(self, result: Plan, reason: str) -> str:
        if not result.moves:
            return ""
        plan_id = uuid.uuid4().hex[:12]
        await self.write("plan", {"id": plan_id, "createdMs": self.now_ms(), "reason": reason,
                                  "throttle": self.config.throttle, "moves": [m.to_json() for m in result.moves],
                                  "cancelled": []})
        self.event("plan", f"{plan_id}: {len(result.moves)} partition moves, {result.bytes_to_copy} bytes ({reason})")
        return plan_id

    def current_moves(self) -> list[PartitionMove]:
        stored = self.stored.get("plan")
        return [PartitionMove.from_json(m) for m in stored["moves"]] if stored else []

    # -- one round ---------------------------------------------------------------------------------

    async def tick(self) -> None:
        async with self.acting:
            await self._round()

    async def _round(self) -> None:
        self.rounds += 1
        try:
            model = await self.observe()
        except ClusterError as exc:
            self.event("error", f"cannot observe the cluster: {exc}")
            return
        if self.stored.get("plan"):
            await self._execute()
        elif self.config.self_healing or self.config.auto_balance:
            await self._maybe_plan(model)

    async def _maybe_plan(self, model: ClusterModel) -> None:
        holding = [model.broker_ids[b] for b in range(model.broker_count) if model.excluded[b]
                   and any(b in r for r in model.replicas)]
        if self.config.self_healing and holding:
            result = self.propose(hard_only=True)
            reasons = ", ".join(f"broker {b} {self.excluded.get(b, '')}" for b in holding)
            if not result.ok:
                self.event("plan", f"cannot heal ({reasons}): hard goals unmet: {', '.join(result.unmet_hard)}")
            await self.submit(result, f"heal: {reasons}")
            return
        counts = {model.broker_ids[b]: 0 for b in range(model.broker_count) if model.alive[b]}
        for replicas in model.replicas:
            for b in replicas:
                if model.broker_ids[b] in counts:
                    counts[model.broker_ids[b]] += 1
        added = healing.added_brokers(counts, self.excluded)
        if (self.config.self_healing and added) or self.config.auto_balance:
            result = self.propose()
            soft_violated = any(g.violations_before > 0 for g in result.goals if not g.hard)
            if result.ok and result.moves and (added or soft_violated):
                await self.submit(result, f"added brokers {added}" if added else "balance")

    async def _execute(self) -> None:
        snap, stored = self.snapshot, self.stored["plan"]
        assert snap is not None
        if not self.reassignment_supported:
            self.verdict = Verdict("pause", ("the cluster does not serve AlterPartitionReassignments",))
            return
        moves = self.current_moves()
        current = {k: p.replicas for k, p in snap.partitions.items()}
        cancelled = {(str(t), int(p)) for t, p in stored.get("cancelled", [])}
        done, flying, pending = classify(moves, current, snap.reassigning, cancelled)
        await self._elect(done)
        self.verdict = judge(self.health, self.config.breaker)
        control = self.control
        if not flying and not pending and control["pausedBy"] != "operator":
            # Every move is done (or cancelled): a breaker pause has nothing left to hold back, and a
            # plan kept open by it would keep the throttles and block the next plan.
            if control["paused"]:
                await self.set_control(paused=False, pausedBy="", reason="")
            await self._finish(stored, done, cancelled)
            return
        if self.verdict.action == "cancel" and flying:
            await self._cancel(flying, f"circuit breaker: {self.verdict.reason}")
            await self.set_control(paused=True, pausedBy="breaker", reason=self.verdict.reason)
            return
        if self.verdict.action != "ok":
            self._healthy_since_ms = None
            if not control["paused"]:
                self.event("pause", f"circuit breaker: {self.verdict.reason}")
                await self.set_control(paused=True, pausedBy="breaker", reason=self.verdict.reason)
            return
        if control["paused"] and control["pausedBy"] == "breaker":
            self._healthy_since_ms = self._healthy_since_ms or self.now_ms()
            if self.now_ms() - self._healthy_since_ms < self.config.breaker.resume_after_ms:
                return
            self.event("resume", "healthy again: the circuit breaker's pause is lifted")
            await self.set_control(paused=False, pausedBy="", reason="")
        elif control["paused"]:
            return
        if not flying and not pending:
            await self._finish(stored, done, cancelled)
            return
        copied = self._copied(flying)
        self._progress, stalled = track(self._progress, flying, copied, self.now_ms(), self.config.limits)
        if stalled:
            await self._cancel(stalled, f"no progress for {self.config.limits.stall_ms} ms")
            flying = [m for m in flying if m not in stalled]
        foreign = len(set(snap.reassigning) - {key(m) for m in moves})
        leaders = {k: p.leader for k, p in snap.partitions.items()}
        limits = self.config.limits
        start = next_moves(pending, flying, type(limits)(limits.per_broker, max(0, limits.cluster - foreign),
                                                         limits.stall_ms), leaders)
        if not start:
            return
        unthrottled = await self._throttle(throttles([*flying, *start]))
        if unthrottled and self.config.throttle_required:
            await self._abort(stored, done, flying, cancelled,
                              f"the cluster refuses the replication throttles ({unthrottled[0]}) and "
                              "governor.throttle.required=true: no move runs unthrottled")
            return
        errors = await self.cluster.alter_reassignments({key(m): m.after for m in start})
        refused = [(k, e) for k, e in errors.items() if e]
        for k, e in refused:
            self.event("refused", f"{k[0]}-{k[1]}: {e}")
        permanent = [list(k) for k, e in refused if e.split(":")[0] in PERMANENT]
        if permanent:
            await self.write("plan", {**stored, "cancelled": [*stored.get("cancelled", []), *permanent]})
        self.event("start", f"{len(start) - len(refused)} moves started ({len(flying)} already in flight)")

    def _copied(self, flying: Sequence[PartitionMove]) -> dict[tuple[str, int], int]:
        assert self.snapshot is not None
        out = {}
        for m in flying:
            total = 0
            for b in m.adding:
                for d in self.snapshot.log_dirs.get(b, []):
                    total += d.sizes.get(key(m), 0)
            out[key(m)] = total
        return out

    async def _throttle(self, wanted: Throttles) -> list[str]:
        """Make the cluster's throttles ``wanted``; what the cluster refused (INVALID_CONFIG: it does not
        know the keys), kept in the ``throttles`` record so that later rounds still know."""
        recorded = self.stored.get("throttles") or {}
        previous = Throttles(recorded.get("topics", {}), frozenset(recorded.get("brokers", [])))
        if wanted == previous:
            return list(recorded.get("refused", []))
        refused = await self.cluster.apply_throttles(
            int(self.stored.get("plan", {}).get("throttle", self.config.throttle)), wanted, previous)
        if refused and not recorded.get("refused") and not self.config.throttle_required:
            self.event("throttle", f"the cluster refuses the replication throttles ({refused[0]}): moving "
                       "unthrottled, bounded by governor.moves.per.broker and watched by the circuit breaker")
        refused = sorted({*recorded.get("refused", []), *refused})
        await self.write("throttles", {"topics": wanted.topics, "brokers": sorted(wanted.brokers),
                                       **({"refused": refused} if refused else {})})
        return refused

    async def _cancel(self, moves: Sequence[PartitionMove], reason: str) -> None:
        errors = await self.cluster.alter_reassignments({key(m): None for m in moves})
        stored = self.stored["plan"]
        await self.write("plan", {**stored, "cancelled": [*stored.get("cancelled", []), *[list(key(m)) for m in moves]]})
        failed = {k: e for k, e in errors.items() if e}
        self.event("cancel", f"{len(moves)} moves cancelled: {reason}" + (f" (errors: {failed})" if failed else ""))

    async def _elect(self, done: Sequence[PartitionMove]) -> None:
        assert self.snapshot is not None
        wanted = [key(m) for m in done if key(m) in self.snapshot.partitions
                  and self.snapshot.partitions[key(m)].leader != m.after[0]
                  and m.after[0] in self.snapshot.partitions[key(m)].isr]
        if not wanted:
            return
        try:
            errors = await self.cluster.elect_preferred(wanted)
        except ClusterError as exc:
            self.event("elect", f"ElectLeaders failed: {exc}")
            return
        failed = {f"{t}-{p}": e for (t, p), e in errors.items() if e}
        self.event("elect", f"preferred leaders elected for {len(wanted) - len(failed)} partitions"
                   + (f"; refused: {failed}" if failed else ""))

    async def _finish(self, stored: dict[str, Any], done: Sequence[PartitionMove], cancelled: set[tuple[str, int]],
                      error: str = "") -> None:
        refused = await self._throttle(Throttles({}, frozenset()))
        await self.write("throttles", None)
        summary = {"id": stored["id"], "reason": stored.get("reason", ""), "finishedMs": self.now_ms(),
                   "moves": len(stored["moves"]), "cancelled": len(cancelled), "throttled": not refused,
                   **({"error": error} if error else {})}
        await self.write("last", summary)
        await self.write("plan", None)
        self._progress.clear()
        if error:
            self.event("abort", f"plan {stored['id']} aborted: {error}")
            return
        self.event("done", f"plan {stored['id']} finished: {len(done) - len(cancelled)} moves done, "
                   f"{len(cancelled)} cancelled; " + ("throttles removed" if not refused else "moved unthrottled"))

    async def cancel_plan(self, reason: str) -> str | None:
        """The operator ends the stored plan now (``governor cancel``, ``POST /v1/cancel``): its in-flight
        moves are cancelled (the cluster restores their replicas), the pending ones dropped, the
        throttles removed and a circuit breaker's pause lifted (an operator's pause stays). Needs a
        round's snapshot; answers the plan's id, or None when no plan was running."""
        async with self.acting:
            return await self._cancel_plan(reason)

    async def _cancel_plan(self, reason: str) -> str | None:
        stored, snap = self.stored.get("plan"), self.snapshot
        if not stored:
            return None
        assert snap is not None, "observe() first"
        cancelled = {(str(t), int(p)) for t, p in stored.get("cancelled", [])}
        done, flying, _ = classify(self.current_moves(), {k: p.replicas for k, p in snap.partitions.items()},
                                   snap.reassigning, cancelled)
        await self._abort(stored, done, flying, cancelled, f"cancelled by the operator: {reason}")
        if self.control["pausedBy"] == "breaker":
            await self.set_control(paused=False, pausedBy="", reason="")
        return str(stored["id"])

    async def _abort(self, stored: dict[str, Any], done: Sequence[PartitionMove], flying: Sequence[PartitionMove],
                     cancelled: set[tuple[str, int]], error: str) -> None:
        """End the plan now: in-flight moves cancelled (the cluster restores their replicas), the
        pending ones dropped, the reason kept in ``last``."""
        if flying:
            await self._cancel(flying, error)
        pending = {key(m) for m in self.current_moves()} - {key(m) for m in done}
        await self._finish(self.stored["plan"], done, cancelled | pending, error)

    # -- what the API and ``status`` show ------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        snap = self.snapshot
        stored = self.stored.get("plan")
        out: dict[str, Any] = {"rounds": self.rounds, "control": self.control, "verdict": {
            "action": self.verdict.action, "reasons": list(self.verdict.reasons)}, "health": self.health.to_json(),
            "excluded": {str(b): why for b, why in self.excluded.items()}, "last": self.stored.get("last"),
            "reassignmentSupported": self.reassignment_supported, "plan": None,
            "throttlesRefused": list((self.stored.get("throttles") or {}).get("refused", []))}
        if snap is not None:
            out["cluster"] = {"brokers": sorted(snap.brokers), "controller": snap.controller,
                              "partitions": len(snap.partitions), "reassigning": len(snap.reassigning)}
        if stored and snap is not None:
            moves = self.current_moves()
            cancelled = {(str(t), int(p)) for t, p in stored.get("cancelled", [])}
            done, flying, pending = classify(moves, {k: p.replicas for k, p in snap.partitions.items()},
                                             snap.reassigning, cancelled)
            out["plan"] = {"id": stored["id"], "reason": stored.get("reason", ""), "createdMs": stored["createdMs"],
                           "moves": len(moves), "done": len(done) - len(cancelled), "inFlight": len(flying),
                           "pending": len(pending), "cancelled": len(cancelled),
                           "bytesTotal": sum(m.bytes_to_copy for m in moves),
                           "bytesDone": sum(m.bytes_to_copy for m in done if key(m) not in cancelled)}
        return out

    def moves(self) -> list[dict[str, Any]]:
        snap = self.snapshot
        stored = self.stored.get("plan")
        if not stored or snap is None:
            return []
        cancelled = {(str(t), int(p)) for t, p in stored.get("cancelled", [])}
        done, flying, pending = classify(self.current_moves(), {k: p.replicas for k, p in snap.partitions.items()},
                                         snap.reassigning, cancelled)
        state = {key(m): "done" for m in done} | {key(m): "in-flight" for m in flying} | {key(m): "pending" for m in pending}
        state |= {k: "cancelled" for k in cancelled}
        return [{**m.to_json(), "state": state.get(key(m), "pending"), "copied": self._progress[key(m)].bytes
                 if key(m) in self._progress else None} for m in self.current_moves()]

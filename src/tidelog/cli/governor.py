"""``tidelog governor``: plan, execute and watch partition moves (docs/governor.md).

- ``plan``: a dry run: moves, bytes to copy, time under the throttle, every goal's score before and
  after; ``--drain`` plans as if those brokers were drained, ``--new-topic`` places a new topic by its
  declared traffic instead;
- ``execute``: store a plan (computed now, or ``--plan FILE`` from ``plan --output``) and carry it
  out in the foreground with progress (``--no-wait``: leave it to a running ``governor run``); with a
  plan already stored (an interrupted execute), follow that one to its end;
- ``status``, ``pause [--reason]``, ``resume``: the stored plan and control (they reach a running
  service through the state topic);
- ``drain BROKER...`` / ``undrain BROKER...``: decommission / recommission, one command each;
- ``run``: the service (rounds every ``governor.interval.ms`` and the HTTP API).

Settings: a properties file (``--config``) and ``--override key=value`` (``governor.*`` keys, see
``tidelog.governor.config``), the usual connection options (``-b``, ``-X``, ``--command-config``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from tidelog.cli.common import (
    CliError,
    Output,
    add_json_option,
    client_config,
    command_adder,
    service_properties,
)
from tidelog.governor import app
from tidelog.governor.cluster import Cluster, ClusterError
from tidelog.governor.config import ConfigError, GovernorConfig, parse_config
from tidelog.governor.engine import Engine
from tidelog.governor.planner import PartitionMove, Plan
from tidelog.governor.prealloc import NewTopic, NoRoom, preallocate
from tidelog.governor.store import Store, StoreError
from tidelog.observability.logs import configure_logging

EPILOG = """\
examples:
  tidelog governor plan -b 127.0.0.1:9092
  tidelog governor plan --drain 3 --output drain-3.json
  tidelog governor execute --plan drain-3.json
  tidelog governor status
  tidelog governor pause --reason "black friday"; tidelog governor resume
  tidelog governor cancel --reason "wrong plan"
  tidelog governor drain 3; tidelog governor undrain 3
  tidelog governor plan --new-topic clicks --partitions 12 --replication-factor 3 --bytes-in 20000000
  tidelog governor run --override governor.listen.port=8095 --override governor.auto.balance=true
"""


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("governor", help="balance, heal and drain a cluster (plan, execute, run)",
                            description="The governor: partition and leadership moves toward goals, carried out "
                                        "safely, on tidelog or Apache Kafka.",
                            epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="governor_command", required=True, metavar="COMMAND")

    add = command_adder(commands, EPILOG)

    def command(name: str, help_: str, func: Any) -> argparse.ArgumentParser:
        p = add(name, help_, func)
        p.add_argument("--config", metavar="FILE", help="governor properties file (governor.* and client keys)")
        p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="one setting (repeatable)")
        return p

    plan = command("plan", "print a proposal without acting (dry run)", _plan)
    plan.add_argument("--hard-only", action="store_true", help="only the hard goals (fewest moves)")
    plan.add_argument("--leadership-only", action="store_true",
                      help="preferred-leader changes only: nothing copied (the cheap part of a rebalance first)")
    plan.add_argument("--drain", type=_ids, default=[], metavar="IDS", help="plan as if these brokers were drained")
    plan.add_argument("--output", metavar="FILE", help="also write the plan as JSON (for execute --plan)")
    plan.add_argument("--limit", type=int, default=20, help="moves to list (default 20; JSON lists all)")
    plan.add_argument("--new-topic", metavar="NAME", help="place a new topic by its declared traffic instead")
    plan.add_argument("--partitions", type=int, default=1)
    plan.add_argument("--replication-factor", type=int, default=3)
    plan.add_argument("--bytes-in", type=float, default=0.0, metavar="BYTES_PER_S")
    plan.add_argument("--bytes-out", type=float, default=0.0, metavar="BYTES_PER_S")
    plan.add_argument("--retention-bytes", type=int, default=0, metavar="BYTES", help="expected bytes per partition")
    add_json_option(plan, "the plan")
    execute = command("execute", "store a plan and carry it out", _execute)
    execute.add_argument("--plan", metavar="FILE", help="a plan written by plan --output (else one is computed now)")
    execute.add_argument("--hard-only", action="store_true")
    execute.add_argument("--leadership-only", action="store_true", help="preferred-leader changes only")
    _wait_options(execute)
    status = command("status", "the stored plan, its progress, the control and the cluster's health", _status)
    add_json_option(status, "the status")
    pause = command("pause", "start no new moves (in-flight ones finish under their throttle)", _pause)
    pause.add_argument("--reason", default="paused by the operator")
    command("resume", "lift a pause (the operator's or the circuit breaker's)", _resume)
    cancel = command("cancel", "end the running plan: in-flight moves cancelled (their replicas restored), "
                               "pending ones dropped, throttles removed", _cancel)
    cancel.add_argument("--reason", default="no reason given")
    for name, help_, func in (("drain", "move every replica and leadership off brokers (decommission)", _drain),
                              ("undrain", "take brokers back and move load onto them (recommission)", _undrain)):
        p = command(name, help_, func)
        p.add_argument("brokers", type=int, nargs="+", metavar="BROKER")
        _wait_options(p)
    run = command("run", "the governor service: rounds every governor.interval.ms and its HTTP API", _run)
    run.add_argument("--port", type=int, help="HTTP port (governor.listen.port)")


def _wait_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-wait", action="store_true", help="store the plan and return (a running service carries it out)")
    parser.add_argument("--interval", type=float, default=2.0, metavar="SECONDS", help="progress interval (default 2)")
    parser.add_argument("--max-wait", type=float, default=0.0, metavar="SECONDS", help="give up waiting after this long (0: never)")


def _ids(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of broker ids") from None


def load(args: argparse.Namespace) -> GovernorConfig:
    client = client_config(args)
    client.pop("logger", None)
    props = service_properties(args, {k: str(v) for k, v in client.items()})
    if getattr(args, "port", None):
        props["governor.listen.port"] = str(args.port)
    try:
        return parse_config(props)
    except ConfigError as exc:
        raise CliError(str(exc), 2) from None


def _engine(config: GovernorConfig) -> Engine:
    try:
        cluster = Cluster(config.client)
        asyncio.run(cluster.check_access())
        store = Store(config.client, config.state_topic)
        store.ensure(AdminClient(config.client))
    except (ClusterError, StoreError) as exc:
        raise CliError(str(exc)) from None
    return Engine(config, cluster, store)


def _run_async(coro: Any) -> Any:
    try:
        return asyncio.run(coro)
    except (ClusterError, StoreError) as exc:
        raise CliError(str(exc)) from None


# -- plan ----------------------------------------------------------------------------------------


def _plan(args: argparse.Namespace) -> int:
    config = load(args)
    engine = _engine(config)
    out = Output(args.json)

    async def observe() -> None:
        await engine.observe()

    _run_async(observe())
    assert engine.model is not None
    model = engine.model
    if args.new_topic:
        try:
            assignment = preallocate(model, NewTopic(args.new_topic, args.partitions, args.replication_factor,
                                                     args.bytes_in, args.bytes_out, args.retention_bytes),
                                     disk_threshold=config.disk_threshold, max_replicas=config.max_replicas)
        except (NoRoom, ValueError) as exc:
            raise CliError(str(exc)) from None
        if args.json:
            out.json({"topic": args.new_topic, "assignment": assignment})
        else:
            out.table(["PARTITION", "REPLICAS (LEADER FIRST)"], [(p, ",".join(map(str, r))) for p, r in enumerate(assignment)],
                      title=f"{args.new_topic}: {args.bytes_in:g} B/s in over {args.partitions} partitions")
            out.note("create it with Kafka's tool: kafka-topics.sh --bootstrap-server ... --create --topic "
                     + args.new_topic + " --replica-assignment " + ",".join(":".join(map(str, r)) for r in assignment))
        return 0
    if args.drain:
        model = model.with_excluded({**engine.excluded, **{b: "draining (dry run)" for b in args.drain}})
    result = engine.propose(hard_only=args.hard_only, leadership_only=args.leadership_only, model=model)
    if args.output:
        Path(args.output).write_text(json.dumps(result.to_json(config.throttle), indent=1) + "\n")
    if args.json:
        out.json(result.to_json(config.throttle))
    else:
        _print_plan(out, result, config, args.limit)
    return 0 if result.ok else 1


def _print_plan(out: Output, result: Plan, config: GovernorConfig, limit: int) -> None:
    rate = config.throttle
    out.line(f"{len(result.moves)} partition moves ({result.replica_moves} replica moves, {result.leader_moves} "
             f"leadership moves), {_bytes(result.bytes_to_copy)} to copy, about "
             f"{result.estimated_seconds(rate):.0f} s under a {_bytes(rate)}/s throttle; planned in {result.seconds:.2f} s")
    if result.unmet_hard:
        out.line(f"HARD GOALS UNMET: {', '.join(result.unmet_hard)}: do not execute this plan")
    out.table(["GOAL", "HARD", "SCORE BEFORE", "AFTER", "VIOLATIONS BEFORE", "AFTER"],
              [(g.name, "yes" if g.hard else "", f"{g.score_before:.3f}", f"{g.score_after:.3f}", g.violations_before,
                g.violations_after) for g in result.goals])
    if result.moves:
        shown = sorted(result.moves, key=lambda m: (m.bytes_to_copy, m.topic, m.partition))[:limit]
        out.table(["TOPIC", "PARTITION", "REPLICAS NOW", "AFTER (LEADER FIRST)", "BYTES TO COPY"],
                  [(m.topic, m.partition, ",".join(map(str, m.before)), ",".join(map(str, m.after)), m.bytes_to_copy)
                   for m in shown])
        if len(result.moves) > limit:
            out.note(f"... and {len(result.moves) - limit} more (--limit, --json)")


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


# -- execute, drain, undrain ----------------------------------------------------------------------


def _execute(args: argparse.Namespace) -> int:
    config = load(args)
    engine = _engine(config)

    async def main() -> int:
        await engine.observe()
        running = engine.stored.get("plan")
        if running and (args.plan or args.hard_only or args.leadership_only):
            raise CliError(f"plan {running['id']} is already running (tidelog governor status)")
        if running:  # resumed after a restart: the stored plan and the cluster say where it stands
            Output().line(f"resuming plan {running['id']} ({running.get('reason', '')})")
            return await _follow(engine, running["id"], args)
        if args.plan:
            try:
                document = json.loads(Path(args.plan).read_text())
                moves = tuple(PartitionMove.from_json(m) for m in document["moves"])
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise CliError(f"cannot read the plan {args.plan}: {exc}", 2) from None
            result = Plan(moves, (), 0, 0, 0.0, tuple(document.get("unmetHardGoals", [])))
        else:
            result = engine.propose(hard_only=args.hard_only, leadership_only=args.leadership_only)
        if not result.ok:
            raise CliError(f"the plan breaks hard goals ({', '.join(result.unmet_hard)}); nothing was started")
        if not result.moves:
            Output().line("nothing to move: every goal is met as well as moves can make it")
            return 0
        if not engine.reassignment_supported:
            raise CliError("the cluster does not serve AlterPartitionReassignments (ApiVersions); nothing was started")
        plan_id = await engine.submit(result, f"execute{' ' + args.plan if args.plan else ''}")
        return await _follow(engine, plan_id, args)

    code: int = _run_async(main())
    return code


async def _follow(engine: Engine, plan_id: str, args: argparse.Namespace) -> int:
    out = Output()
    if args.no_wait:
        out.line(f"plan {plan_id} stored: a running governor service carries it out (tidelog governor status)")
        return 0
    started = time.monotonic()
    warned = False
    while True:
        await engine.tick()
        status = engine.status()
        plan = status["plan"]
        if plan is None or plan["id"] != plan_id:
            last = status.get("last") or {}
            if last.get("error"):
                out.line(f"plan {plan_id} aborted: {last['error']}; {last.get('cancelled', 0)} of "
                         f"{last.get('moves', 0)} moves not done")
                return 1
            out.line(f"plan {plan_id} finished: {last.get('moves', 0)} moves, {last.get('cancelled', 0)} cancelled; "
                     + ("throttles removed" if last.get("throttled", True) else "moved unthrottled"))
            return 1 if last.get("cancelled") else 0
        if status["throttlesRefused"] and not warned:
            warned = True
            out.note(f"warning: moving unthrottled, the cluster refuses the throttles: {status['throttlesRefused'][0]}")
        paused = status["control"]
        out.line(f"plan {plan_id}: {plan['done']}/{plan['moves']} done, {plan['inFlight']} in flight, "
                 f"{plan['pending']} pending, {plan['cancelled']} cancelled; {_bytes(plan['bytesDone'])} of "
                 f"{_bytes(plan['bytesTotal'])}" + (f"; PAUSED ({paused['pausedBy']}: {paused['reason']})"
                                                      if paused["paused"] else ""))
        if args.max_wait and time.monotonic() - started > args.max_wait:
            out.note("still running; it goes on under a governor service, or run execute/status again")
            return 3
        await asyncio.sleep(args.interval)


def _drain(args: argparse.Namespace, undrain: bool = False) -> int:
    config = load(args)
    engine = _engine(config)

    async def main() -> int:
        await engine.observe()
        if engine.stored.get("plan"):
            raise CliError(f"plan {engine.stored['plan']['id']} is running; wait for it or pause it first")
        drained = set(engine.control["drained"])
        unknown = [b for b in args.brokers if engine.model is not None and b not in engine.model.broker_ids]
        if unknown and not undrain:
            raise CliError(f"unknown broker(s) {unknown}", 2)
        drained = drained - set(args.brokers) if undrain else drained | set(args.brokers)
        assert engine.model is not None
        excluded = {b: why for b, why in engine.excluded.items() if why != "draining" or b in drained}
        excluded.update({b: "draining" for b in drained})
        result = engine.propose(hard_only=not undrain, model=engine.model.with_excluded(excluded))
        verb = "undrain" if undrain else "drain"
        if not result.ok:
            raise CliError(f"cannot {verb} {args.brokers}: hard goals unmet ({', '.join(result.unmet_hard)}); "
                           "nothing was changed")
        await engine.set_control(drained=sorted(drained))
        if not result.moves:
            Output().line(f"{verb} {args.brokers}: nothing to move")
            return 0
        plan_id = await engine.submit(result, f"{verb} {','.join(map(str, args.brokers))}")
        return await _follow(engine, plan_id, args)

    code: int = _run_async(main())
    return code


def _undrain(args: argparse.Namespace) -> int:
    return _drain(args, undrain=True)


# -- status, pause, resume, run -------------------------------------------------------------------


def _status(args: argparse.Namespace) -> int:
    engine = _engine(load(args))

    async def main() -> dict[str, Any]:
        await engine.observe()
        return engine.status()

    status = _run_async(main())
    out = Output(args.json)
    if args.json:
        out.json(status)
        return 0
    control, plan, health = status["control"], status["plan"], status["health"]
    cluster = status.get("cluster", {})
    out.line(f"cluster: brokers {cluster.get('brokers')}, {cluster.get('partitions')} partitions, "
             f"{cluster.get('reassigning')} reassigning; reassignment served: {status['reassignmentSupported']}")
    out.line(f"health: {health['underReplicated']} under-replicated, {health['offlinePartitions']} offline, "
             f"max disk {health['maxDiskRatio']:.0%}, produce p99 {health['p99Ms'] if health['p99Ms'] is not None else '-'} ms")
    out.line("control: " + (f"PAUSED by {control['pausedBy']}: {control['reason']}" if control["paused"] else "running")
             + f"; drained {control['drained']}")
    if status["throttlesRefused"]:
        out.line(f"throttles: refused by the cluster, moving unthrottled ({status['throttlesRefused'][0]})")
    if status["excluded"]:
        out.line("excluded: " + ", ".join(f"{b} ({why})" for b, why in status["excluded"].items()))
    if plan:
        out.line(f"plan {plan['id']} ({plan['reason']}): {plan['done']}/{plan['moves']} done, {plan['inFlight']} in "
                 f"flight, {plan['pending']} pending, {plan['cancelled']} cancelled; {_bytes(plan['bytesDone'])} of "
                 f"{_bytes(plan['bytesTotal'])}")
    else:
        last = status.get("last")
        out.line("no plan running" + (f"; last: {last['id']} ({last['reason']}), {last['moves']} moves, "
                                      f"{last['cancelled']} cancelled" if last else ""))
    return 0


def _pause(args: argparse.Namespace, paused: bool = True) -> int:
    engine = _engine(load(args))

    async def main() -> None:
        engine.stored = await asyncio.to_thread(engine.store.read)
        if paused:
            await engine.set_control(paused=True, pausedBy="operator", reason=args.reason)
        else:
            await engine.set_control(paused=False, pausedBy="", reason="")

    _run_async(main())
    Output().line("paused: no new moves start until resume" if paused else "resumed")
    return 0


def _resume(args: argparse.Namespace) -> int:
    return _pause(args, paused=False)


def _cancel(args: argparse.Namespace) -> int:
    engine = _engine(load(args))

    async def main() -> str | None:
        await engine.observe()
        return await engine.cancel_plan(args.reason)

    cancelled = _run_async(main())
    if cancelled is None:
        Output().line("no plan running")
        return 0
    last = engine.stored.get("last") or {}
    Output().line(f"plan {cancelled} cancelled: {last.get('cancelled', 0)} of {last.get('moves', 0)} moves not done; "
                  + ("throttles removed" if last.get("throttled", True) else "it moved unthrottled"))
    return 0


def _run(args: argparse.Namespace) -> int:
    config = load(args)
    configure_logging(getattr(args, "log_level", "INFO"), "text")

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await app.run(config, stop)

    try:
        asyncio.run(main())
    except (ClusterError, StoreError) as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:
        logging.getLogger(__name__).error("governor stopped: %s", exc)
        return 1
    return 0

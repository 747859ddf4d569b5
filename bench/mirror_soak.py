"""Soak of ``tidelog mirror`` (transactional mode, the default): many records, kills and cut links.

Not a test (it takes minutes): it prints figures and exits 1 when the destination differs from the
source. Two single-node tidelog brokers run as subprocesses, the source and the destination, each
with two listeners: ``PLAINTEXT`` for the writers and the final check, and ``MIRROR``, which the
mirror processes reach only through a TCP proxy of their own (tests/helpers/link_proxy.py; the
listener advertises the proxy's port, so every connection of the mirror goes through it). Cutting a
proxy cuts the mirror off from that side while the writers carry on.

The run:

1. the source topic gets ``--partitions`` partitions; ``--writers`` writer threads each write their
   share of ``--records`` records with three producers (plain, idempotent, transactional, every fourth
   transaction aborted; helpers.mirror_run.produce_mixed), about 100-byte values with keys, headers
   and CreateTime timestamps;
2. ``--processes`` mirror processes of one link copy the topic while it is written. Seven events
   happen at random moments, drawn as fractions of the records written (so they fall while data
   flows, whatever the machine's speed): ``--kills`` SIGKILLs of a random mirror process (restarted
   0.1-1 s later), one cut of the source side and one of the destination side (``blackhole``: the
   connections are closed and new ones are accepted and never answered, for 2-5 s);
3. once the writers are done and every checkpoint is at the source's end, the processes are stopped
   (SIGTERM, exit code 0 expected) and both sides are read read_committed from offset 0: for every
   partition, the destination must hold exactly the source's committed records in order (key, value,
   headers, timestamp), each copy's ``tidelog.mirror.offset`` header equal to its source record's
   offset: nothing missing, nothing twice. Records are compared through a 64-bit hash each, so a
   million of them fit in a few MiB.

Printed: times (writing, catching up after the writers, total), the mirror's records/s over the run
(committed records / seconds from the mirror's start to caught up), kills, starts, peak RSS, result::

    python bench/mirror_soak.py [--records 1000000] [--partitions 100] [--writers 2] [--processes 2]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from confluent_kafka import Consumer, TopicPartition  # noqa: E402

from helpers.broker_process import GROUP_TEST_BROKER, BrokerProcess, free_port  # noqa: E402
from helpers.link_proxy import LinkProxy  # noqa: E402
from helpers.mirror_run import (  # noqa: E402
    OFFSET_HEADER,
    MirrorProcess,
    caught_up,
    create_wide_topic,
    end_offsets,
    produce_mixed,
    write_config,
)

TOPIC = "soak"
CUTS = ("cut source", "cut destination")


@dataclass
class Side:
    """One side's committed records, per partition: offsets (the source's own, or the copies'
    source-offset headers) and a hash of (key, value, headers, timestamp) each."""

    offsets: dict[int, array[int]] = field(default_factory=dict)
    hashes: dict[int, array[int]] = field(default_factory=dict)

    def count(self) -> int:
        return sum(len(v) for v in self.offsets.values())


class Cluster:
    """A broker whose MIRROR listener is reached only through a proxy that can be cut."""

    def __init__(self, workdir: Path) -> None:
        self.proxy = LinkProxy()
        mirror_port = free_port()
        self.broker = BrokerProcess(workdir, GROUP_TEST_BROKER)
        port = self.broker.port
        self.broker.properties.update({
            "listeners": f"PLAINTEXT://127.0.0.1:{port},MIRROR://127.0.0.1:{mirror_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port},MIRROR://127.0.0.1:{self.proxy.port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,MIRROR:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
        })
        self.mirror_port = mirror_port

    def start(self) -> Cluster:
        self.broker.start()
        self.proxy.start("127.0.0.1", self.mirror_port)
        return self

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    @property
    def mirror_bootstrap(self) -> str:
        return f"127.0.0.1:{self.proxy.port}"

    def close(self) -> None:
        self.proxy.close()
        self.broker.close()


def read_side(bootstrap: str, topic: str, partitions: int, copies: bool, timeout: float = 600.0) -> Side:
    """Every committed record of ``topic`` up to the high watermarks taken now (see ``Side``);
    ``copies``: the offsets are the ``tidelog.mirror.offset`` headers, which are left out of the hash."""
    side = Side({p: array("q") for p in range(partitions)}, {p: array("q") for p in range(partitions)})
    ends = end_offsets(bootstrap, topic, partitions)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "mirror-soak-reader", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "fetch.max.bytes": 16 << 20})
    try:
        pending = {p for p in range(partitions) if ends[p] > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in sorted(pending)])
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise SystemExit(f"{bootstrap} {topic}: partitions {sorted(pending)} not read to their end")
            for message in consumer.consume(10_000, 0.5):
                if message.error() is not None:
                    continue
                partition = message.partition() or 0
                headers = message.headers() or []
                if copies:
                    found = [v for k, v in headers if k == OFFSET_HEADER]
                    offset = int(found[0] or b"-1") if len(found) == 1 else -1
                    headers = [(k, v) for k, v in headers if k != OFFSET_HEADER]
                else:
                    offset = message.offset() or 0
                side.offsets[partition].append(offset)
                side.hashes[partition].append(hash((message.key(), message.value(), tuple(headers),
                                                    message.timestamp()[1])))
            for tp in consumer.position([TopicPartition(topic, p) for p in list(pending)]):
                if tp.offset >= ends[tp.partition]:
                    pending.discard(tp.partition)
    finally:
        consumer.close()
    return side


def rss(mirrors: list[MirrorProcess]) -> int:
    """The largest RSS of the running mirror processes (0 for one that just died)."""
    peak = 0
    for mirror in mirrors:
        try:
            peak = max(peak, mirror.rss_bytes() if mirror.running() else 0)
        except (FileNotFoundError, ProcessLookupError):
            pass
    return peak


def differences(source: Side, destination: Side) -> list[str]:
    """One line per partition that differs: missing or extra records, the first record that differs."""
    found = []
    for partition, offsets in source.offsets.items():
        copied = destination.offsets.get(partition, array("q"))
        if list(copied) != sorted(set(copied)):
            found.append(f"partition {partition}: a source offset copied twice or out of order")
        if len(copied) != len(offsets):
            found.append(f"partition {partition}: {len(offsets)} committed source records, {len(copied)} copies")
        for index, (a, b) in enumerate(zip(offsets, copied, strict=False)):
            if a != b or source.hashes[partition][index] != destination.hashes[partition][index]:
                found.append(f"partition {partition}: record {index} differs (source offset {a}, copy of {b})")
                break
    return found


def run(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="mirror-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"work folder {work}", flush=True)
    source = Cluster(work / "source")
    destination = Cluster(work / "destination")
    mirrors: list[MirrorProcess] = []
    try:
        source.start()
        destination.start()
        create_wide_topic(source.bootstrap, TOPIC, args.partitions)
        config = write_config(work / "link.toml", name="soak", source=source.mirror_bootstrap,
                              destination=destination.mirror_bootstrap, include=[TOPIC],
                              link={"shards": args.shards})
        mirrors = [MirrorProcess(config, work / f"mirror-{i}.log") for i in range(args.processes)]

        written = 0
        lock = threading.Lock()
        committed: list[int] = []

        def count(chunk: int) -> None:
            nonlocal written
            with lock:
                written += chunk

        share = args.records // args.writers
        writers = [threading.Thread(target=lambda i=i: committed.append(produce_mixed(
            source.bootstrap, TOPIC, args.partitions, share, seed=args.seed + i, writer=f"w{i}", on_chunk=count)))
            for i in range(args.writers)]
        total = share * args.writers
        events = ["kill"] * args.kills + list(CUTS)
        rng.shuffle(events)
        moments = sorted(rng.uniform(0.03, 0.95) for _ in events)

        started = time.monotonic()
        for mirror in mirrors:
            mirror.start()
        for writer in writers:
            writer.start()
        peak_rss = 0
        kills = 0
        log: list[str] = []
        next_report = started + 15
        while events or any(w.is_alive() for w in writers):
            time.sleep(0.2)
            peak_rss = max(peak_rss, rss(mirrors))
            now = time.monotonic()
            if now >= next_report:
                print(f"  {now - started:6.0f} s: {written} of {total} records written", flush=True)
                next_report = now + 15
            writing = any(w.is_alive() for w in writers)
            if not events or (writing and written < moments[0] * total):
                continue
            event = events.pop(0)
            moments.pop(0)
            at = f"{now - started:6.1f} s, {written} records written"
            if event == "kill":
                victim = rng.choice(mirrors)
                victim.kill9()
                kills += 1
                time.sleep(rng.uniform(0.1, 1.0))
                victim.start()
                log.append(f"{at}: kill -9 of mirror {mirrors.index(victim)}, restarted")
            else:
                proxy = source.proxy if event == "cut source" else destination.proxy
                seconds = rng.uniform(2.0, 5.0)
                proxy.cut("blackhole")
                time.sleep(seconds)
                proxy.heal()
                log.append(f"{at}: mirror {event.removeprefix('cut ')} side cut off for {seconds:.1f} s")
            print("  " + log[-1], flush=True)
        for writer in writers:
            writer.join()
        written_at = time.monotonic()
        assert len(committed) == args.writers, "a writer failed (see its traceback above)"
        print(f"writers done in {written_at - started:.1f} s: {total} records, {sum(committed)} committed",
              flush=True)
        deadline = written_at + args.timeout
        while not caught_up(config, source.bootstrap, TOPIC, args.partitions):
            peak_rss = max(peak_rss, rss(mirrors))
            if time.monotonic() > deadline:
                raise SystemExit("mirror not caught up in time; logs:\n" + "\n".join(m.tail() for m in mirrors))
            if not all(m.running() for m in mirrors):
                raise SystemExit("a mirror exited:\n" + "\n".join(m.tail() for m in mirrors))
            time.sleep(1.0)
        done_at = time.monotonic()
        codes = [m.stop() for m in mirrors]
        print(f"caught up {done_at - written_at:.1f} s after the writers; mirrors stopped with {codes}", flush=True)

        source_side = read_side(source.bootstrap, TOPIC, args.partitions, copies=False)
        copy_side = read_side(destination.bootstrap, TOPIC, args.partitions, copies=True)
        checked_at = time.monotonic()
        problems = differences(source_side, copy_side)
        if source_side.count() != sum(committed):
            problems.append(f"the source holds {source_side.count()} committed records, the writers "
                            f"committed {sum(committed)}")
        if any(code != 0 for code in codes):
            problems.append(f"mirror exit codes {codes}")
        elapsed = done_at - started
        print()
        print(f"records written {total} ({sum(committed)} committed, the rest in aborted transactions) over "
              f"{args.partitions} partitions by {args.writers * 3} producers ({args.writers} transactional)")
        print(f"mirror processes {args.processes}, kills -9 {kills}, starts {sum(m.starts for m in mirrors)}, "
              f"cuts {', '.join(c for c in CUTS)}; peak RSS of a mirror process {peak_rss / (1 << 20):.0f} MiB")
        print(f"time: writing {written_at - started:.1f} s, caught up after {elapsed:.1f} s "
              f"({done_at - written_at:.1f} s after the writers), check {checked_at - done_at:.1f} s")
        print(f"mirror throughput over the run {sum(committed) / elapsed:.0f} records/s; "
              f"load average {os.getloadavg()[0]:.1f}")
        print(f"compared {source_side.count()} source records with {copy_side.count()} copies, "
              f"partition by partition")
        if problems:
            print("RESULT: FAIL")
            for line in problems[:50]:
                print("  " + line)
            return 1
        print("RESULT: OK, every destination partition equals its source: nothing missing, nothing twice")
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
        return 0
    finally:
        for mirror in mirrors:
            mirror.close()
        destination.close()
        source.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--writers", type=int, default=2, help="writer threads, three producers each")
    parser.add_argument("--processes", type=int, default=2, help="mirror processes of the link")
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to catch up after the writers")
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--workdir", help="keep the brokers' data and the mirrors' logs here")
    sys.exit(run(parser.parse_args()))


if __name__ == "__main__":
    main()

"""Driving ``tidelog mirror`` in tests: a link's TOML file, the mirror as a subprocess, a mixed workload
(plain, idempotent and transactional producers, some transactions aborted), and the check that the
destination holds the source's committed records, record for record, nothing twice.

Used by the integration tier (two tidelog brokers) and the compat tier (Apache Kafka as one side).
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from helpers.broker_process import REPO_ROOT
from tidelog.clients.transactional import send

OFFSET_HEADER = "tidelog.mirror.offset"
Record = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int]


def listen_port() -> int:
    """A free port for a listener that starts a while after the port is chosen (a mirror's metrics, named
    in a console's settings first). Taken below the kernel's ephemeral range (32768-60999 on Linux), so
    neither an outgoing connection's local port nor another ``free_port()`` can take it meanwhile."""
    for _ in range(200):
        port = random.randrange(20000, 32000)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port in 20000-32000")


def write_config(path: Path, *, name: str, source: str, destination: str, include: Iterable[str],
                 rename: str = "{topic}", link: Mapping[str, object] | None = None,
                 destination_extra: Mapping[str, str] | None = None,
                 source_extra: Mapping[str, str] | None = None) -> Path:
    settings = {"name": name, "shards": 8, "transaction.interval.ms": 200, "metadata.refresh.ms": 1000,
                "session.timeout.ms": 3000, "transaction.timeout.ms": 10000, **(link or {})}
    settings = {k: v for k, v in settings.items() if v is not None}  # None: left out (the link's default)
    lines = ["[link]"] + [f'"{k}" = {_toml(v)}' for k, v in settings.items()]
    lines += ["[topics]", f"include = {_toml(list(include))}", f"rename = {_toml(rename)}"]
    lines += ["[source]", f'"bootstrap.servers" = "{source}"']
    lines += [f'"{k}" = {_toml(v)}' for k, v in (source_extra or {}).items()]
    lines += ["[destination]", f'"bootstrap.servers" = "{destination}"']
    lines += [f'"{k}" = {_toml(v)}' for k, v in (destination_extra or {}).items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


class MirrorProcess:
    """``python -m tidelog mirror run --config FILE`` with its output in ``log``."""

    def __init__(self, config: Path, log: Path) -> None:
        self.config = config
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._log_from = 0

    def start(self) -> MirrorProcess:
        env = dict(os.environ, PYTHONUNBUFFERED="1", HYPOTHESIS_STORAGE_DIRECTORY=str(REPO_ROOT / ".hypothesis"))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT / "src"), env.get("PYTHONPATH")]))
        self.starts += 1
        self._log_from = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as out:
            out.write(f"=== start #{self.starts} ===\n".encode())
            out.flush()
            self.process = subprocess.Popen([sys.executable, "-m", "tidelog", "mirror", "run", "--config",
                                             str(self.config)], stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                            env=env)
        return self

    def _started_link(self) -> bool:
        with self.log.open("rb") as f:
            f.seek(self._log_from)
            return b"tidelog.mirror.copier: mirror link" in f.read()

    def wait_started(self, timeout: float = 60.0) -> None:
        """Until this start has logged that it runs the link (past imports and topic sync)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._started_link():
                return
            assert self.running(), f"mirror exited:\n{self.tail()}"
            time.sleep(0.1)
        raise AssertionError(f"mirror did not start in {timeout} s:\n{self.tail()}")

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill9(self) -> None:
        if self.running():
            assert self.process is not None
            self.process.kill()
            self.process.wait(10)

    def stop(self, timeout: float = 20.0) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            # A mirror just started has no SIGTERM handler until past its imports: a signal then kills it
            # (exit -15, ci2's rerun). Stop it once it runs the link, as an operator would see it.
            deadline = time.monotonic() + timeout
            while self.running() and not self._started_link() and time.monotonic() < deadline:
                time.sleep(0.1)
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill9()
                raise AssertionError(f"mirror did not stop in {timeout} s; log:\n{self.tail()}") from None
        return int(self.process.returncode)

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def close(self) -> None:
        if self.running():
            try:
                self.stop(10)
            except AssertionError:
                pass
        self.kill9()


def produce_mixed(bootstrap: str, topic: str, partitions: int, records: int, *, seed: int = 7,
                  value_size: int = 100, abort_every: int = 4, writer: str = "writer",
                  on_chunk: Callable[[int], None] | None = None) -> int:
    """Write ``records`` records over ``partitions``: a third plain, a third idempotent, a third in
    transactions of which every ``abort_every``-th is aborted (its records are written, then aborted).
    Keys, headers and CreateTime timestamps vary. Returns the number of committed records.
    Writers running side by side need their own ``writer`` names (it names the transactional id);
    ``on_chunk`` is told the size of each chunk of up to 1,000 records once it is handed over."""
    rng = random.Random(seed)
    pad = b"x" * max(0, value_size - 12)
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": False, "acks": "all"})
    idem = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    txn = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "transactional.id": f"{topic}-{writer}"})
    txn.init_transactions(30)
    committed = 0
    base_ts = int(time.time() * 1000) - 3_600_000
    n = 0
    batch = 0
    while n < records:
        chunk = min(1000, records - n)
        which = batch % 3
        aborted = which == 2 and (batch // 3) % abort_every == abort_every - 1
        producer = (plain, idem, txn)[which]
        if which == 2:
            txn.begin_transaction()
        for i in range(n, n + chunk):
            key = None if i % 17 == 0 else b"k%d" % rng.randrange(1000)
            value = None if i % 101 == 0 else b"%012d" % i + pad
            headers = [("h", b"%d" % i)] if i % 3 == 0 else None
            try:
                send(producer, topic, value, key, headers, partition=rng.randrange(partitions), timestamp=base_ts + i)
            except KafkaException as exc:
                # The transaction went into an abortable error (a request of it failed under load, say):
                # abort it as any transactional producer must; none of its records count as committed.
                # produce() reports that state as _STATE without the abort flag; abort_transaction
                # raises if the producer is fatally broken instead.
                error = exc.args[0]
                if which != 2 or not (error.txn_requires_abort() or error.code() == KafkaError._STATE):
                    raise
                print(f"produce_mixed: transaction aborted on {error}", file=sys.stderr)
                aborted = True  # aborted below
                break
        if which == 2:
            if aborted:
                txn.abort_transaction(30)
            else:
                try:
                    txn.commit_transaction(30)
                except KafkaException as exc:
                    # An abortable commit (Kafka 4.3 answered OUT_OF_ORDER_SEQUENCE_NUMBER here once, right
                    # after its coordinator loaded): abort it as any producer must; nothing of it is committed.
                    if not exc.args[0].txn_requires_abort():
                        raise
                    txn.abort_transaction(30)
                    aborted = True
        else:
            producer.poll(0)
        if not aborted:
            committed += chunk
        n += chunk
        batch += 1
        if on_chunk is not None:
            on_chunk(chunk)
    for p in (plain, idem):
        assert p.flush(60) == 0
    return committed


def read_all(bootstrap: str, topic: str, partitions: int, strip_header: bool = False,
             timeout: float = 60.0) -> dict[int, list[Record]]:
    """Every committed record of every partition, up to the high watermarks taken now."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "mirror-test-reader", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "fetch.max.bytes": 8 << 20})
    out: dict[int, list[Record]] = {p: [] for p in range(partitions)}
    try:
        ends = end_offsets(bootstrap, topic, partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions) if ends[p] > 0])
        pending = {p for p in range(partitions) if ends[p] > 0}
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for message in consumer.consume(5000, 0.2):
                if message.error() is not None:
                    continue
                headers = tuple((k, v) for k, v in (message.headers() or [])
                                if not (strip_header and k == OFFSET_HEADER))
                out[message.partition() or 0].append((message.key(), message.value(), headers,
                                                      message.timestamp()[1]))
            for tp in consumer.position([TopicPartition(topic, p) for p in list(pending)]):
                if tp.offset >= ends[tp.partition]:
                    pending.discard(tp.partition)
        assert not pending, f"{topic}: partitions {sorted(pending)} not read to their end in {timeout} s"
        return out
    finally:
        consumer.close()


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from tidelog.mirror.status import end_offsets as ends

    found = ends({"bootstrap.servers": bootstrap}, [(topic, p) for p in range(partitions)])
    return {p: offset for (_t, p), offset in found.items()}


def assert_same(source: dict[int, list[Record]], destination: dict[int, list[Record]]) -> None:
    """Partition for partition, record for record (key, value, headers, timestamp), nothing twice."""
    for partition, records in source.items():
        copied = destination.get(partition, [])
        assert len(copied) == len(records), (
            f"partition {partition}: {len(records)} source records, {len(copied)} on the destination")
        for index, (a, b) in enumerate(zip(records, copied, strict=True)):
            assert a == b, f"partition {partition} record {index}: source {a[:3]!r}..., destination {b[:3]!r}..."


def caught_up(config: Path, source: str, topic: str, partitions: int) -> bool:
    """Every partition's committed checkpoint (a preserving link: the destination's end) is at the
    source's end (tidelog mirror status, as a library)."""
    from tidelog.clients.transactional import ReadError
    from tidelog.mirror import load_config
    from tidelog.mirror.status import checkpoints

    ends = end_offsets(source, topic, partitions)
    link = load_config(config)
    if link.preserves_offsets:
        copied = end_offsets(str(link.destination["bootstrap.servers"]), link.topics.destination(topic), partitions)
        return all(copied[p] >= ends[p] for p in range(partitions))
    try:
        saved = checkpoints(link)
    except ReadError:
        return False  # the link topic is not there yet
    return all(ends[p] == 0 or ((topic, p) in saved and saved[(topic, p)].next >= ends[p]) for p in range(partitions))


def offsets_strictly_grow(destination: dict[int, list[Record]]) -> None:
    for partition, records in destination.items():
        offsets = [int(dict(r[2])[OFFSET_HEADER] or b"-1") for r in records]
        assert offsets == sorted(set(offsets)), f"partition {partition}: a source offset copied twice or out of order"


def kill_and_cut_scenario(source: str, destination: str, workdir: Path, *, topic: str, partitions: int,
                          records: int, processes: int = 2, kills: int = 4, cut: Callable[[], None] | None = None,
                          heal: Callable[[], None] | None = None, seed: int = 11, timeout: float = 120.0,
                          link: Mapping[str, object] | None = None) -> int:
    """Mirror ``topic`` while it is written, killing a random mirror process with SIGKILL ``kills`` times
    at random moments (and cutting the destination link once, with ``cut``/``heal``); then check the
    destination equals the source. Returns the number of committed records."""
    rng = random.Random(seed)
    config = write_config(workdir / "link.toml", name=f"{topic}-link", source=source, destination=destination,
                          include=[topic], link=link)
    written: list[int] = []
    writer = threading.Thread(target=lambda: written.append(produce_mixed(source, topic, partitions, records)))
    mirrors = [MirrorProcess(config, workdir / f"mirror-{i}.log") for i in range(processes)]
    try:
        for mirror in mirrors:
            mirror.start()
        writer.start()
        for round_ in range(kills):
            victim = rng.choice(mirrors)
            victim.wait_started()
            time.sleep(rng.uniform(0.3, 2.5))
            victim.kill9()
            if round_ == 1 and cut is not None and heal is not None:
                cut()
                time.sleep(rng.uniform(1.5, 3.0))
                heal()
            time.sleep(rng.uniform(0.1, 1.0))
            victim.start()
        writer.join(timeout)
        assert written, "the writer did not finish"
        deadline = time.monotonic() + timeout
        while not caught_up(config, source, topic, partitions):
            assert time.monotonic() < deadline, "mirror not caught up; logs:\n" + "\n".join(m.tail() for m in mirrors)
            assert all(m.running() for m in mirrors), "a mirror exited:\n" + "\n".join(m.tail() for m in mirrors)
            time.sleep(0.5)
        for mirror in mirrors:
            assert mirror.stop() == 0, mirror.tail()
    finally:
        for mirror in mirrors:
            mirror.close()
    copied = read_all(destination, topic, partitions)
    offsets_strictly_grow(copied)
    original = read_all(source, topic, partitions)
    assert sum(len(v) for v in original.values()) == written[0]
    assert_same(original, read_all(destination, topic, partitions, strip_header=True))
    return written[0]


def create_wide_topic(bootstrap: str, topic: str, partitions: int, timeout: float = 180.0) -> str:
    """Create a topic of many partitions, waiting as long as a loaded machine needs."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                                  operation_timeout=timeout, request_timeout=timeout)
    futures[topic].result(timeout=timeout)
    return topic


def fill_partitions(bootstrap: str, topic: str, partitions: int, per_partition: int, value_size: int) -> int:
    """``per_partition`` records of ``value_size`` bytes in every partition (one idempotent producer)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True,
                         "queue.buffering.max.kbytes": 262144})
    value = b"v" * value_size
    for i in range(per_partition):
        for partition in range(partitions):
            while True:
                try:
                    producer.produce(topic, value, b"k%d" % i, partition=partition)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(120) == 0
    return partitions * per_partition


def footprint(source: str, destination: str, workdir: Path, *, topic: str, partitions: int, records: int,
              budget_bytes: int, timeout: float = 300.0, offsets: str = "translate",
              shards: int = 8) -> tuple[float, float]:
    """Run one mirror process over ``topic`` until every partition is caught up, sampling its RSS every
    0.2 s. Returns (peak RSS in MiB, seconds from the process start to caught up)."""
    config = write_config(workdir / "footprint.toml", name=f"{topic}-link", source=source, destination=destination,
                          include=[topic], link={"budget.bytes": budget_bytes, "shards": shards,
                                                 "metadata.refresh.ms": 60_000,
                                                 "session.timeout.ms": 10_000, "offsets": offsets})
    mirror = MirrorProcess(config, workdir / "footprint.log").start()
    started = time.monotonic()
    peak = 0
    next_check = started + 2.0
    try:
        while True:
            assert mirror.running(), mirror.tail()
            peak = max(peak, mirror.rss_bytes())
            if time.monotonic() >= next_check:
                if caught_up(config, source, topic, partitions):
                    break
                next_check = time.monotonic() + 2.0
            assert time.monotonic() - started < timeout, f"not caught up in {timeout} s:\n{mirror.tail()}"
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        assert mirror.stop() == 0, mirror.tail()
    finally:
        mirror.close()
    return peak / (1 << 20), elapsed


class MirrorThread:
    """One process of a link run in this test process (``tidelog.mirror.app.run`` in a thread, its
    metrics listener included), stopped on exit the way ``tidelog mirror run`` stops on SIGTERM."""

    def __init__(self, config: Path) -> None:
        from tidelog.mirror import load_config
        from tidelog.mirror.app import run
        self.stop = threading.Event()
        self.thread = threading.Thread(target=run, args=(load_config(config), self.stop), daemon=True)

    def __enter__(self) -> MirrorThread:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive()

"""LogProducer through a stopped broker and a SIGKILL of the producing process: every record counted.

A child process sends 200,000 keyed records through a LogProducer; after every 5,000 it calls
``flush()`` and notes in a progress file how many records are now safe (acknowledged, or spooled
and fsynced). The test stops the broker while the child sends (records go to the spool), kills the
child with SIGKILL half way, starts a second child on the same spool folder that resends from the
last safe count, and starts the broker again. At the end the topic holds every record at least
once, with first appearances in send order per key.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.broker_process import REPO_ROOT, BrokerProcess, wait_until
from helpers.clients import consume, create_topic, unique_topic
from helpers.ledger import check_at_least_once

TOTAL = 200_000
KEYS = 50
PARTITIONS = 3

# argv: bootstrap, spool dir, topic, first record number, progress file, drain (0/1).
# Record n has key k<n % KEYS> and value n // KEYS: its sequence number within its key.
CHILD = f"""
import sys, os
from tidelog.clients import LogProducer
bootstrap, spool, topic, first, progress, drain = sys.argv[1:7]
producer = LogProducer({{"bootstrap.servers": bootstrap, "spool.dir": spool, "linger.ms": 5,
                        "spool.outage.ms": 1000, "spool.probe.interval.ms": 200,
                        "reconnect.backoff.max.ms": 200, "socket.connection.setup.timeout.ms": 3000}})
def safe(n):
    with open(progress, "a") as f:
        f.write(f"{{n}}\\n")
for n in range(int(first), {TOTAL}):
    producer.send(topic, str(n // {KEYS}).encode(), f"k{{n % {KEYS}}}".encode())
    if (n + 1) % 5000 == 0:
        assert producer.flush(60), "flush timed out"
        safe(n + 1)
if drain == "1":
    import time
    while producer.metrics().spooled or producer.metrics().mode != "live":
        time.sleep(0.1)
producer.close()
safe({TOTAL})
print("metrics", producer.metrics(), flush=True)
"""


def last_safe(progress: Path) -> int:
    lines = progress.read_text().split() if progress.exists() else []
    return int(lines[-1]) if lines else 0


def start_child(bootstrap: str, spool: Path, topic: str, first: int, progress: Path, drain: bool,
                log: Path) -> subprocess.Popen[bytes]:
    env = {"PYTHONPATH": str(REPO_ROOT / "src"), "PATH": "/usr/bin:/bin"}
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-c", CHILD, bootstrap, str(spool), topic, str(first), str(progress),
                                 "1" if drain else "0"], stdout=out, stderr=out, env=env)


@pytest.mark.slow  # about 30 s: 200,000 records sent, spooled and replayed
def test_every_record_survives_a_stopped_broker_and_a_killed_producer(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "broker").start()
    children: list[subprocess.Popen[bytes]] = []
    try:
        topic = create_topic(broker.bootstrap, unique_topic("kill"), PARTITIONS)
        spool, progress, log = tmp_path / "spool", tmp_path / "progress", tmp_path / "child.log"
        first = start_child(broker.bootstrap, spool, topic, 0, progress, False, log)
        children.append(first)
        wait_until(lambda: last_safe(progress) >= 40_000, timeout=60, message="40,000 records safe")
        broker.stop()
        wait_until(lambda: last_safe(progress) >= 100_000, timeout=60, message="100,000 records safe (spooled)")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        resume = last_safe(progress)
        assert resume < TOTAL, "killed half way"
        second = start_child(broker.bootstrap, spool, topic, resume, progress, True, log)
        children.append(second)
        wait_until(lambda: last_safe(progress) >= min(resume + 20_000, TOTAL), timeout=60,
                   message="second producer spooling")
        broker.start()
        assert second.wait(120) == 0, log.read_text()[-3000:]
        messages = consume(broker.bootstrap, topic, TOTAL, partitions=range(PARTITIONS), timeout=60, settle=0.5)
        pairs = [(m.key() or b"", int(m.value() or b"-1")) for m in messages]
        counts = check_at_least_once(pairs, {f"k{k}".encode(): TOTAL // KEYS for k in range(KEYS)})
        assert counts["unique"] == TOTAL
        assert not list((spool / "spool-0").glob("*.log")) or all(
            p.stat().st_size == 0 for p in (spool / "spool-0").glob("*.log")), "the spool is empty at the end"
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait(10)
        broker.close()

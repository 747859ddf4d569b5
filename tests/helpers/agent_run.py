"""Driving ``tidelog agent`` in tests: a line writer, a read_committed reader, the agent as a subprocess,
and the rotate-and-kill scenario shared by the system tier (tidelog) and the compat tier (Kafka).

The scenario writes numbered lines (``<n>``, n = 0, 1, 2, ...) to one file while the agent runs, and
meanwhile: kills the agent with SIGKILL while lines stream in, renames the file away while the agent
is down (``mv app.log app.log.1``, a new ``app.log``), copytruncates it while the agent runs, kills
the agent again and copytruncates while it is down, renames while it runs, and empties the file
(plain truncation) once everything written is shipped. At the end a read_committed consumer must
find every line exactly once, in order, with (generation, seqno) growing.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import TopicPartition

from helpers.broker_process import REPO_ROOT, wait_until
from helpers.clients import consumer, create_topic, unique_topic

PARTITIONS = 3


class Writer:
    """Appends numbered lines to a path, reopening it each time (as a logger that reopens would)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.next = 0

    def write(self, count: int, pace: float = 0.0) -> None:
        for _ in range(count // 50):
            with self.path.open("ab") as f:
                f.write(b"".join(b"%d\n" % n for n in range(self.next, self.next + 50)))
            self.next += 50
            if pace:
                time.sleep(pace)


class Reader:
    """A read_committed consumer of every partition that keeps what it has read."""

    def __init__(self, bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
        self.consumer = consumer(bootstrap, {"isolation.level": "read_committed"})
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.values: list[int] = []
        self.positions: list[tuple[int, int]] = []

    def count(self) -> int:
        for message in self.consumer.consume(1000, 0.2):
            if message.error() is None:
                self.values.append(int(message.value() or b"-1"))
                headers = dict(message.headers() or [])
                self.positions.append((int(headers["tidelog-generation"]), int(headers["tidelog-seqno"])))
        return len(self.values)


class AgentRun:
    def __init__(self, config: Path, log: Path) -> None:
        self.config, self.log = config, log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
        with self.log.open("ab") as out:
            self.process = subprocess.Popen([sys.executable, "-m", "tidelog", "agent", "--config", str(self.config)],
                                            stdout=out, stderr=out, env=env)

    def kill9(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> int:
        """SIGTERM and the exit status; an agent still running after 30 s prints its threads' stacks
        to its log (SIGUSR1, faulthandler) and the test fails with the log's end."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGUSR1)
            time.sleep(1)
            tail = self.log.read_text(errors="replace")[-6000:]
            raise AssertionError(f"the agent did not stop within 30 s of SIGTERM; its log ends:\n{tail}") from None

    def close(self) -> None:
        """Kill the agent if it still runs (a test's clean-up)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


def kafka_target(bootstrap: str) -> str:
    """The [kafka] section of a direct-mode agent."""
    return f'[kafka]\nbootstrap.servers = "{bootstrap}"\n"reconnect.backoff.max.ms" = 200\n'


def rotate_and_kill_scenario(bootstrap: str, tmp_path: Path, target: str | None = None) -> None:
    """Run the scenario of the module docstring against the cluster at ``bootstrap``; assert on the topic.

    ``target`` is the configuration's section saying where lines go: [kafka] at ``bootstrap`` by default
    (no state dir, no spool). A ``target`` given also sets ``state.dir`` in [agent]: a [gateway] section
    for gateway mode, or ``kafka_target(bootstrap)`` for direct mode with the outage spool."""
    logs = tmp_path / "logs"
    logs.mkdir()
    app = logs / "app.log"
    topic = create_topic(bootstrap, unique_topic("agent"), PARTITIONS)
    config = tmp_path / "agent.toml"
    config.write_text(f"""
[agent]
id = "{topic}"
host = "h1"
transaction.interval.ms = 100
poll.interval.ms = 20
rotate.wait.ms = 300
{f'state.dir = "{tmp_path / "agent-state"}"' if target else ""}
{target or kafka_target(bootstrap)}
[[files]]
paths = ["{logs}/*.log"]
topic = "{topic}"
""")
    agent = AgentRun(config, tmp_path / "agent.log")
    reader = Reader(bootstrap, topic)
    writer = Writer(app)
    try:
        def shipped(count: int, what: str) -> None:
            wait_until(lambda: reader.count() >= count, timeout=60, interval=0.1, message=what)

        agent.start()
        writer.write(2000, pace=0.005)
        shipped(500, "the agent ships")
        writer.write(2000, pace=0.002)
        agent.kill9()  # 1: while lines stream in
        writer.write(500)
        app.rename(logs / "app.log.1")  # rename rotation while the agent is down
        writer.write(500)
        agent.start()
        shipped(writer.next - 400, "the renamed file, then the new one")
        writer.write(1000, pace=0.002)
        shutil.copyfile(app, logs / "app.log.2")  # copytruncate while it runs, lines unread
        os.truncate(app, 0)
        writer.write(1000, pace=0.002)
        shipped(writer.next - 500, "the copy, then the emptied file")
        writer.write(1000, pace=0.002)
        agent.kill9()  # 2
        writer.write(500)
        shutil.copyfile(app, logs / "app.log.3")  # copytruncate while it is down
        os.truncate(app, 0)
        writer.write(500)
        agent.start()
        shipped(writer.next - 400, "the copy, then the emptied file, after the restart")
        writer.write(1000, pace=0.002)
        app.rename(logs / "app.log.4")  # rename rotation while it runs
        writer.write(1000, pace=0.002)
        shipped(writer.next, "every line")
        os.truncate(app, 0)  # plain truncation, nothing unshipped in it
        writer.write(1000, pace=0.002)
        shipped(writer.next, "lines after the truncation")
        assert agent.stop() == 0, agent.log.read_text()[-3000:]
        time.sleep(0.5)
        reader.count()
        assert reader.values == list(range(writer.next)), (
            f"{len(reader.values)} records for {writer.next} lines; "
            f"missing {sorted(set(range(writer.next)) - set(reader.values))[:10]}, "
            f"duplicated {len(reader.values) - len(set(reader.values))}")
        assert reader.positions == sorted(set(reader.positions)), "(generation, seqno) grows strictly"
        assert reader.positions[-1][0] == 5, "generations: start, 2 renames, 3 truncations"
    except AssertionError as exc:
        if agent.process is not None and agent.process.poll() is None:
            agent.process.send_signal(signal.SIGUSR1)  # the agent prints its threads' stacks
            time.sleep(1)
        got = reader.values
        missing = sorted(set(range(writer.next)) - set(got))
        raise AssertionError(f"{exc}\nread {len(got)} for {writer.next} written; missing {len(missing)}: "
                             f"{missing[:5]}..{missing[-5:]}; duplicated {len(got) - len(set(got))}\n"
                             f"agent log:\n{agent.log.read_text()[-4000:]}") from None
    finally:
        reader.consumer.close()
        agent.close()

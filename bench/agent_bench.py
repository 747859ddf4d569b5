"""tidelog agent's footprint: CPU and memory while it ships a steady 10,000 lines/s.

Not a test: it prints numbers. A tidelog broker runs as a subprocess (tests/helpers) on a free port in
a temporary folder; ``tidelog agent`` runs as a second subprocess tailing one file; this script
appends ``--rate`` lines of ``--size`` bytes per second to that file (in 10 ms slices) for
``--seconds``, and samples the agent's CPU time (/proc/PID/stat, user + system) and resident memory
(/proc/PID/status VmRSS) once a second. ``--mode gateway`` puts ``tidelog gateway`` (a third
subprocess) between them: the agent in gateway mode, positions in a local file. ``--spool`` gives the
direct-mode agent an ``agent.state.dir`` (the outage spool, idle while the broker answers);
``--outage S`` stops the broker S seconds from 5 s into the run (with ``--spool`` the agent spools
meanwhile, then replays), and the CPU is given for the outage and for what follows. Usage::

    python bench/agent_bench.py [--rate 10000] [--seconds 20] [--size 100] [--mode kafka|gateway] [--spool]
                                [--outage S]

Printed: the agent's mean CPU (% of one core) and peak RSS over the steady part (after a 3 s warm-up),
the lines shipped (read_committed count) and the lag after the last write until every line is in
the topic.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from confluent_kafka import TopicPartition

from helpers.broker_process import REPO_ROOT, BrokerProcess
from helpers.clients import consumer, create_topic
from helpers.gateway_process import GATEWAY_TEST_BROKER, GatewayProcess

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def count_committed(bootstrap: str, topic: str, want: int, timeout: float) -> tuple[int, int]:
    """Records read (read_committed) and distinct line numbers among them, once ``want`` are distinct."""
    cons = consumer(bootstrap, {"isolation.level": "read_committed"})
    cons.assign([TopicPartition(topic, 0, 0)])
    seen, numbers, deadline = 0, set(), time.monotonic() + timeout
    while len(numbers) < want and time.monotonic() < deadline:
        for m in cons.consume(10_000, 0.2):
            if m.error() is None:
                seen += 1
                numbers.add((m.value() or b"")[:12])
    cons.close()
    return seen, len(numbers)


def cpu_between(samples: list[tuple[float, float, float]], start: float, end: float) -> float:
    """Mean CPU (% of one core) between two times of the run, from the samples inside."""
    inside = [s for s in samples if start <= s[0] <= end]
    if len(inside) < 2:
        return float("nan")
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0]) * 100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=int, default=10_000, help="lines per second")
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--size", type=int, default=100, help="bytes per line, newline included")
    parser.add_argument("--mode", choices=("kafka", "gateway"), default="kafka",
                        help="the agent writes straight to Kafka, or through tidelog gateway")
    parser.add_argument("--spool", action="store_true", help="direct mode with the outage spool (agent.state.dir)")
    parser.add_argument("--outage", type=float, default=0.0, help="stop the broker this long, from 5 s in")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agent-bench-") as tmp:
        folder = Path(tmp)
        broker = BrokerProcess(folder / "broker", GATEWAY_TEST_BROKER).start()
        gateway: GatewayProcess | None = None
        agent: subprocess.Popen[bytes] | None = None
        try:
            topic = create_topic(broker.bootstrap, "bench-agent", 1)
            (folder / "logs").mkdir()
            app = folder / "logs" / "app.log"
            app.touch()
            config = folder / "agent.toml"
            if args.mode == "gateway":
                gateway = GatewayProcess(folder / "gw", broker.bootstrap).start(60)
                target = f'state.dir = "{folder}/state"\n[gateway]\nurl = "{gateway.url}"\n'
            else:
                target = f'state.dir = "{folder}/state"\n' if args.spool else ""
                target += f'[kafka]\nbootstrap.servers = "{broker.bootstrap}"\n"linger.ms" = 20\n"compression.type" = "lz4"\n'
                if args.outage:
                    target += '"transaction.timeout.ms" = 5000\n'  # the outage is met within 5 s
            config.write_text(f'[agent]\nid = "bench"\n{target}'
                              f'[[files]]\npaths = ["{folder}/logs/*.log"]\ntopic = "{topic}"\n')
            env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
            agent = subprocess.Popen([sys.executable, "-m", "tidelog", "agent", "--config", str(config)],
                                     stderr=(folder / "agent.log").open("wb"), env=env)
            time.sleep(3)  # start-up
            per_slice = args.rate // 100
            filler = b"x" * max(0, args.size - 14)  # "%012d " and the newline
            written, samples = 0, []
            started = time.monotonic()
            next_sample = started + 1
            outage: list[float] = []  # when the broker was stopped, and started again
            with app.open("ab", buffering=0) as out:
                while (now := time.monotonic()) < started + args.seconds:
                    if args.outage and not outage and now - started >= 5:
                        broker.stop()
                        outage.append(time.monotonic() - started)
                    elif len(outage) == 1 and now - started >= outage[0] + args.outage:
                        broker.start()
                        outage.append(time.monotonic() - started)
                    due = int((now - started) * args.rate)
                    if due > written:
                        count = min(due - written, per_slice * 10)
                        out.write(b"".join(b"%012d %s\n" % (written + i, filler) for i in range(count)))
                        written += count
                    if now >= next_sample:
                        samples.append((now - started, cpu_seconds(agent.pid), rss_mib(agent.pid)))
                        next_sample += 1
                    time.sleep(0.01)
            last_write = time.monotonic()
            shipped, distinct = count_committed(broker.bootstrap, topic, written, 60)
            lag = time.monotonic() - last_write
            steady = [s for s in samples if s[0] >= 3]
            cpu = (steady[-1][1] - steady[0][1]) / (steady[-1][0] - steady[0][0]) * 100
            print(f"lines written {written} ({written / args.seconds:,.0f}/s, {args.size} B each); "
                  f"shipped (read_committed) {shipped}, distinct {distinct}")
            if len(outage) == 2:
                print(f"broker stopped {outage[0]:.1f}-{outage[1]:.1f} s: agent CPU during the outage "
                      f"{cpu_between(samples, outage[0], outage[1]):.1f}%, after it (replay, then live) "
                      f"{cpu_between(samples, outage[1], args.seconds):.1f}%")
            print(f"agent CPU {cpu:.1f}% of one core (mean over {steady[-1][0] - steady[0][0]:.0f} s); "
                  f"RSS peak {max(s[2] for s in steady):.1f} MiB, at start {samples[0][2]:.1f} MiB")
            print(f"caught up {lag:.2f} s after the last write (includes reading the topic)")
        finally:
            if agent is not None:
                agent.terminate()
                agent.wait(30)
            if gateway is not None:
                gateway.close()
            broker.close()


if __name__ == "__main__":
    main()

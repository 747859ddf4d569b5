"""tidelog agent against a tidelog broker: an outage with a rotated and deleted file (without a spool,
with the outage spool through two kill -9s, and with a restart during the outage from the local
positions file), multi-line records and the line size limit end to end, and clear errors for a bad
configuration."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from helpers.agent_run import AgentRun, Reader, Writer
from helpers.broker_process import BrokerProcess, wait_until
from helpers.cli_runner import run_cli
from helpers.clients import consume, create_topic, unique_topic


def write_config(path: Path, bootstrap: str, logs: Path, topic: str, extra_agent: str = "", extra_kafka: str = "",
                 extra_files: str = "") -> Path:
    path.write_text(f"""
[agent]
id = "{topic}"
host = "h1"
transaction.interval.ms = 100
poll.interval.ms = 20
rotate.wait.ms = 300
multiline.timeout.ms = 300
{extra_agent}
[kafka]
bootstrap.servers = "{bootstrap}"
"reconnect.backoff.max.ms" = 200
{extra_kafka}
[[files]]
paths = ["{logs}/*.log"]
topic = "{topic}"
{extra_files}
""")
    return path


OUTAGE_SIGNS = ("transaction aborted", "out of reach", "lines go to the spool")


@pytest.mark.parametrize("spool", [False, True], ids=["files-wait", "spool"])
def test_lines_written_renamed_and_deleted_during_an_outage_land_once_when_the_broker_returns(
    tmp_path: Path, spool: bool
) -> None:
    """Without a spool the files wait; with one (agent.state.dir) the agent reads on into it, and when
    the broker returns a new producer settles the failed transaction and the spool is replayed."""
    logs = tmp_path / "logs"
    logs.mkdir()
    app = logs / "app.log"
    with BrokerProcess(tmp_path / "broker") as broker:
        topic = create_topic(broker.bootstrap, unique_topic("outage"), 1)
        # A short transaction timeout: the transaction open when the broker went away is timed out by it.
        config = write_config(tmp_path / "agent.toml", broker.bootstrap, logs, topic,
                              extra_agent=f'state.dir = "{tmp_path / "state"}"' if spool else "",
                              extra_kafka='"transaction.timeout.ms" = 3000')
        agent = AgentRun(config, tmp_path / "agent.log")
        reader = Reader(broker.bootstrap, topic, partitions=1)
        writer = Writer(app)
        try:
            agent.start()
            writer.write(1000, pace=0.002)
            wait_until(lambda: reader.count() >= 1000, timeout=60, interval=0.1, message="shipping")
            broker.stop()
            writer.write(1000)
            app.rename(logs / "app.log.1")
            writer.write(500)
            time.sleep(1)  # the agent holds app.log.1 open: deleting it loses nothing while it runs
            (logs / "app.log.1").unlink()
            # The broker stays away until the agent has met the outage (under load it may take a while).
            wait_until(lambda: any(sign in agent.log.read_text() for sign in OUTAGE_SIGNS), timeout=60,
                       interval=0.2, message="the agent meets the outage")
            broker.start()
            wait_until(lambda: reader.count() >= writer.next, timeout=90, interval=0.2,
                       message=f"all {writer.next} lines after the outage")
            assert agent.stop() == 0
            time.sleep(0.3)
            reader.count()
            log = agent.log.read_text()
            assert reader.values == list(range(writer.next)), log[-3000:]
            if spool:
                assert "the cluster answers again" in log and "lines go straight to it again" in log, log[-3000:]
        finally:
            reader.consumer.close()
            agent.close()


def _wait_in_log(agent: AgentRun, text: str, what: str, timeout: float = 60) -> None:
    wait_until(lambda: text in agent.log.read_text(), timeout=timeout, interval=0.05, message=what)


def test_the_spool_keeps_a_file_deleted_during_an_outage_through_kills_while_spooling_and_replaying(
    tmp_path: Path,
) -> None:
    """Straight to Kafka with agent.state.dir: the broker stopped, lines written, the file rotated;
    the agent killed -9 while spooling and the rotated file deleted while it is down (its lines are then
    only in the spool); the agent restarted before the broker (it waits), and killed -9 again during
    the replay. Every line lands exactly once, in order."""
    logs = tmp_path / "logs"
    logs.mkdir()
    app = logs / "app.log"
    with BrokerProcess(tmp_path / "broker") as broker:
        topic = create_topic(broker.bootstrap, unique_topic("kspool"), 1)
        config = write_config(tmp_path / "agent.toml", broker.bootstrap, logs, topic,
                              extra_agent=f'state.dir = "{tmp_path / "state"}"\ntransaction.max.records = 1000',
                              extra_kafka='"transaction.timeout.ms" = 3000')
        agent = AgentRun(config, tmp_path / "agent.log")
        reader = Reader(broker.bootstrap, topic, partitions=1)
        writer = Writer(app)
        try:
            agent.start()
            writer.write(1000, pace=0.002)
            wait_until(lambda: reader.count() >= 1000, timeout=60, interval=0.1, message="shipping")
            broker.stop()
            writer.write(1000)
            _wait_in_log(agent, "lines go to the spool", "the agent meets the outage")
            app.rename(logs / "app.log.1")
            writer.write(20_000)  # the new app.log: the replay takes about 20 transactions
            time.sleep(1.5)  # app.log.1 is read to its end (rotate.wait.ms) into the spool
            agent.kill9()  # while spooling
            (logs / "app.log.1").unlink()  # its 1000 lines are now only in the spool
            writer.write(500)
            agent.start()  # before the broker: it reads on into the spool behind what it spooled before
            _wait_in_log(agent, "from the local positions", "the restarted agent reads on without the cluster")
            broker.start()
            _wait_in_log(agent, "spool: replaying", "the replay under way")  # after its first transaction
            agent.kill9()  # during the replay: some batches committed (perhaps not yet released), one open
            writer.write(500)
            agent.start()
            wait_until(lambda: reader.count() >= writer.next, timeout=60, interval=0.2,
                       message=f"all {writer.next} lines after the outage")
            assert agent.stop() == 0
            time.sleep(0.3)
            reader.count()
            log = agent.log.read_text()
            assert reader.values == list(range(writer.next)), (
                f"{len(reader.values)} for {writer.next}; duplicated {len(reader.values) - len(set(reader.values))}, "
                f"missing {sorted(set(range(writer.next)) - set(reader.values))[:10]}\n{log[-4000:]}")
            assert reader.positions == sorted(set(reader.positions)), "(generation, seqno) grows strictly"
            assert "is lost" not in log and "lines go straight to it again" in log
        finally:
            reader.consumer.close()
            agent.close()


def test_an_agent_restarted_during_an_outage_reads_on_from_its_local_positions_and_keeps_a_deleted_file(
    tmp_path: Path,
) -> None:
    """Straight to Kafka with agent.state.dir: the broker stopped and the agent killed -9 at once (before
    its commit wait ends, so little or nothing is spooled: its local positions file is what it has),
    restarted while the broker is still down: it reads on into the spool from the local positions, put
    back to a copy taken 500 committed lines earlier (the file may lag, never lead). The file is rotated
    and the rotated file deleted while it runs without a cluster. When the broker returns, the committed
    positions leave out what the agent read again: every line exactly once, in order, and no generation
    reported lost."""
    logs = tmp_path / "logs"
    logs.mkdir()
    app = logs / "app.log"
    with BrokerProcess(tmp_path / "broker") as broker:
        topic = create_topic(broker.bootstrap, unique_topic("klocal"), 1)
        config = write_config(tmp_path / "agent.toml", broker.bootstrap, logs, topic,
                              extra_agent=f'state.dir = "{tmp_path / "state"}"',
                              extra_kafka='"transaction.timeout.ms" = 3000')
        agent = AgentRun(config, tmp_path / "agent.log")
        reader = Reader(broker.bootstrap, topic, partitions=1)
        writer = Writer(app)
        try:
            agent.start()
            writer.write(1000, pace=0.002)
            wait_until(lambda: reader.count() >= 1000, timeout=60, interval=0.1, message="shipping")
            local = tmp_path / "state" / "positions.json"
            lagging = local.read_bytes()  # a copy behind what is committed next (allowed: never ahead)
            writer.write(500)
            wait_until(lambda: reader.count() >= 1500, timeout=60, interval=0.1, message="shipping more")
            writer.write(500)  # read at once; the broker's stop may catch them in a transaction
            broker.stop()
            agent.kill9()
            local.write_bytes(lagging)  # the restart reads lines again that the topic already holds
            writer.write(500)
            agent.start()
            _wait_in_log(agent, "from the local positions", "the restarted agent reads on without the cluster")
            writer.write(500)
            app.rename(logs / "app.log.1")
            writer.write(500)
            _wait_in_log(agent, "generation 1 is inode", "the new app.log seen")
            time.sleep(1.5)  # app.log.1 read to its end (rotate.wait.ms) into the spool
            (logs / "app.log.1").unlink()
            writer.write(500)
            broker.start()
            wait_until(lambda: reader.count() >= writer.next, timeout=60, interval=0.2,
                       message=f"all {writer.next} lines after the outage")
            assert agent.stop() == 0
            time.sleep(0.3)
            reader.count()
            log = agent.log.read_text()
            assert reader.values == list(range(writer.next)), (
                f"{len(reader.values)} for {writer.next}; duplicated {len(reader.values) - len(set(reader.values))}, "
                f"missing {sorted(set(range(writer.next)) - set(reader.values))[:10]}\n{log[-4000:]}")
            assert reader.positions == sorted(set(reader.positions)), "(generation, seqno) grows strictly"
            assert "is lost" not in log and "the cluster answers again" in log, log[-3000:]
        finally:
            reader.consumer.close()
            agent.close()


def test_multi_line_records_and_overlong_lines_reach_the_topic_whole_or_cut_with_their_size(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    topic = create_topic(broker.bootstrap, unique_topic("ml"), 1)
    config = write_config(tmp_path / "agent.toml", broker.bootstrap, logs, topic,
                          extra_files="multiline.start.pattern = '^\\d{4}-'\nmax.line.bytes = 128")
    (logs / "app.log").write_bytes(
        b"2026-12-02 10:00:00 ERROR boom\n"
        b"Traceback (most recent call last):\n"
        b'  File "app.py", line 3\n'
        b"2026-12-02 10:00:01 INFO " + b"x" * 150 + b"\n"
        b"2026-12-02 10:00:02 INFO last\n"
    )
    agent = AgentRun(config, tmp_path / "agent.log")
    try:
        agent.start()
        messages = consume(broker.bootstrap, topic, 3, timeout=60, config={"isolation.level": "read_committed"})
        assert agent.stop() == 0
    finally:
        agent.close()
    values = [m.value() for m in messages]
    assert values[0] == b'2026-12-02 10:00:00 ERROR boom\nTraceback (most recent call last):\n  File "app.py", line 3'
    assert values[1] == (b"2026-12-02 10:00:01 INFO " + b"x" * 150)[:128]
    assert values[2] == b"2026-12-02 10:00:02 INFO last"
    headers = [dict(m.headers() or []) for m in messages]
    assert headers[1]["tidelog-original-size"] == b"175" and "tidelog-original-size" not in headers[0]
    assert [int(h["tidelog-seqno"]) for h in headers] == [90, 266, 296]
    assert all(m.key() == f"h1:{logs}/app.log".encode() for m in messages)


def test_a_missing_topic_and_a_bad_setting_stop_the_agent_with_a_clear_message(
    broker: BrokerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    missing = write_config(tmp_path / "missing.toml", broker.bootstrap, logs, unique_topic("absent"))
    run = run_cli(capsys, "agent", "--config", str(missing))
    assert run.code == 1 and "does not exist; create it first" in run.err
    bad = write_config(tmp_path / "bad.toml", broker.bootstrap, logs, "t", extra_agent="scan.interval.ms = -1")
    run = run_cli(capsys, "agent", "--config", str(bad))
    assert run.code == 2 and "agent.scan.interval.ms: expected an integer >= 1, got -1" in run.err

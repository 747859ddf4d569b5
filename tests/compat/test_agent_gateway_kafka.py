"""tidelog agent in gateway mode in front of Apache Kafka: the agent writes through ``tidelog gateway``,
which reaches the reference Kafka of the compat tier only through the Kafka protocol.

A file is written while the agent runs; the agent is killed -9 mid-stream (its positions file, saved
every 2 s, is then behind what the gateway wrote) and the file renamed away while it is down; after the
restart the agent sends again what followed its saved positions and the gateway answers ``duplicate``
for what Kafka already has. A read_committed consumer finds every line once, in order.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from compat_harness.kafka import ReferenceKafka

from helpers.agent_run import AgentRun, Reader, Writer
from helpers.broker_process import wait_until
from helpers.clients import create_topic, unique_topic
from helpers.gateway_process import GatewayProcess


def test_agent_through_the_gateway_on_kafka_ships_every_line_once_in_order_through_a_kill9(
    reference_kafka: ReferenceKafka, tmp_path: Path
) -> None:
    bootstrap = reference_kafka.bootstrap
    topic = create_topic(bootstrap, unique_topic("agw-kafka"), 1)
    logs = tmp_path / "logs"
    logs.mkdir()
    app = logs / "app.log"
    with GatewayProcess(tmp_path / "gw", bootstrap) as gateway:
        config = tmp_path / "agent.toml"
        config.write_text(f'[agent]\nid = "{topic}"\nhost = "h1"\ntransaction.interval.ms = 100\n'
                          f'poll.interval.ms = 20\nrotate.wait.ms = 300\nstate.dir = "{tmp_path / "state"}"\n'
                          f'[gateway]\nurl = "{gateway.url}"\npositions.save.interval.ms = 2000\n'
                          f'[[files]]\npaths = ["{logs}/*.log"]\ntopic = "{topic}"\n')
        agent = AgentRun(config, tmp_path / "agent.log")
        reader = Reader(bootstrap, topic, partitions=1)
        writer = Writer(app)
        try:
            agent.start()
            writer.write(1000, pace=0.005)
            wait_until(lambda: reader.count() >= 300, timeout=60, interval=0.1, message="the agent ships")
            writer.write(1000, pace=0.002)
            agent.kill9()  # while lines stream in
            writer.write(500)
            app.rename(logs / "app.log.1")  # a rename rotation while the agent is down
            writer.write(500)
            agent.start()
            writer.write(500, pace=0.002)
            wait_until(lambda: reader.count() >= writer.next, timeout=60, interval=0.2,
                       message=f"all {writer.next} lines")
            assert agent.stop() == 0
            time.sleep(0.3)
            reader.count()
            log = agent.log.read_text()
            assert reader.values == list(range(writer.next)), (
                f"{len(reader.values)} for {writer.next}; duplicated {len(reader.values) - len(set(reader.values))}"
                f"\n{log[-3000:]}")
            assert reader.positions == sorted(set(reader.positions)), "(generation, seqno) grows strictly"
            assert reader.positions[-1][0] == 1, "two generations: the renamed file, then the new one"
            resent = re.search(r"(\d+) already at the gateway", log)
            assert resent is not None and int(resent.group(1)) > 0, "the restart sent lines the gateway had"
        finally:
            reader.consumer.close()
            agent.close()

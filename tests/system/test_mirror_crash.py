"""tidelog mirror between two tidelog brokers while the source is written by plain, idempotent and
transactional producers (some transactions aborted): two mirror processes of one link, SIGKILLed at
random moments and cut off from the destination once; at the end every destination partition equals
its source partition record for record (committed records only), nothing twice.
(The scenario: helpers/mirror_run.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.broker_process import GROUP_TEST_BROKER, BrokerProcess
from helpers.clients import create_topic, unique_topic
from helpers.link_proxy import LinkProxy
from helpers.mirror_run import kill_and_cut_scenario

PARTITIONS = 20
RECORDS = 100_000


@pytest.mark.slow  # about a minute on a loaded 2-core machine: two brokers, two mirrors started 6 times
def test_two_mirrors_killed_and_cut_off_copy_every_committed_record_exactly_once(tmp_path: Path) -> None:
    proxy = LinkProxy()
    source = BrokerProcess(tmp_path / "source", GROUP_TEST_BROKER)
    destination = BrokerProcess(tmp_path / "destination", {
        **GROUP_TEST_BROKER, "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"})
    try:
        source.start()
        destination.start()
        proxy.start("127.0.0.1", destination.port)
        topic = create_topic(source.bootstrap, unique_topic("mirrored"), PARTITIONS)
        written = kill_and_cut_scenario(source.bootstrap, f"127.0.0.1:{proxy.port}", tmp_path, topic=topic,
                                        partitions=PARTITIONS, records=RECORDS, processes=2, kills=4,
                                        cut=lambda: proxy.cut("blackhole"), heal=proxy.heal)
        assert written > RECORDS // 2
    finally:
        proxy.close()
        source.close()
        destination.close()

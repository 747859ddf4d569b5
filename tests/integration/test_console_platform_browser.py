"""The Platform pages in a real browser (Debian's headless Chromium through Selenium), clicked through
with every part's state present, each value on the page checked against the cluster, and a
screenshot of every page (``TIDELOG_CONSOLE_SCREENSHOTS=DIR`` copies them there; docs/console/).

One broker, one console, one browser for the module. The state is written by the parts' own code:

- the governor: paused with ``tidelog governor pause`` (the CLI), a plan written with its ``Store``
  and ``PartitionMove.to_json``;
- a mirror link that keeps checkpoints: the mirror's ``Checkpoint`` records, written in a
  transaction to its link topic as the mirror writes them (test_console_platform.py runs the real
  link; here the checkpoints are fixed so the page can be checked value for value);
- an offset-preserving link (``offsets = "preserve"``): a real link process (``tidelog.mirror.app.run``
  in a thread) copying a topic of the broker to a renamed topic of the same broker; its file is
  given to the console (``console.mirror.config``), so the page shows the source side too;
- the gateway: state records made with the gateway's own ``state_codec``, in the shard its code picks.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.select import Select

from helpers.broker_process import BrokerProcess, module_broker, wait_until
from helpers.clients import create_topic, unique_topic
from helpers.console_browser import chromium_driver, click, click_element, fill, screenshot, text
from helpers.console_process import ConsoleProcess
from helpers.gateway_process import GATEWAY_TEST_BROKER
from helpers.mirror_run import MirrorThread, listen_port, write_config
from tidelog.gateway.seqno import SourceState
from tidelog.gateway.state_codec import encode_state, shard_of, state_key
from tidelog.governor.planner import PartitionMove
from tidelog.governor.store import Store
from tidelog.mirror.position import Checkpoint
from tidelog.mirror.position import shard_of as mirror_shard

platform_browser_broker = module_broker("platform_browser_broker", {**GATEWAY_TEST_BROKER, "offsets.topic.num.partitions": 1,
                                                   "transaction.state.log.num.partitions": 1})
KEEP_LINK, CHECKPOINT_LINK = unique_topic("keep"), unique_topic("dc2")
SOURCE = unique_topic("orders")
COPY = f"copy.{SOURCE}"
METRICS_PORT = listen_port()  # bound by the mirror later: never an ephemeral port
AT_MS = 1796230000000
SOURCES = {f"pos-{city}-{n:02d}": seqno for n, (city, seqno) in
           enumerate([("berlin", 14), ("paris", 3), ("lyon", 27), ("oslo", 0), ("riga", 9), ("porto", 5)])}


@dataclass
class State:
    governed: str        # the topic the governor's plan moves
    events: str          # the gateway's data topic
    checkpoints: list[Checkpoint]


@pytest.fixture(scope="module")
def keep_file(tmp_path_factory: pytest.TempPathFactory, platform_browser_broker: BrokerProcess) -> Path:
    bootstrap = platform_browser_broker.bootstrap
    return write_config(tmp_path_factory.mktemp("keep") / "keep.toml", name=KEEP_LINK, source=bootstrap,
                        destination=bootstrap, include=[re.escape(SOURCE)], rename="copy.{topic}",
                        link={"offsets": "preserve", "shards": 4, "metrics.listen": f"127.0.0.1:{METRICS_PORT}"})


@pytest.fixture(scope="module")
def console(platform_browser_broker: BrokerProcess, keep_file: Path,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleProcess]:
    settings = {"console.mirror.config": keep_file, "console.mirror.url": f"http://127.0.0.1:{METRICS_PORT}",
                "console.lag.interval.ms": 60000, "console.metadata.max.age.ms": 500}
    with ConsoleProcess(tmp_path_factory.mktemp("platform-browser"), platform_browser_broker.bootstrap,
                        settings).start(timeout=60) as process:
        yield process


@pytest.fixture(scope="module")
def admin(platform_browser_broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": platform_browser_broker.bootstrap})


def cli(*argv: str) -> int:
    from tidelog.cli.main import main
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        return main(list(argv))
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


@pytest.fixture(scope="module")
def state(platform_browser_broker: BrokerProcess, admin: AdminClient) -> State:
    bootstrap = platform_browser_broker.bootstrap
    governed = create_topic(bootstrap, unique_topic("governed"), 3)
    assert cli("governor", "pause", "-b", bootstrap, "--reason", "quarter close") == 0
    store = Store({"bootstrap.servers": bootstrap})
    store.ensure(admin)
    moves = [PartitionMove(governed, 0, (1,), (1,), 1 << 20), PartitionMove(governed, 1, (1,), (2,), 50 << 20),
             PartitionMove(governed, 2, (1,), (3,), 50 << 20), PartitionMove("retired", 0, (1,), (2,), 4096)]
    store.write("plan", {"id": "5d0c2a9e41b7", "createdMs": AT_MS, "reason": "drain 2", "throttle": 10485760,
                         "moves": [m.to_json() for m in moves], "cancelled": [[governed, 2]]})

    link_topic = f"__tidelog_mirror.{CHECKPOINT_LINK}"
    create_topic(bootstrap, link_topic, 4)
    checkpoints = [Checkpoint("payments", p, 400 + 10 * p, 380 + 10 * p, AT_MS + 5000 + p, AT_MS + p) for p in range(3)]
    writer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{CHECKPOINT_LINK}-0"})
    writer.init_transactions(15)
    writer.begin_transaction()
    for c in checkpoints:
        writer.produce(link_topic, key=c.key, value=c.encode(), partition=mirror_shard(c.topic, c.partition, 4))
    writer.commit_transaction(15)

    events = create_topic(bootstrap, unique_topic("events"), 2)
    create_topic(bootstrap, "__tidelog_gateway_state", 4)
    gateway = Producer({"bootstrap.servers": bootstrap})
    for n, (source_id, seqno) in enumerate(SOURCES.items()):
        key = state_key(events, source_id)
        gateway.produce("__tidelog_gateway_state", key=key, value=encode_state(SourceState(seqno, n % 2)),
                        partition=shard_of(key, 4))
    assert gateway.flush(10) == 0
    return State(governed, events, checkpoints)


@pytest.fixture(scope="module")
def keep_link(platform_browser_broker: BrokerProcess, keep_file: Path, admin: AdminClient) -> Iterator[MirrorThread]:
    """The offset-preserving link running, caught up with 3 partitions of 40, 25 and 10 records."""
    bootstrap = platform_browser_broker.bootstrap
    create_topic(bootstrap, SOURCE, 3)
    producer = Producer({"bootstrap.servers": bootstrap})
    for p, count in enumerate((40, 25, 10)):
        for i in range(count):
            producer.produce(SOURCE, value=f"order {p}-{i}".encode(), partition=p)
    assert producer.flush(10) == 0
    with MirrorThread(keep_file) as mirror:
        wait_until(lambda: ends(admin, COPY) == {0: 40, 1: 25, 2: 10}, timeout=60, interval=0.5,
                   message="the copy caught up")
        yield mirror


def ends(admin: AdminClient, topic: str) -> dict[int, int]:
    """ListOffsets (latest) on the partitions the topic has (empty while it does not exist)."""
    metadata = admin.list_topics(topic, timeout=10).topics[topic]
    if metadata.error is not None:
        return {}
    futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in metadata.partitions},
                                 request_timeout=10)
    return {tp.partition: f.result(10).offset for tp, f in futures.items()}


@pytest.fixture(scope="module")
def browser(console: ConsoleProcess) -> Iterator[WebDriver]:
    driver = chromium_driver()
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("screenshots")


def table(driver: WebDriver, table_id: str) -> list[list[str]]:
    return [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
            for row in driver.find_elements(By.CSS_SELECTOR, f"#{table_id} tbody tr")]


def go(driver: WebDriver, link_text: str) -> None:
    """Follow a link of the page, as a user clicks it, and wait for the page it leads to."""
    click_element(driver, driver.find_element(By.LINK_TEXT, link_text))


def group_owner(admin: AdminClient, group: str) -> str:
    described = admin.describe_consumer_groups([group])[group].result(10)
    assert len(described.members) == 1
    member = described.members[0]
    return f"{member.client_id}@{member.host}"


# -- the tests --------------------------------------------------------------------------------------


def test_platform_summary_shows_every_part_from_the_menu(browser: WebDriver, console: ConsoleProcess, state: State,
                                                         keep_link: MirrorThread, shots: Path) -> None:
    browser.get(console.url + "/")
    go(browser, "Platform")
    assert browser.current_url == console.url + "/platform"
    assert text(browser, "#governor-mode") == "paused" and text(browser, "#governor-plan") == "5d0c2a9e41b7"
    assert text(browser, "#gateway-sources") == str(len(SOURCES))
    links = {r[0]: r for r in table(browser, "links")}
    assert links[CHECKPOINT_LINK] == [CHECKPOINT_LINK, "4", "0", "3", "2026-12-02 16:46:45.002Z", "", "translated"]
    assert links[KEEP_LINK] == [KEEP_LINK, "4", "4", "3", "", "0", "preserved"]  # no checkpoint: no commit time
    screenshot(browser, shots, "platform")


def test_governor_page_shows_the_plan_and_each_moves_replicas_as_metadata_has_them(
        browser: WebDriver, console: ConsoleProcess, state: State, admin: AdminClient, shots: Path) -> None:
    browser.get(console.url + "/platform")
    go(browser, "Governor")
    assert "paused by operator: quarter close" in text(browser, "#governor-control")
    assert text(browser, "#plan-id") == "5d0c2a9e41b7"
    assert "4 moves (1 pending, 1 done, 1 cancelled, 1 gone)" in text(browser, "#governor-control")
    replicas = {p: ", ".join(map(str, m.replicas))
                for p, m in admin.list_topics(state.governed, timeout=10).topics[state.governed].partitions.items()}
    assert table(browser, "moves") == [
        [f"{state.governed}-0", "1", "1", replicas[0], "1.0 MiB", "done"],
        [f"{state.governed}-1", "1", "2", replicas[1], "50.0 MiB", "pending"],
        [f"{state.governed}-2", "1", "3", replicas[2], "50.0 MiB", "cancelled"],
        ["retired-0", "1", "2", "gone", "4.0 KiB", "gone"]]
    screenshot(browser, shots, "platform-governor")
    Select(browser.find_element(By.CSS_SELECTOR, "select[name=state]")).select_by_visible_text("pending")
    click(browser, "form.search button")
    assert [r[0] for r in table(browser, "moves")] == [f"{state.governed}-1"]


def test_mirror_page_shows_checkpoints_and_a_preserving_links_offsets_on_both_sides(
        browser: WebDriver, console: ConsoleProcess, state: State, keep_link: MirrorThread, admin: AdminClient,
        shots: Path) -> None:
    browser.get(console.url + "/platform")
    go(browser, "Mirror links")
    owner = group_owner(admin, f"tidelog-mirror.{KEEP_LINK}")
    source_ends, copy_ends = ends(admin, SOURCE), ends(admin, COPY)
    assert copy_ends == source_ends == {0: 40, 1: 25, 2: 10}
    expected = [[KEEP_LINK, f"{COPY}-{p}", "0", str(copy_ends[p]), f"{SOURCE}-{p}", "0", str(source_ends[p]),
                 str(mirror_shard(SOURCE, p, 4)), owner, "0", "0.0"] for p in range(3)]
    wait_until(lambda: table(browser, "preserved") == expected or browser.refresh(), 10, interval=0.5,
               message=f"the preserved partitions as {expected}")
    shown = table(browser, "checkpoints")
    assert shown == [[CHECKPOINT_LINK, str(mirror_shard("payments", c.partition, 4)), "no owner",
                      f"payments-{c.partition}", str(c.next), str(c.dest_next),
                      time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(c.at // 1000)) + f".{c.at % 1000:03d}Z",
                      time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(c.ts // 1000)) + f".{c.ts % 1000:03d}Z", "", ""]
                     for c in state.checkpoints]
    screenshot(browser, shots, "platform-mirror")

    keep_link.__exit__(None, None, None)  # the link stops; the source gets 7 more records in partition 0
    producer = Producer({"bootstrap.servers": console.bootstrap})
    for i in range(7):
        producer.produce(SOURCE, value=f"late {i}".encode(), partition=0)
    assert producer.flush(10) == 0
    fill(browser, "#checkpoint-search", SOURCE)
    click(browser, "form.search button")

    def behind() -> list[str] | None:
        browser.refresh()
        rows = table(browser, "preserved")
        return rows[0] if rows and rows[0][6] == "47" else None
    first = wait_until(behind, 10, interval=0.5, message="the source's new end on the page")
    assert first[3] == "40" and first[8] == "no owner" and first[9] == "7"  # 47 - 40, no process owns it
    assert table(browser, "checkpoints") == [["no checkpoint matches"]]


def test_gateway_page_lists_the_sources_searches_and_sorts(browser: WebDriver, console: ConsoleProcess,
                                                           state: State, shots: Path) -> None:
    browser.get(console.url + "/platform")
    go(browser, "Gateway sources")
    assert "State topic __tidelog_gateway_state, 4 shards." in text(browser, "main")
    by_id = {r[1]: r for r in table(browser, "sources")}
    assert by_id == {source_id: [state.events, source_id, str(seqno), str(n % 2),
                                 str(shard_of(state_key(state.events, source_id), 4))]
                     for n, (source_id, seqno) in enumerate(SOURCES.items())}
    screenshot(browser, shots, "platform-gateway")
    go(browser, "last seqno")
    assert [r[2] for r in table(browser, "sources")] == [str(s) for s in sorted(SOURCES.values())]
    go(browser, "last seqno ▲")  # a second click sorts the other way
    assert [r[2] for r in table(browser, "sources")] == [str(s) for s in sorted(SOURCES.values(), reverse=True)]
    fill(browser, "#source-search", "pos-paris")
    click(browser, "form.search button")
    assert [r[1] for r in table(browser, "sources")] == ["pos-paris-01"]

"""The Platform pages against a tidelog broker, each part's state written by the part's own code:

- the governor: ``tidelog governor pause`` (the CLI, through the governor's engine and store) and a
  plan written with the governor's ``Store`` and ``PartitionMove.to_json``, as ``submit`` writes it;
- the mirror: a real link (``tidelog.mirror.app.run`` in a thread) copying a topic of the broker to
  renamed topics on the same broker, its metrics endpoint given to the console for the lag columns;
- the gateway: ``tidelog gateway`` as a subprocess, written to over HTTP by several sources;
- an offset-preserving link's destination: a topic given ``mirror.source`` by hand (the link itself,
  with its source side, runs in test_console_platform_browser.py).

The console runs as a subprocess (``ConsoleProcess``); the checks are on the HTML it serves (rows,
search, paging, empty states), compared with what was written.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from helpers.broker_process import BrokerProcess, module_broker, wait_until
from helpers.cli_runner import run_cli
from helpers.clients import create_topic, unique_topic
from helpers.console_process import ConsoleProcess
from helpers.gateway_process import GATEWAY_TEST_BROKER, GatewayProcess, write_json
from helpers.mirror_run import MirrorThread, listen_port, write_config
from tidelog.governor.planner import PartitionMove
from tidelog.governor.store import Store
from tidelog.mirror.position import shard_of

platform_broker = module_broker("platform_broker", {**GATEWAY_TEST_BROKER, "offsets.topic.num.partitions": 1,
                                                    "transaction.state.log.num.partitions": 1})
empty_broker = module_broker("empty_broker", {"offsets.topic.num.partitions": 1})
GATEWAY_GROUP = f"gw-{uuid.uuid4().hex[:8]}"
MIRROR_PORT = listen_port()  # bound by the mirror much later: never an ephemeral port
LOST_LINK, LOST_SOURCE = unique_topic("lost"), f"127.0.0.1:{listen_port()}"  # a preserving link, nothing there


@pytest.fixture(scope="module")
def console(platform_broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleProcess]:
    workdir = tmp_path_factory.mktemp("platform-console")
    lost = write_config(workdir / "lost.toml", name=LOST_LINK, source=LOST_SOURCE, destination=platform_broker.bootstrap,
                        include=[".*"], rename="dc1.{topic}", link={"offsets": "preserve", "shards": 8})
    settings = {"console.gateway.state.topic": f"__gwstate-{GATEWAY_GROUP}", "console.mirror.config": lost,
                "console.mirror.url": f"http://127.0.0.1:{MIRROR_PORT}", "console.lag.interval.ms": 60000}
    with ConsoleProcess(workdir, platform_broker.bootstrap, settings).start(timeout=60) as process:
        yield process


def page(console: ConsoleProcess, path: str) -> str:
    answer = httpx.get(console.url + path, timeout=30)
    assert answer.status_code == 200, answer.text[:2000]
    return answer.text


def page_once(console: ConsoleProcess, path: str, wanted: str) -> str:
    """The page once it shows ``wanted``: the console's metadata is refreshed in the background, so a
    topic made a moment ago may take a refresh (``console.metadata.max.age.ms``) to appear."""
    return wait_until(lambda: (lambda html: html if wanted in html else None)(page(console, path)),
                      timeout=20, interval=0.5, message=f"{wanted!r} on {path}")


def rows(html: str, table: str) -> list[list[str]]:
    """The cells' text of each body row of the table with id ``table``."""
    body = html.split(f'<table id="{table}"', 1)[1].split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return [[re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)]


def test_parts_not_used_on_the_cluster_show_their_empty_state(empty_broker: BrokerProcess,
                                                              tmp_path: Path) -> None:
    with ConsoleProcess(tmp_path, empty_broker.bootstrap).start(timeout=60) as console:
        summary = page(console, "/platform")
        assert "The governor is not used on this cluster (no <code>__tidelog_governor</code> topic)" in summary
        assert "No mirror link writes to this cluster" in summary
        assert "The gateway is not used on this cluster (no <code>__tidelog_gateway_state</code> topic)" in summary
        assert ">Platform</a>" in summary  # the menu always has the page
        for part in ("governor", "mirror", "gateway"):
            assert "nothing to show" in page(console, f"/platform/{part}")


def test_governor_panel_shows_control_the_plan_with_each_move_state_and_the_last_plan(
        console: ConsoleProcess, platform_broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    bootstrap = platform_broker.bootstrap
    topic = create_topic(bootstrap, unique_topic("governed"), 3)
    paused = run_cli(capsys, "governor", "pause", "-b", bootstrap, "--reason", "black friday")
    assert paused.code == 0, paused.err
    store = Store({"bootstrap.servers": bootstrap})
    store.ensure(AdminClient({"bootstrap.servers": bootstrap}))
    moves = [PartitionMove(topic, 0, (1,), (1,), 1000),        # already there: done
             PartitionMove(topic, 1, (1,), (2,), 2000),        # broker 2 never came: pending
             PartitionMove(topic, 2, (1,), (3,), 3000)]        # cancelled by the plan
    moves += [PartitionMove("gone-topic", p, (1,), (2,), 10) for p in range(57)]  # deleted since: gone
    store.write("plan", {"id": "plan-7f3a", "createdMs": 1796230000000, "reason": "rebalance",
                         "throttle": 10485760, "moves": [m.to_json() for m in moves], "cancelled": [[topic, 2]]})

    summary = page_once(console, "/platform", '<b id="governor-plan">')
    assert '<b id="governor-mode">paused</b><span>by operator</span>' in summary
    assert '<b id="governor-plan">plan-7f3a</b>' in summary
    html = page(console, "/platform/governor")
    assert "black friday" in html and '<code id="plan-id">plan-7f3a</code>' in html
    assert "60 moves (1 pending, 1 done, 1 cancelled, 57 gone)" in html
    assert "60 moves · page 1 of 2" in html and len(rows(html, "moves")) == 50
    assert len(rows(page(console, "/platform/governor?page=2"), "moves")) == 10
    mine = rows(page(console, f"/platform/governor?q={topic}"), "moves")
    assert mine == [[f"{topic}-0", "1", "1", "1", "1000 B", "done"],
                    [f"{topic}-1", "1", "2", "1", "2.0 KiB", "pending"],
                    [f"{topic}-2", "1", "3", "1", "2.9 KiB", "cancelled"]]
    assert [r[0] for r in rows(page(console, "/platform/governor?state=pending"), "moves")] == [f"{topic}-1"]

    store.write("last", {"id": "plan-7f3a", "reason": "rebalance", "finishedMs": 1796230600000, "moves": 60,
                         "cancelled": 58, "throttled": True})
    store.write("plan", None)  # what the governor writes when a plan ends
    html = page(console, "/platform/governor")
    assert "No plan is being executed." in html
    assert "<code>plan-7f3a</code> ended 2026-12-02 16:56:40.000Z · rebalance · 60 moves, 58 cancelled" in html


def test_mirror_panel_shows_each_links_checkpoints_with_shard_owner_and_lag(
        console: ConsoleProcess, platform_broker: BrokerProcess, tmp_path: Path) -> None:
    bootstrap = platform_broker.bootstrap
    prefix = unique_topic("src")
    source = create_topic(bootstrap, f"{prefix}.orders", 3)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(30):
        producer.produce(source, value=f"order {i}".encode(), partition=i % 3)
    assert producer.flush(10) == 0
    link = unique_topic("link")
    config = write_config(tmp_path / "link.toml", name=link, source=bootstrap, destination=bootstrap,
                          include=[f"{prefix}\\..*"], rename="copy.{topic}",
                          link={"shards": 4, "metrics.listen": f"127.0.0.1:{MIRROR_PORT}"})

    seen: list[str] = []

    def caught_up() -> list[list[str]] | None:
        html = page(console, f"/platform/mirror?q={source}")
        if '<table id="checkpoints"' not in html:  # the link topic is being created: no table yet
            seen.append(html.split("<main", 1)[1][:600])
            return None
        found = rows(html, "checkpoints")
        done = len(found) == 3 and all(r[4] == "10" and r[2] != "no owner" and r[8] == "0" for r in found)
        return found if done else None

    with MirrorThread(config):
        try:
            found = wait_until(caught_up, timeout=90, interval=1, message="the link's checkpoints on the page")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the last page without a table: {seen[-1:]}") from None
        assert [link, "4", "4", "3"] in [r[:4] for r in rows(page(console, "/platform"), "links")]
    assert [r[3] for r in found] == [f"{source}-0", f"{source}-1", f"{source}-2"]
    assert all(r[0] == link and r[5] == "10" for r in found)  # next source offset 10, copies at 0..9
    assert {int(r[1]) for r in found} <= {0, 1, 2, 3}
    # the mirror stopped: its checkpoints stay, its shards have no owner any more
    assert [link, "4", "0", "3"] in [r[:4] for r in rows(page(console, "/platform"), "links")]
    after = rows(page(console, f"/platform/mirror?q={source}"), "checkpoints")
    assert [r[2] for r in after] == ["no owner"] * 3 and [r[4] for r in after] == ["10"] * 3
    assert rows(page(console, "/platform/mirror?q=no-such-topic"), "checkpoints") == [["no checkpoint matches"]]


def test_gateway_panel_lists_every_source_with_its_last_seqno_and_skips_a_bad_record(
        console: ConsoleProcess, platform_broker: BrokerProcess, tmp_path: Path) -> None:
    bootstrap = platform_broker.bootstrap
    topic = create_topic(bootstrap, unique_topic("events"), 2)
    with GatewayProcess(tmp_path, bootstrap, group=GATEWAY_GROUP) as gateway:
        def write(n: int) -> httpx.Response:
            chunks = [(s, [f"source {n} chunk {s}"]) for s in range(1 + n % 3)]
            return write_json(gateway.url, topic, f"sensor-{n:02d}", chunks)

        with ThreadPoolExecutor(8) as pool:
            for answer in pool.map(write, range(55)):
                assert answer.status_code == 200, answer.text
    state_topic = f"__gwstate-{GATEWAY_GROUP}"
    bad = Producer({"bootstrap.servers": bootstrap})
    bad.produce(state_topic, key=b"not json", value=b"{}", partition=0)
    assert bad.flush(10) == 0

    html = page_once(console, "/platform/gateway", "State topic")
    assert f"State topic <code>{state_topic}</code>, 4 shards." in html and "1 unreadable records" in html
    assert "55 sources · page 1 of 2" in html and len(rows(html, "sources")) == 50
    one = rows(page(console, "/platform/gateway?q=sensor-07"), "sources")
    assert len(one) == 1 and one[0][:3] == [topic, "sensor-07", "1"]  # chunks 0 and 1: last seqno 1
    top = rows(page(console, "/platform/gateway?sort=seqno&desc=1"), "sources")
    assert {r[2] for r in top[:18]} == {"2"}  # 18 sources wrote chunks 0..2
    assert all(r[3] in ("0", "1") and r[4] in ("0", "1", "2", "3") for r in top)
    summary = page(console, "/platform")
    assert '<b id="gateway-sources">55</b>' in summary


def test_an_open_transaction_on_a_state_topic_shows_what_is_committed_without_waiting(
        console: ConsoleProcess, platform_broker: BrokerProcess) -> None:
    from tidelog.mirror.position import Checkpoint
    bootstrap = platform_broker.bootstrap
    link = unique_topic("txlink")
    create_topic(bootstrap, f"__tidelog_mirror.{link}", 2)
    writer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{link}-0"})
    writer.init_transactions(15)

    def checkpoint(topic: str, next_offset: int) -> None:
        c = Checkpoint(topic, 0, next_offset, next_offset, 1796230000000, 1796230000000, [])
        writer.produce(f"__tidelog_mirror.{link}", key=c.key, value=c.encode(), partition=0)

    writer.begin_transaction()
    checkpoint("committed", 5)
    writer.commit_transaction(15)
    writer.begin_transaction()
    checkpoint("committed", 9)      # the transaction stays open: the page shows offset 5
    checkpoint("in-flight", 7)
    writer.flush(15)
    html = page_once(console, f"/platform/mirror?q={link}", "committed-0")
    started = time.monotonic()
    shown = rows(page(console, f"/platform/mirror?q={link}"), "checkpoints")
    assert time.monotonic() - started < 5  # not held until the reader's deadline
    assert [(r[3], r[4]) for r in shown] == [("committed-0", "5")], html
    writer.commit_transaction(15)
    after = rows(page_once(console, f"/platform/mirror?q={link}", "in-flight-0"), "checkpoints")
    assert sorted((r[3], r[4]) for r in after) == [("committed-0", "9"), ("in-flight-0", "7")]


def test_a_topic_marked_by_an_offset_preserving_link_is_listed_with_its_destination_offsets(
        console: ConsoleProcess, platform_broker: BrokerProcess) -> None:
    """Such a link writes no checkpoint: the console finds it by the ``mirror.source`` override on its
    destination topics (here set by hand on an existing topic, as docs/mirror.md says to). With no
    file for the link in ``console.mirror.config``, the source side is left empty, not guessed."""
    bootstrap = platform_broker.bootstrap
    link, topic = unique_topic("handmade"), create_topic(bootstrap, unique_topic("kept"), 2)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(7):
        producer.produce(topic, value=b"x", partition=i % 2)
    assert producer.flush(10) == 0
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("mirror.source", link, incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(10)

    html = page_once(console, f"/platform/mirror?q={link}", f"{topic}-1")
    assert rows(html, "preserved") == [[link, f"{topic}-0", "0", "4", "", "", "", "", "", "", ""],
                                       [link, f"{topic}-1", "0", "3", "", "", "", "", "", "", ""]]
    assert f"not given for {link}: those columns stay empty" in html
    summary = [r for r in rows(page(console, "/platform"), "links") if r[0] == link]
    assert summary == [[link, "0", "0", "2", "", "", "preserved"]]  # no link topic: it never ran here


def test_a_preserving_links_source_that_does_not_answer_is_named_and_its_destination_still_shown(
        console: ConsoleProcess, platform_broker: BrokerProcess) -> None:
    """The link's file (``console.mirror.config``) names a source where nothing listens: the page says
    so above the table, within the console's 3 s bound, with the destination side and the shard (from
    the file's rename and shard count) still shown."""
    bootstrap = platform_broker.bootstrap
    topic = create_topic(bootstrap, f"dc1.{unique_topic('audit')}", 1)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("mirror.source", LOST_LINK, incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(10)

    page_once(console, f"/platform/mirror?q={LOST_LINK}", f"{topic}-0")
    started = time.monotonic()
    html = page(console, f"/platform/mirror?q={LOST_LINK}")
    assert time.monotonic() - started < 8
    assert f"link {LOST_LINK}: the source {LOST_SOURCE} does not answer: " in html
    source = topic.removeprefix("dc1.")
    assert rows(html, "preserved") == [[LOST_LINK, f"{topic}-0", "0", "0", f"{source}-0", "", "", str(shard_of(source, 0, 8)),
                                        "no owner", "", ""]]

"""The web console in a real browser: Debian's headless Chromium driven by Selenium (chromium-driver).

One secured broker for the module (SASL, ACLs on; the console connects as the SCRAM user ``console``,
allowed to describe the cluster and do anything to topics and groups but create ``forbidden-*`` topics), one console process with a users
file (``root`` admin, ``viewer`` read-only), one browser. The tests click through every page and
check what the page shows against the cluster's real state, read with confluent-kafka as ``admin``.

Screenshots of every page go to the module's temporary folder; with ``TIDELOG_CONSOLE_SCREENSHOTS=DIR``
they are also copied there (how docs/console/*.png were made; helpers/console_browser.py).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from helpers.broker_process import BrokerProcess, free_port, register_failure_report, wait_until
from helpers.clients import FAST_CLIENT, unique_topic
from helpers.console_browser import chromium_driver, click, fill, flash, open_details, screenshot, text
from helpers.console_browser import login as login_as
from helpers.console_process import ConsoleProcess
from tidelog.console.auth import hash_password

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
CONSOLE_SCRAM_PASSWORD = "console-scram-secret"
PASSWORDS = {"root": "root-pass-123", "viewer": "viewer-pass-456"}


def admin_config(bootstrap: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, **FAST_CLIENT, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "admin-secret"}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[BrokerProcess]:
    register_failure_report(pytestconfig)
    workdir = tmp_path_factory.mktemp("console-broker")
    (workdir / "users").write_text("admin = admin-secret\n")
    broker = BrokerProcess(workdir, {
        "authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:admin",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512", "sasl.plain.users.file": workdir / "users",
        "group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 2,
        "auto.create.topics.enable": "false", "metrics.port": free_port(), "metrics.host": "127.0.0.1",
    })
    broker.properties["listeners"] = f"SASL_PLAINTEXT://127.0.0.1:{broker.port}"
    broker.properties["listener.security.protocol.map"] = "SASL_PLAINTEXT:SASL_PLAINTEXT"
    with broker:
        admin = AdminClient(admin_config(broker.bootstrap))
        upsert = UserScramCredentialUpsertion("console", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                              CONSOLE_SCRAM_PASSWORD.encode())
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(10)
        allow = AclPermissionType.ALLOW
        # the cluster-level CREATE is not granted: Kafka then checks CREATE per topic, where the DENY applies
        bindings = [*(AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:console", "*",
                                 operation, allow) for operation in (AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS)),
                    AclBinding(ResourceType.TOPIC, "*", ResourcePatternType.LITERAL, "User:console", "*",
                               AclOperation.ALL, allow),
                    AclBinding(ResourceType.GROUP, "*", ResourcePatternType.LITERAL, "User:console", "*",
                               AclOperation.ALL, allow),
                    AclBinding(ResourceType.TOPIC, "forbidden-", ResourcePatternType.PREFIXED, "User:console", "*",
                               AclOperation.CREATE, AclPermissionType.DENY)]
        for future in admin.create_acls(bindings).values():
            future.result(10)
        yield broker


@pytest.fixture(scope="module")
def console(secured: BrokerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleProcess]:
    workdir = tmp_path_factory.mktemp("console")
    users = workdir / "console-users"
    users.write_text("# name role hash\n" + "".join(
        f"{name} {'admin' if name == 'root' else 'read-only'} {hash_password(pw, n=2**10)}\n"
        for name, pw in PASSWORDS.items()))
    settings = {
        "console.users.file": users, "console.lag.interval.ms": 500, "console.lag.window": 6,
        "console.refresh.ms": 700, "console.metrics.urls": f"http://127.0.0.1:{secured.properties['metrics.port']}/metrics",
        "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.username": "console", "kafka.sasl.password": CONSOLE_SCRAM_PASSWORD,
    }
    with ConsoleProcess(workdir, secured.bootstrap, settings).start() as process:
        yield process
    log = process.log_path.read_text()
    assert CONSOLE_SCRAM_PASSWORD not in log and PASSWORDS["root"] not in log, "a secret reached the log"


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


def login(driver: WebDriver, console: ConsoleProcess, user: str) -> None:
    login_as(driver, console, user, PASSWORDS[user])


@pytest.fixture(scope="module")
def admin(secured: BrokerProcess) -> AdminClient:
    return AdminClient(admin_config(secured.bootstrap))


def make_topic(admin: AdminClient, partitions: int = 2) -> str:
    name = unique_topic("con")
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)
    return name


def fill_group(bootstrap: str, topic: str, group: str, produced: int, consumed: int) -> None:
    """``produced`` records, then a group that consumes and commits ``consumed`` of them and leaves."""
    from confluent_kafka import Producer
    producer = Producer(admin_config(bootstrap))
    for i in range(produced):
        producer.produce(topic, key=f"k{i}".encode(), value=f'{{"n": {i}}}'.encode(), partition=0)
    producer.flush(10)
    consumer = Consumer({**admin_config(bootstrap), "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = 0
    while seen < consumed:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            seen += 1
    consumer.commit(offsets=[TopicPartition(topic, 0, consumed)], asynchronous=False)
    consumer.close()


# -- the tests --------------------------------------------------------------------------------------


def test_pages_need_a_login_and_a_wrong_password_is_refused(browser: WebDriver, console: ConsoleProcess,
                                                            shots: Path) -> None:
    browser.get(f"{console.url}/login")
    browser.delete_all_cookies()
    browser.get(f"{console.url}/topics")
    assert browser.current_url.startswith(f"{console.url}/login")
    screenshot(browser, shots, "login")
    fill(browser, "#user", "root")
    fill(browser, "#password", "not-the-password")
    click(browser, "#login")
    assert "wrong password" in flash(browser)
    login(browser, console, "root")
    assert "root (admin)" in text(browser, "#whoami")


def test_overview_shows_the_clusters_real_id_brokers_and_partitions(browser: WebDriver, console: ConsoleProcess,
                                                                    admin: AdminClient, shots: Path) -> None:
    login(browser, console, "root")
    make_topic(admin, 3)
    described = admin.describe_cluster().result(10)
    metadata = admin.list_topics(timeout=10)
    browser.get(console.url + "/")
    assert text(browser, "#cluster-id") == described.cluster_id
    assert text(browser, "#controller") == str(described.controller.id)
    rows = browser.find_elements(By.CSS_SELECTOR, "#brokers tbody tr")
    assert [r.text.split()[0] for r in rows] == [str(n.id) for n in described.nodes]
    want = sum(len(t.partitions) for t in metadata.topics.values())
    wait_until(lambda: int(text(browser, "#partition-count")) >= want, 5, message="partition count")
    assert text(browser, "#under-replicated") == "0" and text(browser, "#offline") == "0"
    assert browser.find_elements(By.CSS_SELECTOR, "#disks .bar"), "disk usage from the broker's metrics"
    from tidelog.observability.service import tidelog_version
    assert text(browser, "#versions").startswith(f"tidelog {tidelog_version()}")
    screenshot(browser, shots, "overview")


def test_create_search_configure_grow_and_delete_a_topic(browser: WebDriver, console: ConsoleProcess,
                                                         admin: AdminClient, shots: Path) -> None:
    login(browser, console, "root")
    name = unique_topic("made-in-browser")
    browser.get(console.url + "/topics")
    open_details(browser, "#create-topic")
    fill(browser, "#new-topic-name", name)
    fill(browser, "#new-topic-partitions", "2")
    fill(browser, "#new-topic-configs", "retention.ms=7200000")
    click(browser, "#create-topic-submit")
    assert f"topic {name} created" in flash(browser)
    assert len(admin.list_topics(name, timeout=10).topics[name].partitions) == 2
    rows = browser.find_elements(By.CSS_SELECTOR, "#partitions tbody tr")
    assert len(rows) == 2
    configs = {r.find_elements(By.TAG_NAME, "td")[0].text: r.text for r in browser.find_elements(By.CSS_SELECTOR, "#configs tbody tr")}
    assert "7200000" in configs["retention.ms"] and "DYNAMIC_TOPIC_CONFIG" in configs["retention.ms"]

    browser.get(console.url + "/topics?q=" + name[:20])
    assert [a.text for a in browser.find_elements(By.CSS_SELECTOR, "#topics tbody a")] == [name]
    assert text(browser, "#topics thead").split()[-2:] == ["size", "in"]  # from the broker's metrics endpoint
    screenshot(browser, shots, "topics")

    browser.get(f"{console.url}/topics/{name}")
    open_details(browser, "#edit-configs")
    fill(browser, "#config-set", "cleanup.policy=compact")
    click(browser, "#config-submit")
    assert "cleanup.policy=compact" in flash(browser)
    resource = ConfigResource(ResourceType.TOPIC, name)
    entries = next(iter(admin.describe_configs([resource]).values())).result(10)
    assert entries["cleanup.policy"].value == "compact"

    open_details(browser, "#add-partitions")
    fill(browser, "#partition-total", "4")
    click(browser, "#partitions-submit")
    assert "now has 4 partitions" in flash(browser)
    wait_until(lambda: len(admin.list_topics(name, timeout=10).topics[name].partitions) == 4, 5,
               message="4 partitions")
    screenshot(browser, shots, "topic")

    open_details(browser, "#delete-topic")
    fill(browser, "#delete-confirm", "not-the-name")
    click(browser, "#delete-submit")
    assert "type the topic's name" in flash(browser)
    assert name in admin.list_topics(timeout=10).topics
    open_details(browser, "#delete-topic")
    fill(browser, "#delete-confirm", name)
    click(browser, "#delete-submit")
    assert f"topic {name} deleted" in flash(browser)
    wait_until(lambda: name not in admin.list_topics(timeout=10).topics, 5, message="topic gone")


def test_the_brokers_refusal_is_shown_when_acls_say_no(browser: WebDriver, console: ConsoleProcess,
                                                       admin: AdminClient) -> None:
    login(browser, console, "root")
    name = unique_topic("forbidden")
    browser.get(console.url + "/topics")
    open_details(browser, "#create-topic")
    fill(browser, "#new-topic-name", name)
    click(browser, "#create-topic-submit")
    assert "TOPIC_AUTHORIZATION_FAILED" in flash(browser)
    assert name not in admin.list_topics(timeout=10).topics


def test_produce_then_browse_filter_and_format_messages(browser: WebDriver, console: ConsoleProcess,
                                                        admin: AdminClient, secured: BrokerProcess,
                                                        shots: Path) -> None:
    login(browser, console, "root")
    topic = make_topic(admin, 1)
    fill_group(secured.bootstrap, topic, unique_topic("g"), 12, 0)
    browser.get(f"{console.url}/topics/{topic}/messages")
    fill(browser, "#produce-key", "order-42")
    fill(browser, "#produce-value", '{"amount": 42, "currency": "EUR"}')
    fill(browser, "#produce-headers", "source=browser")
    click(browser, "#produce-submit")
    assert "produced to partition 0 at offset 12" in flash(browser)

    consumer = Consumer({**admin_config(secured.bootstrap), "group.id": unique_topic("check")})
    consumer.assign([TopicPartition(topic, 0, 12)])
    record = wait_until(lambda: consumer.poll(0.5), 10, message="the produced record")
    consumer.close()
    assert (record.key(), record.value(), record.headers()) == (
        b"order-42", b'{"amount": 42, "currency": "EUR"}', [("source", b"browser")])

    rows = browser.find_elements(By.CSS_SELECTOR, "#records tbody tr")  # shown from that offset
    assert rows[0].find_elements(By.TAG_NAME, "td")[0].text == "12"
    browser.get(f"{console.url}/topics/{topic}/messages?start=end&format=json")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#records tbody tr")) == 13
    values = [v.text for v in browser.find_elements(By.CSS_SELECTOR, "#records pre.value")]
    assert values[-1] == '{\n  "amount": 42,\n  "currency": "EUR"\n}'
    screenshot(browser, shots, "messages")

    browser.get(f"{console.url}/topics/{topic}/messages?start=offset&offset=0&key=k7")
    assert [r.find_elements(By.TAG_NAME, "td")[0].text for r in browser.find_elements(By.CSS_SELECTOR, "#records tbody tr")] == ["7"]
    browser.get(f"{console.url}/topics/{topic}/messages?start=offset&offset=0&header=source%3Dbrowser&format=hex")
    value = text(browser, "#records pre.value")
    assert value.startswith("7b 22 61 6d")  # '{"am' in hex
    browser.get(f"{console.url}/topics/{topic}/messages?start=offset&offset=0&contains=%22n%22%3A+3")
    assert "1 shown of 13 read" in text(browser, "#scan-summary")


def test_group_page_lag_matches_the_cluster_and_a_reset_is_dry_run_first(browser: WebDriver, console: ConsoleProcess,
                                                                         admin: AdminClient, secured: BrokerProcess,
                                                                         shots: Path) -> None:
    login(browser, console, "root")
    topic, group = make_topic(admin, 1), unique_topic("billing")
    fill_group(secured.bootstrap, topic, group, 30, 10)
    browser.get(f"{console.url}/groups/{group}")
    key = f"{topic}:0"
    assert text(browser, f'[data-k="committed:{key}"]') == "10"
    assert text(browser, f'[data-k="lag:{key}"]') == "20"
    # live: the status appears and the lag grows without a reload, once more records arrive
    marker = browser.execute_script("window.notReloaded = true; return 1")
    fill_group(secured.bootstrap, topic, unique_topic("other"), 5, 0)
    wait_until(lambda: text(browser, f'[data-k="lag:{key}"]') == "25", 10, interval=0.2, message="live lag")
    wait_until(lambda: text(browser, "#group-status") == "ERR", 10, interval=0.2, message="STOP found")
    assert browser.execute_script("return window.notReloaded") == marker
    wait_until(lambda: float(text(browser, f'[data-k="seconds:{key}"]')) > 0, 10, interval=0.2, message="lag in s")
    time.sleep(1.5)  # a few samples on the chart
    screenshot(browser, shots, "group")

    open_details(browser, "#reset")
    driver_select(browser, "#reset-target", "earliest")
    click(browser, "#reset-plan")
    assert "dry run" in flash(browser)
    plan = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#plan tbody tr")]
    assert plan == [f"{topic}-0 10 0 35"]
    committed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
    assert committed.topic_partitions[0].offset == 10, "a dry run writes nothing"
    screenshot(browser, shots, "reset-dry-run")
    click(browser, "#reset-execute")
    assert "reset to earliest" in flash(browser)
    committed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
    assert committed.topic_partitions[0].offset == 0

    browser.get(f"{console.url}/groups?q={group}")
    assert [a.text for a in browser.find_elements(By.CSS_SELECTOR, "#groups tbody a")] == [group]
    screenshot(browser, shots, "groups")


def driver_select(driver: WebDriver, css: str, value: str) -> None:
    from selenium.webdriver.support.select import Select
    Select(driver.find_element(By.CSS_SELECTOR, css)).select_by_visible_text(value)


def test_security_page_lists_acls_and_scram_users_and_hides_secrets(browser: WebDriver, console: ConsoleProcess,
                                                                    shots: Path) -> None:
    login(browser, console, "root")
    browser.get(console.url + "/security")
    acls = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#acls tbody tr")]
    assert "User:console * DENY CREATE TOPIC:forbidden- PREFIXED" in acls
    assert len(acls) == 5
    assert "console SCRAM_SHA_512 (4096 iterations)" in text(browser, "#scram-users")
    assert "sasl.password [hidden]" in text(browser, "#connection")
    assert CONSOLE_SCRAM_PASSWORD not in browser.page_source
    screenshot(browser, shots, "security")


def test_a_read_only_user_sees_no_forms_and_a_forged_post_is_refused(browser: WebDriver, console: ConsoleProcess,
                                                                     admin: AdminClient) -> None:
    login(browser, console, "viewer")
    browser.get(console.url + "/topics")
    assert not browser.find_elements(By.CSS_SELECTOR, "#create-topic")
    csrf = browser.find_element(By.CSS_SELECTOR, "header input[name=csrf]").get_attribute("value")
    cookies = {c["name"]: c["value"] for c in browser.get_cookies()}
    name = unique_topic("sneaky")
    forged = httpx.post(console.url + "/topics", data={"csrf": csrf, "name": name}, cookies=cookies)
    assert forged.status_code == 403 and "admin role" in forged.json()["error"]["message"]
    assert name not in admin.list_topics(timeout=10).topics


def test_every_form_needs_its_csrf_token(console: ConsoleProcess) -> None:
    with httpx.Client(base_url=console.url) as client:
        page = client.get("/login")
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
        assert csrf is not None
        refused = client.post("/login", data={"user": "root", "password": PASSWORDS["root"]})
        assert refused.status_code == 403
        ok = client.post("/login", data={"user": "root", "password": PASSWORDS["root"], "csrf": csrf.group(1)})
        assert ok.status_code == 303 and ok.headers["location"] == "/"
        assert client.post("/topics", data={"name": unique_topic("nocsrf")}).status_code == 403
        assert client.get("/api/overview").status_code == 200
    assert httpx.get(console.url + "/api/overview").status_code == 401  # no session


def test_platform_page_says_which_parts_are_not_used_when_none_is(browser: WebDriver, console: ConsoleProcess) -> None:
    login(browser, console, "root")
    browser.find_element(By.LINK_TEXT, "Platform").click()
    shown = text(browser, "main")
    assert "The governor is not used on this cluster" in shown
    assert "No mirror link writes to this cluster" in shown
    assert "The gateway is not used on this cluster" in shown
    assert "No gateway, mirror or governor endpoint is configured" in shown

"""The console's quotas page and its time charts, in Debian's headless Chromium against a real broker.

One secured broker for the module (SASL, ACLs on). The console connects as the SCRAM user
``console`` (so its quota requests go through ``console.wire``'s SCRAM exchange, after passing over
a bootstrap server listed first where nothing listens), allowed to describe
the cluster and its configs; ALTER_CONFIGS on the cluster is granted only in the middle of the form
test, so that the broker's refusal is seen first. Quotas are set and checked independently with the
``tidelog quotas`` CLI (its own connection code) as the super user ``admin``. Charts are sampled every
500 ms from the broker's metrics endpoint.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
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
from helpers.cli_runner import run_cli
from helpers.clients import FAST_CLIENT, unique_topic
from helpers.console_browser import (
    chromium_driver,
    click,
    click_element,
    fill,
    flash,
    login,
    open_details,
    screenshot,
    text,
)
from helpers.console_process import ConsoleProcess
from tidelog.console.auth import hash_password

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
CONSOLE_SCRAM_PASSWORD = "console-scram-secret"
PASSWORDS = {"root": "root-pass-123", "viewer": "viewer-pass-456"}
ADMIN_SASL = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "admin",
              "sasl.password": "admin-secret"}


def cluster_acl(operation: AclOperation) -> AclBinding:
    return AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:console", "*",
                      operation, AclPermissionType.ALLOW)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[BrokerProcess]:
    register_failure_report(pytestconfig)
    workdir = tmp_path_factory.mktemp("quota-broker")
    (workdir / "users").write_text("admin = admin-secret\n")
    process = BrokerProcess(workdir, {
        "authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:admin",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512", "sasl.plain.users.file": workdir / "users",
        "offsets.topic.num.partitions": 1, "metrics.port": free_port(), "metrics.host": "127.0.0.1",
    })
    process.properties["listeners"] = f"SASL_PLAINTEXT://127.0.0.1:{process.port}"
    process.properties["listener.security.protocol.map"] = "SASL_PLAINTEXT:SASL_PLAINTEXT"
    with process:
        admin = AdminClient({"bootstrap.servers": process.bootstrap, **FAST_CLIENT, **ADMIN_SASL})
        upsert = UserScramCredentialUpsertion("console", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                              CONSOLE_SCRAM_PASSWORD.encode())
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(10)
        bindings = [cluster_acl(AclOperation.DESCRIBE), cluster_acl(AclOperation.DESCRIBE_CONFIGS),
                    AclBinding(ResourceType.TOPIC, "*", ResourcePatternType.LITERAL, "User:console", "*",
                               AclOperation.ALL, AclPermissionType.ALLOW)]
        for future in admin.create_acls(bindings).values():
            future.result(10)
        yield process


@pytest.fixture(scope="module")
def console(broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleProcess]:
    workdir = tmp_path_factory.mktemp("quota-console")
    users = workdir / "console-users"
    users.write_text("".join(f"{name} {'admin' if name == 'root' else 'read-only'} {hash_password(pw, n=2**10)}\n"
                             for name, pw in PASSWORDS.items()))
    settings = {
        "console.users.file": users, "console.lag.interval.ms": 1000, "console.refresh.ms": 500,
        "console.chart.interval.ms": 500,
        "console.metrics.urls": f"http://127.0.0.1:{broker.properties['metrics.port']}/metrics",
        "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.username": "console", "kafka.sasl.password": CONSOLE_SCRAM_PASSWORD,
    }
    dead = f"127.0.0.1:{free_port()}"  # listed first: the quota requests must pass over it to the broker
    with ConsoleProcess(workdir, f"{dead},{broker.bootstrap}", settings).start() as process:
        yield process
    assert CONSOLE_SCRAM_PASSWORD not in process.log_path.read_text(), "a secret reached the log"


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


def cli(capsys: pytest.CaptureFixture[str], broker: BrokerProcess, *argv: str) -> Any:
    """``tidelog quotas ARGV`` as the super user; its JSON output when asked for, else its text."""
    connection = ["--bootstrap-server", broker.bootstrap, *(x for k, v in ADMIN_SASL.items() for x in ("-X", f"{k}={v}"))]
    run = run_cli(capsys, "quotas", *argv, *connection)
    assert run.code == 0, run.err
    return run.json() if "--json" in argv else run.out


def quotas_of(capsys: pytest.CaptureFixture[str], broker: BrokerProcess, user: str) -> dict[str, float]:
    rows = cli(capsys, broker, "describe", "--user", user, "--json")
    return rows[0]["values"] if rows else {}


def rows(driver: WebDriver) -> list[str]:
    """The quota table's rows as text, without the delete buttons' crosses."""
    return [" ".join(str(r.text).replace("\u00d7", "").split())
            for r in driver.find_elements(By.CSS_SELECTOR, "#quotas tbody tr")]


def row_of(driver: WebDriver, user: str) -> str:
    return next((r for r in rows(driver) if r.split()[0] == user), "")


def test_the_quotas_page_lists_entities_keys_and_tiers_as_the_cluster_has_them(
        browser: WebDriver, console: ConsoleProcess, broker: BrokerProcess, capsys: pytest.CaptureFixture[str],
        shots: Path) -> None:
    cli(capsys, broker, "alter", "--user", "alice", "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152")
    cli(capsys, broker, "alter", "--user", "alice", "--client-default", "--add-config", "request_percentage=50")
    cli(capsys, broker, "alter", "--user", "batch", "--add-config", "tidelog.tier=2")
    cli(capsys, broker, "alter", "--ip", "10.0.0.7", "--add-config", "connection_creation_rate=20")
    cli(capsys, broker, "tier", "throttle", "low", "--rate", "1048576")
    login(browser, console, "root", PASSWORDS["root"])
    browser.get(console.url + "/quotas")
    shown = rows(browser)
    assert len(shown) == 4, shown
    assert "alice consumer_byte_rate = 2097152 producer_byte_rate = 1048576 not set" in shown
    assert "alice <default> request_percentage = 50 not set" in shown
    assert "10.0.0.7 connection_creation_rate = 20 not set" in shown
    assert "batch low" in shown
    assert text(browser, "#tier-default") == "medium"
    rules = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#tier-rules tbody tr")]
    assert rules == ["medium free", "low throttled 1.0 MiB/s"]
    fill(browser, "#quota-search", "batch")
    click(browser, ".search button")
    assert rows(browser) == ["batch low"]
    browser.get(console.url + "/quotas")
    screenshot(browser, shots, "quotas")


def test_an_admin_sets_and_deletes_quotas_and_sees_the_brokers_refusals(
        browser: WebDriver, console: ConsoleProcess, broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    user = unique_topic("carol")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **FAST_CLIENT, **ADMIN_SASL})
    grant = cluster_acl(AclOperation.ALTER_CONFIGS)
    leftover = AclBindingFilter(grant.restype, grant.name, grant.resource_pattern_type, grant.principal, grant.host,
                                grant.operation, grant.permission_type)
    for future in admin.delete_acls([leftover]).values():  # a rerun starts where a first attempt did
        future.result(10)
    login(browser, console, "root", PASSWORDS["root"])

    def set_quota(key: str, value: str) -> str:
        browser.get(console.url + "/quotas")
        open_details(browser, "#set-quota")
        fill(browser, "#quota-user", user)
        browser.find_element(By.CSS_SELECTOR, f"#quota-key option[value='{key}']").click()
        fill(browser, "#quota-value", value)
        click(browser, "#set-quota-submit")
        return flash(browser)

    refused = set_quota("producer_byte_rate", "2048")  # the console may not ALTER_CONFIGS yet
    assert refused == "quota not set: CLUSTER_AUTHORIZATION_FAILED: Cluster authorization failed.", refused
    assert quotas_of(capsys, broker, user) == {}
    for future in admin.create_acls([grant]).values():
        future.result(10)

    assert set_quota("producer_byte_rate", "2048") == f"quota set: user={user} producer_byte_rate=2048"
    assert set_quota("tidelog.tier", "low") == f"quota set: user={user} tidelog.tier=2"
    assert quotas_of(capsys, broker, user) == {"producer_byte_rate": 2048.0, "tidelog.tier": 2.0}
    assert row_of(browser, user) == f"{user} producer_byte_rate = 2048 low"
    assert set_quota("producer_byte_rate", "-5") == "quota not set: INVALID_REQUEST: Quota producer_byte_rate must be greater than 0"
    assert set_quota("producer_byte_rate", "lots") == "quota not set: producer_byte_rate: 'lots' is not a number"

    row = next(r for r in browser.find_elements(By.CSS_SELECTOR, "#quotas tbody tr")
               if r.find_element(By.TAG_NAME, "td").text == user)
    click_element(browser, row.find_element(By.CSS_SELECTOR, "button[data-delete='producer_byte_rate']"))
    assert flash(browser) == f"quota deleted: user={user} producer_byte_rate"
    assert quotas_of(capsys, broker, user) == {"tidelog.tier": 2.0}


def test_a_read_only_user_sees_no_quota_form_and_a_forged_post_is_refused(
        browser: WebDriver, console: ConsoleProcess, broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    cli(capsys, broker, "alter", "--user", "dave", "--add-config", "consumer_byte_rate=4096")
    login(browser, console, "viewer", PASSWORDS["viewer"])
    browser.get(console.url + "/quotas")
    assert row_of(browser, "dave") == "dave consumer_byte_rate = 4096 not set"
    assert not browser.find_elements(By.CSS_SELECTOR, "#set-quota")
    assert not browser.find_elements(By.CSS_SELECTOR, "#quotas button")
    csrf = browser.find_element(By.CSS_SELECTOR, "header input[name=csrf]").get_attribute("value")
    cookies = {c["name"]: c["value"] for c in browser.get_cookies()}
    forged = [httpx.post(console.url + "/quotas", cookies=cookies,
                         data={"csrf": csrf, "user": "dave", "key": "consumer_byte_rate", "value": "1"}),
              httpx.post(console.url + "/quotas/delete", cookies=cookies,
                         data={"csrf": csrf, "entity": '[["user", "dave"]]', "key": "consumer_byte_rate"})]
    assert [f.status_code for f in forged] == [403, 403]
    assert "admin role" in forged[0].json()["error"]["message"]
    no_token = httpx.post(console.url + "/quotas/delete", cookies=cookies,
                          data={"entity": '[["user", "dave"]]', "key": "consumer_byte_rate"})
    assert no_token.status_code == 403
    assert quotas_of(capsys, broker, "dave") == {"consumer_byte_rate": 4096.0}


def svg_text(driver: WebDriver, css: str, attribute: str = "") -> str:
    """An attribute (or the text) of a chart's element, read in one step: the page redraws its charts
    at every refresh, so an element found first and read after may be gone."""
    return str(driver.execute_script(
        "const el = document.querySelector(arguments[0]);"
        "return el ? (arguments[1] ? el.getAttribute(arguments[1]) : el.textContent) : '';", css, attribute) or "")


def path_heights(d: str, baseline: float = 138.0) -> list[float]:
    """How far above the chart's zero line each point of an SVG path is."""
    return [baseline - float(y) for y in re.findall(r"[ML][\d.]+ ([\d.]+)", d)]


def test_throughput_and_disk_charts_draw_points_after_traffic(
        browser: WebDriver, console: ConsoleProcess, broker: BrokerProcess, shots: Path) -> None:
    config = {"bootstrap.servers": broker.bootstrap, **FAST_CLIENT, **ADMIN_SASL}
    topic = unique_topic("chart")
    admin = AdminClient(config)  # must outlive its future
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    login(browser, console, "root", PASSWORDS["root"])
    browser.get(console.url + "/")
    stop = threading.Event()

    def traffic() -> None:
        producer = Producer({**config, "linger.ms": 5})
        consumer = Consumer({**config, "group.id": topic, "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        while not stop.is_set():
            for _ in range(50):
                producer.produce(topic, b"x" * 2000)
            producer.flush(5)
            consumer.consume(100, 0.1)
        consumer.close()

    worker = threading.Thread(target=traffic, daemon=True)
    worker.start()
    try:
        def drawn(chart: str) -> list[float]:
            return path_heights(svg_text(browser, f"#chart-{chart} path.series", "d"))

        wait_until(lambda: sum(h > 1 for h in drawn("bytes-in")) >= 2, 20, message="bytes in drawn above zero")
        wait_until(lambda: sum(h > 1 for h in drawn("bytes-out")) >= 2, 20, message="bytes out drawn above zero")
    finally:
        stop.set()
        worker.join(10)
    disk, log_size = drawn("disk"), drawn("log-size")
    assert len(disk) >= 2 and max(disk) > 1, disk
    assert max(log_size) > 1 and log_size[-1] >= log_size[0], log_size  # the topic's records now on disk
    legend = svg_text(browser, "#chart-bytes-in text.legend")
    assert legend.startswith(f"127.0.0.1:{broker.properties['metrics.port']}: ")
    with httpx.Client(base_url=console.url, cookies={c["name"]: c["value"] for c in browser.get_cookies()}) as client:
        charts = client.get("/api/overview").json()["charts"]
    assert charts["bytes_in"]["top"] > 0 and max(len(line["d"]) for line in charts["disk"]["lines"]) > 0
    screenshot(browser, shots, "overview-charts")

"""The console's quotas page against the reference Apache Kafka of the compat tier.

DescribeClientQuotas and AlterClientQuotas are Kafka's own requests, so the page lists and changes
Kafka's quotas as it does tidelog's. Kafka has no tiers: the tier column and the tier rules are
absent, and setting ``tidelog.tier`` is refused with Kafka's own error, shown as it comes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from compat_harness.kafka import ReferenceKafka

from helpers.clients import unique_topic
from helpers.console_process import ConsoleProcess


@pytest.fixture(scope="module")
def console(reference_kafka: ReferenceKafka, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleProcess]:
    with ConsoleProcess(tmp_path_factory.mktemp("console-kafka"), reference_kafka.bootstrap,
                        {"console.lag.interval.ms": 1000}).start(timeout=60) as process:
        yield process


def post(client: httpx.Client, path: str, data: dict[str, str]) -> str:
    """POST a form with the page's CSRF token; the flash message the redirect shows."""
    page = client.get("/quotas")
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
    assert csrf is not None
    answer = client.post(path, data={**data, "csrf": csrf.group(1)})
    assert answer.status_code == 303, answer.text
    flashed = re.search(r'id="flash">([^<]*)<', client.get(answer.headers["location"]).text)
    assert flashed is not None
    return flashed.group(1).replace("&#39;", "'").replace("&lt;", "<").replace("&gt;", ">")


def test_console_on_kafka_lists_sets_and_deletes_quotas_and_shows_no_tiers(console: ConsoleProcess) -> None:
    user = unique_topic("kq")
    with httpx.Client(base_url=console.url, timeout=30) as client:
        assert post(client, "/quotas", {"user": user, "client-id": "<default>", "key": "consumer_byte_rate",
                                        "value": "4096"}) == f"quota set: user={user}, client-id=<default> consumer_byte_rate=4096"
        page = client.get("/quotas", params={"q": user}).text
        assert "<code>consumer_byte_rate</code> = <b>4096</b>" in page
        assert "<th>tier</th>" not in page and 'id="tier-rules"' not in page
        refused = post(client, "/quotas", {"user": user, "key": "tidelog.tier", "value": "low"})
        assert refused.startswith("quota not set: INVALID_REQUEST: Invalid configuration key tidelog.tier"), refused
        entity = f'[["user", "{user}"], ["client-id", null]]'
        assert post(client, "/quotas/delete", {"entity": entity, "key": "consumer_byte_rate"}) == \
            f"quota deleted: user={user}, client-id=<default> consumer_byte_rate"
        assert "no client quota" in client.get("/quotas", params={"q": user}).text

"""The legacy staged write API (/store, /commit_request, /commit) against a tidelog broker subprocess and
a real ``tidelog gateway`` process: what read_committed readers see at each step, expiry of an
abandoned transaction, and kill -9 of the gateway between the steps (nothing acknowledged lost, the
client told what to redo, no duplicates after the redo).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import KafkaError, TopicPartition

from helpers.broker_process import BrokerProcess, module_broker
from helpers.clients import consumer, create_topic, unique_topic
from helpers.gateway_process import GATEWAY_TEST_BROKER, GatewayProcess, write_json
from tidelog.gateway.staged_spool import encode_frame

staged_broker = module_broker("staged_broker", GATEWAY_TEST_BROKER)


def start_gateway(workdir: Path, bootstrap: str, timeout_ms: int) -> GatewayProcess:
    return GatewayProcess(workdir, bootstrap, {"gateway.staged.dir": workdir / "staged",
                                               "gateway.staged.timeout.ms": timeout_ms}).start()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, staged_broker: BrokerProcess) -> Iterator[GatewayProcess]:
    """One gateway for the module (the crash tests kill and restart it: same port, spool and instance)."""
    process = start_gateway(tmp_path_factory.mktemp("staged"), staged_broker.bootstrap, 120_000)
    try:
        yield process
    finally:
        process.close()


@pytest.fixture
def topic(staged_broker: BrokerProcess) -> str:
    return create_topic(staged_broker.bootstrap, unique_topic("staged"))


def read(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[tuple[int, bytes]]:
    """(offset, value) of every record visible at ``isolation``, read to the end of partition 0."""
    cons = consumer(bootstrap, {"isolation.level": isolation, "enable.partition.eof": True})
    cons.assign([TopicPartition(topic, 0, 0)])
    out = []
    try:
        while True:
            message = cons.poll(10)
            assert message is not None, f"no end of partition reached in {topic}"
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                return out
            out.append((message.offset(), message.value()))
    finally:
        cons.close()


def values(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[bytes]:
    return [value for _, value in read(bootstrap, topic, isolation)]


def visible_eventually(bootstrap: str, topic: str, expected: list[bytes], timeout: float = 15.0) -> list[bytes]:
    """What read_committed readers see once it is ``expected`` (or at the deadline): the commit markers
    may land just after the commit is answered."""
    deadline = time.monotonic() + timeout
    seen = values(bootstrap, topic)
    while seen != expected and time.monotonic() < deadline:
        time.sleep(0.2)
        seen = values(bootstrap, topic)
    return seen


def store(gateway: GatewayProcess, topic: str, seqno: int, lines: list[str], txn: str | None = None) -> httpx.Response:
    params: dict[str, Any] = {"topic": topic, "seqno": seqno, **({"transactionId": txn} if txn else {})}
    return httpx.post(f"{gateway.url}/v1/staged/store", params=params, content="".join(f"{x}\n" for x in lines),
                      timeout=30)


def step(gateway: GatewayProcess, name: str, txn: str) -> httpx.Response:
    method = "GET" if name == "status" else "POST"
    return httpx.request(method, f"{gateway.url}/v1/staged/{name}", params={"transactionId": txn}, timeout=60)


def test_readers_see_nothing_before_commit_and_everything_once_after(gateway: GatewayProcess, topic: str,
                                                                      staged_broker: BrokerProcess) -> None:
    bootstrap = staged_broker.bootstrap
    first = store(gateway, topic, 1, ["a", "b"])
    assert first.status_code == 200, first.text
    txn = first.json()["transactionId"]
    assert first.json()["chunk"] == {"seqno": 1, "status": "stored", "records": 2}
    json_chunk = httpx.post(f"{gateway.url}/v1/staged/store", params={"topic": topic, "seqno": 2, "transactionId": txn},
                            json={"records": [{"value": "c", "key": "k"}], "meta": {"host": "web-1"}})
    assert json_chunk.json()["chunk"]["status"] == "stored", json_chunk.text
    repeated = store(gateway, topic, 2, ["c"], txn)
    assert repeated.json()["chunk"] == {"seqno": 2, "status": "duplicate"}
    assert values(bootstrap, topic) == []

    premature = step(gateway, "commit", txn)
    assert premature.status_code == 409
    assert premature.json()["error"]["redo"] == "commit_request"

    requested = step(gateway, "commit_request", txn)
    assert requested.status_code == 200, requested.text
    assert requested.json()["state"] == "requested"
    assert values(bootstrap, topic, "read_uncommitted") == [b"a", b"b", b"c"]  # in the cluster...
    assert values(bootstrap, topic) == []  # ...and invisible to read_committed readers
    assert step(gateway, "commit_request", txn).json() == requested.json()  # a repeat is harmless
    late_store = store(gateway, topic, 3, ["d"], txn)
    assert late_store.status_code == 409 and late_store.json()["error"]["redo"] == "commit"

    committed = step(gateway, "commit", txn)
    assert committed.status_code == 200, committed.text
    assert committed.json()["state"] == "committed"
    assert visible_eventually(bootstrap, topic, [b"a", b"b", b"c"]) == [b"a", b"b", b"c"]
    assert step(gateway, "commit", txn).json() == committed.json()  # the same outcome, nothing written again
    assert values(bootstrap, topic) == [b"a", b"b", b"c"]
    assert not list((gateway.workdir / "staged").glob(f"{txn}.spool"))


def test_kill9_between_store_and_commit_request_loses_no_acknowledged_chunk(gateway: GatewayProcess, topic: str,
                                                                            staged_broker: BrokerProcess) -> None:
    txn = "crash-before-request"
    assert store(gateway, topic, 1, ["one", "two"], txn).status_code == 200
    assert store(gateway, topic, 2, ["three"], txn).status_code == 200
    gateway.restart()

    status = step(gateway, "status", txn).json()
    assert (status["state"], status["chunks"], status["lastSeqno"]) == ("stored", 2, 2)
    assert store(gateway, topic, 2, ["three"], txn).json()["chunk"]["status"] == "duplicate"  # unsure client resends
    assert store(gateway, topic, 3, ["four"], txn).json()["chunk"]["status"] == "stored"
    assert step(gateway, "commit_request", txn).status_code == 200
    assert step(gateway, "commit", txn).status_code == 200
    expected = [b"one", b"two", b"three", b"four"]
    assert visible_eventually(staged_broker.bootstrap, topic, expected) == expected


def test_kill9_between_commit_request_and_commit_says_redo_commit_request_and_writes_once(
        gateway: GatewayProcess, topic: str, staged_broker: BrokerProcess) -> None:
    bootstrap = staged_broker.bootstrap
    txn = "crash-before-commit"
    assert store(gateway, topic, 1, ["x", "y"], txn).status_code == 200
    assert step(gateway, "commit_request", txn).status_code == 200
    gateway.restart()

    refused = step(gateway, "commit", txn)
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert (error["code"], error["redo"], error["state"]) == ("INVALID_TXN_STATE", "commit_request", "stored")
    assert "restarted" in error["message"]
    assert step(gateway, "status", txn).json()["redo"] == "commit_request"
    assert values(bootstrap, topic) == []  # the fenced transaction was aborted, not committed

    assert step(gateway, "commit_request", txn).status_code == 200
    committed = step(gateway, "commit", txn)
    assert committed.status_code == 200, committed.text
    # Visible at all only if the fenced transaction was aborted (an open one holds the stable offset).
    assert visible_eventually(bootstrap, topic, [b"x", b"y"]) == [b"x", b"y"]
    assert values(bootstrap, topic, "read_uncommitted") == [b"x", b"y", b"x", b"y"]  # the aborted copy stays hidden


def test_kill9_during_commit_is_settled_by_reading_back_whether_the_commit_landed(
        gateway: GatewayProcess, staged_broker: BrokerProcess) -> None:
    """A crash after the spool's ``committing`` frame: for ``landed`` the commit reached the cluster
    (its outcome file was lost), for ``never_sent`` it did not. The restart must tell them apart."""
    bootstrap = staged_broker.bootstrap
    spool = gateway.workdir / "staged"
    topics = {}
    for txn in ("landed", "never-sent"):
        topics[txn] = create_topic(bootstrap, unique_topic("staged"))
        assert store(gateway, topics[txn], 1, [f"{txn}-1", f"{txn}-2"], txn).status_code == 200
        assert step(gateway, "commit_request", txn).status_code == 200
    landed_spool = (spool / "landed.spool").read_bytes()
    committed = step(gateway, "commit", "landed")
    assert committed.status_code == 200
    gateway.kill9()
    # As if killed between sending the commit and recording its outcome, or just before sending it.
    (spool / "landed.done").unlink()
    (spool / "landed.spool").write_bytes(landed_spool + encode_frame({"type": "committing"}))
    with (spool / "never-sent.spool").open("ab") as handle:
        handle.write(encode_frame({"type": "committing"}))
    gateway.start()

    again = step(gateway, "commit", "landed")
    assert again.status_code == 200, again.text
    assert (again.json()["firstOffset"], again.json()["lastOffset"]) == (committed.json()["firstOffset"],
                                                                         committed.json()["lastOffset"])
    assert visible_eventually(bootstrap, topics["landed"], [b"landed-1", b"landed-2"]) == [b"landed-1", b"landed-2"]
    refused = step(gateway, "commit", "never-sent")
    assert refused.status_code == 409 and refused.json()["error"]["redo"] == "commit_request", refused.text
    assert values(bootstrap, topics["never-sent"]) == []
    assert step(gateway, "commit_request", "never-sent").status_code == 200
    assert step(gateway, "commit", "never-sent").status_code == 200
    expected = [b"never-sent-1", b"never-sent-2"]
    assert visible_eventually(bootstrap, topics["never-sent"], expected) == expected


def test_abandoned_transactions_expire_with_nothing_visible_and_spool_removed(
        tmp_path: Path, topic: str, staged_broker: BrokerProcess) -> None:
    bootstrap = staged_broker.bootstrap
    gateway = start_gateway(tmp_path, bootstrap, 4_000)
    try:
        requested = store(gateway, topic, 1, ["never", "seen"]).json()["transactionId"]
        stored_only = store(gateway, topic, 1, ["not", "either"]).json()["transactionId"]
        assert step(gateway, "commit_request", requested).status_code == 200
        spool = tmp_path / "staged"
        assert {p.stem for p in spool.glob("*.spool")} == {requested, stored_only}

        deadline = time.monotonic() + 15
        while list(spool.glob("*.spool")) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not list(spool.glob("*.spool"))
        for txn in (requested, stored_only):
            gone = step(gateway, "commit", txn)
            assert gone.status_code == 410, gone.text
            assert gone.json()["error"]["redo"] == "store"
        assert values(bootstrap, topic, "read_uncommitted") == [b"never", b"seen"]
        # A later write to the same partition becomes visible: the expired one was aborted (an
        # open one would hold the last stable offset before it), and stays invisible.
        assert write_json(gateway.url, topic, "later", [(1, ["after"])]).status_code == 200
        assert visible_eventually(bootstrap, topic, [b"after"]) == [b"after"]
    finally:
        gateway.close()

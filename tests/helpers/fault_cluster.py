"""A cluster whose links can be cut: three brokers on a 3-member etcd, every path through a relay.

Built on :class:`helpers.cluster.Cluster` (same broker settings, same metadata helpers), with:

- etcd: three members (``EtcdCluster``); each broker names all three in ``metadata.store``, each
  through a relay of its own (``SilentLink``), so one broker can be cut off from etcd
  (``cut_from_etcd``) while the others keep their sessions, and a member can die under everyone.
- Replication: each broker has a second listener, ``REPLICATION``, named in
  ``inter.broker.listener.name`` and advertised at a :class:`helpers.links.ReplicationLink`, so the
  replica fetches between two brokers can be cut in both directions (``cut_between``) while clients
  (on ``PLAINTEXT``) and etcd still reach both.

``settle`` waits until every broker runs and is registered and every partition of a topic has a
leader and its full replica set in the ISR: the state every fault scenario must come back to.
"""

from __future__ import annotations

import base64
import json
import signal
import time
import urllib.request
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from confluent_kafka.admin import AdminClient

from helpers.broker_process import BrokerProcess, free_port
from helpers.checker import QUIET
from helpers.cluster import Cluster
from helpers.etcd_process import HOST, EtcdCluster, SilentLink
from helpers.links import ReplicationLink


class FaultCluster(Cluster):
    def __init__(self, workdir: Path, size: int = 3, overrides: Mapping[str, object] | None = None) -> None:
        super().__init__(workdir, size, overrides)
        self.etcd_members = EtcdCluster(self.workdir / "etcd-cluster", 3)
        self.etcd_links: dict[int, list[SilentLink]] = {}
        self.replication_links: dict[int, ReplicationLink] = {}

    def start(self, timeout: float = 60.0) -> FaultCluster:
        self.etcd_members.start()
        for node in range(1, self.size + 1):
            links = [SilentLink(HOST, member.client_port) for member in self.etcd_members.members]
            self.etcd_links[node] = links
            store = "etcd://" + ",".join(link.endpoint for link in links) + "/tidelog"
            broker = BrokerProcess(self.workdir / f"broker-{node}", {
                "node.id": node, "broker.rack": f"r{node}", "metadata.store": store, **self.overrides,
            })
            replication_port = free_port(HOST)
            link = ReplicationLink(replication_port)
            self.replication_links[node] = link
            broker.properties.update({
                "listeners": f"PLAINTEXT://{HOST}:{broker.port},REPLICATION://{HOST}:{replication_port}",
                "advertised.listeners": f"PLAINTEXT://{HOST}:{broker.port},REPLICATION://{HOST}:{link.port}",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,REPLICATION:PLAINTEXT",
                "inter.broker.listener.name": "REPLICATION",
            })
            self.brokers[node] = broker
        with ThreadPoolExecutor(len(self.brokers)) as pool:
            list(pool.map(lambda b: b.start(timeout), self.brokers.values()))
        self.wait_for_brokers(set(self.brokers), timeout)
        return self

    @property
    def all_bootstrap(self) -> str:
        """Every broker's client address, running or not (clients given this ride out restarts)."""
        return ",".join(b.bootstrap for b in self.brokers.values())

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.all_bootstrap, **QUIET})

    # -- faults -------------------------------------------------------------------------------------

    def cut_from_etcd(self, node: int) -> None:
        for link in self.etcd_links[node]:
            link.cut()

    def heal_etcd(self, node: int) -> None:
        for link in self.etcd_links[node]:
            link.heal()

    def cut_between(self, a: int, b: int) -> None:
        """Replica fetches between brokers ``a`` and ``b`` stop, both ways (a network partition)."""
        self.replication_links[a].cut(b)
        self.replication_links[b].cut(a)

    def heal_between(self, a: int, b: int) -> None:
        self.replication_links[a].heal(b)
        self.replication_links[b].heal(a)

    def restart_etcd(self, down_s: float = 0.0, sig: int = signal.SIGKILL) -> None:
        """Every etcd member stopped (SIGKILL by default), ``down_s`` seconds of no etcd, all started."""
        for member in self.etcd_members.members:
            member.stop(sig)
        time.sleep(down_s)
        self.etcd_members.start()

    # -- reading the cluster ------------------------------------------------------------------------

    def controller(self) -> int:
        return int(self.admin().list_topics(timeout=5).controller_id)

    def stored_partition(self, topic: str, index: int) -> dict[str, object] | None:
        """The partition's state as etcd holds it now (the controller's decision itself, before any
        broker applies it), read through etcd's JSON gateway of a running member."""
        key = base64.b64encode(f"/tidelog/partitions/{topic}/{index}".encode()).decode()
        for member in self.etcd_members.members:
            if not member.is_running():
                continue
            request = urllib.request.Request(f"{member.client_url}/v3/kv/range", json.dumps({"key": key}).encode())
            try:
                with urllib.request.urlopen(request, timeout=1.0) as response:
                    kvs = json.loads(response.read()).get("kvs", [])
            except OSError:
                continue
            return json.loads(base64.b64decode(kvs[0]["value"])) if kvs else None
        return None

    def settle(self, topic: str, partitions: int, timeout: float = 60.0) -> None:
        """Every broker up and registered, every partition led with its whole replica set in sync."""
        deadline = time.monotonic() + timeout
        assert all(b.is_running() for b in self.brokers.values()), "a broker is not running"
        self.wait_for_brokers(set(self.brokers), timeout)
        state: object = None
        while time.monotonic() < deadline:
            try:
                md = self.admin().list_topics(topic, timeout=5).topics[topic]
                state = {p: (m.leader, sorted(m.replicas), sorted(m.isrs)) for p, m in md.partitions.items()}
                if len(md.partitions) == partitions and all(
                        m.leader >= 0 and sorted(m.isrs) == sorted(m.replicas) for m in md.partitions.values()):
                    return
            except Exception as exc:  # a metadata request that timed out: ask again
                state = exc
            time.sleep(0.2)
        raise AssertionError(f"{topic} did not settle within {timeout} s: {state}")

    def healthy(self) -> bool:
        """Nothing left broken by a previous scenario: every process up, every link carrying bytes."""
        if not all(b.is_running() for b in self.brokers.values()):
            return False
        if not all(m.is_running() for m in self.etcd_members.members):
            return False
        if any(link.cut_peers for link in self.replication_links.values()):
            return False
        if any(not link._flowing.is_set() for links in self.etcd_links.values() for link in links):
            return False
        try:
            self.wait_for_brokers(set(self.brokers), timeout=10)
        except AssertionError:
            return False
        return True

    def close(self) -> None:
        super().close()
        self.etcd_members.close()
        for links in self.etcd_links.values():
            for link in links:
                link.close()
        for replication in self.replication_links.values():
            replication.close()

"""Client quotas in the cluster image: kept by the local file and by etcd's keys, refused when corrupt."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tidelog.common.errors import ConfigError
from tidelog.metadata import codec
from tidelog.metadata.etcd_layout import CLIENT_QUOTAS, KeyTable, plan_commit
from tidelog.metadata.image import ClusterImage
from tidelog.metadata.local_store import FILE_NAME, LocalMetadataStore

QUOTAS = {
    (("user", "alice"),): {"producer_byte_rate": 1048576.0},
    (("client-id", None), ("user", None)): {"consumer_byte_rate": 2048.0, "request_percentage": 50.0},
    (("ip", "10.0.0.1"),): {"connection_creation_rate": 5.0},
}


def test_quotas_survive_a_restart_of_the_local_store(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path, "cluster")
    asyncio.run(store.commit(store.image.with_client_quotas(QUOTAS)))
    again = LocalMetadataStore(tmp_path, "cluster")
    assert {e: dict(v) for e, v in again.image.client_quotas.items()} == QUOTAS


def test_an_entity_left_without_values_is_dropped() -> None:
    image = ClusterImage("c").with_client_quotas({**QUOTAS, (("user", "bob"),): {}})
    assert (("user", "bob"),) not in image.client_quotas


def test_a_file_written_before_quotas_loads_with_none(tmp_path: Path) -> None:
    LocalMetadataStore(tmp_path, "cluster")
    doc = json.loads((tmp_path / FILE_NAME).read_text())
    del doc["client_quotas"]
    (tmp_path / FILE_NAME).write_text(json.dumps(doc))
    assert not LocalMetadataStore(tmp_path, "cluster").image.client_quotas


@pytest.mark.parametrize("bad", [
    [{"entity": [], "values": {}}],
    [{"entity": [{"type": "user", "name": 3}], "values": {}}],
    [{"entity": [{"type": "user", "name": "a"}], "values": {"producer_byte_rate": "fast"}}],
    [{"entity": [{"type": "user", "name": "a"}], "values": {"producer_byte_rate": True}}],
])
def test_a_corrupt_quota_is_named_not_guessed(tmp_path: Path, bad: object) -> None:
    LocalMetadataStore(tmp_path, "cluster")
    doc = json.loads((tmp_path / FILE_NAME).read_text())
    doc["client_quotas"] = bad
    (tmp_path / FILE_NAME).write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match=r"corrupt metadata file: (quota|entity)"):
        LocalMetadataStore(tmp_path, "cluster")


def test_etcd_keeps_quotas_under_one_key_written_only_when_they_change() -> None:
    base = ClusterImage("c")
    new = base.with_client_quotas(QUOTAS)
    plan = plan_commit(base, new)
    assert list(plan.puts) == [CLIENT_QUOTAS]
    assert plan_commit(new, new.with_client_quotas(QUOTAS)).empty
    table = KeyTable()
    assert table.put(CLIENT_QUOTAS, plan.puts[CLIENT_QUOTAS], 2, 2) is None
    image = table.image(base, 2)
    assert {e: dict(v) for e, v in image.client_quotas.items()} == QUOTAS
    assert table.put(CLIENT_QUOTAS, codec.encode([{"entity": "x"}]), 3, 2) is not None
    assert table.image(image, 3).client_quotas == image.client_quotas  # the last good value stays

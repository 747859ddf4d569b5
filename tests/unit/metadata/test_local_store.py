"""The single-node metadata store survives restarts and never leaves a half-written file."""

import asyncio
import pathlib

import pytest

from tidelog.common.errors import ConfigError
from tidelog.metadata.image import add_partitions, new_topic
from tidelog.metadata.local_store import FILE_NAME, LocalMetadataStore
from tidelog.metadata.meta_properties import ensure_meta_properties


def test_committed_image_is_what_a_reopened_store_loads(tmp_path: pathlib.Path) -> None:
    store = LocalMetadataStore(tmp_path, "cid")
    topic = new_topic("orders", 3, 1, {"retention.ms": 1000, "cleanup.policy": ["compact"]})
    asyncio.run(store.commit(store.image.with_topic(add_partitions(topic, 5, 1)).with_producer_id_block_end(2000)))
    reopened = LocalMetadataStore(tmp_path, "ignored")
    assert reopened.image.cluster_id == "cid"
    loaded = reopened.image.topics["orders"]
    assert loaded.topic_id == topic.topic_id
    assert len(loaded.partitions) == 5
    assert dict(loaded.configs) == {"retention.ms": 1000, "cleanup.policy": ["compact"]}
    assert reopened.image.producer_id_block_end == 2000
    assert not (tmp_path / (FILE_NAME + ".tmp")).exists()


def test_meta_properties_pin_cluster_and_node(tmp_path: pathlib.Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    cluster = ensure_meta_properties(dirs, 1, None)
    assert len(cluster) == 22
    assert ensure_meta_properties(dirs, 1, None) == cluster
    with pytest.raises(ConfigError, match=r"node\.id"):
        ensure_meta_properties(dirs, 2, None)
    with pytest.raises(ConfigError, match="different clusters"):
        ensure_meta_properties(dirs, 1, "another-cluster-id-xx")

"""ACLs and SCRAM credentials in the metadata image and its JSON file: they persist, and an older
file without them still loads (as having none)."""

from __future__ import annotations

import asyncio
import json
import pathlib

from tidelog.metadata.image import AclEntry
from tidelog.metadata.local_store import FILE_NAME, LocalMetadataStore
from tidelog.protocol.sasl import SCRAM_SHA_512, scram_credential

ACL = AclEntry(2, "orders", 3, "User:app", "*", 4, 3)


def test_acls_and_credentials_survive_a_reopen(tmp_path: pathlib.Path) -> None:
    store = LocalMetadataStore(tmp_path, "cluster-a")
    credential = scram_credential(SCRAM_SHA_512, "secret", b"salt-salt-salt!!", 4096)
    asyncio.run(store.commit(store.image.with_acls((ACL, ACL)).with_scram_credentials({("app", SCRAM_SHA_512): credential})))
    assert store.image.acls == (ACL,), "identical bindings are kept once"
    reopened = LocalMetadataStore(tmp_path, "ignored")
    assert reopened.image.acls == (ACL,)
    assert reopened.image.scram_credentials == {("app", SCRAM_SHA_512): credential}
    text = (tmp_path / FILE_NAME).read_text()
    assert "secret" not in text, "the password itself is never stored"


def test_a_file_written_before_security_loads_with_none(tmp_path: pathlib.Path) -> None:
    (tmp_path / FILE_NAME).write_text(json.dumps({"version": 1, "cluster_id": "c", "topics": []}))
    image = LocalMetadataStore(tmp_path, "c").image
    assert image.acls == () and dict(image.scram_credentials) == {}


def test_changing_acls_replaces_the_collection(tmp_path: pathlib.Path) -> None:
    store = LocalMetadataStore(tmp_path, "c")
    before = store.image.acls
    asyncio.run(store.commit(store.image.with_acls((ACL,))))
    assert store.image.acls is not before

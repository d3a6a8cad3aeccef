"""Commit protocol details: idempotency keys, restore, tags, stable row ids, index bitmaps."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

import airflow_lance.core as lance
from airflow_lance.core import layout
from airflow_lance.core.transaction import IDEMPOTENCY_KEY

from .conflict_cases import table


def test_idempotent_commit_after_caller_failed_post_put(uri):
    lance.write_dataset(table(0, 5), uri)
    frags = lance.write_fragments(table(5, 5), uri)
    first = lance.LanceDataset.commit(uri, lance.LanceOperation.Append(frags), 1, idempotency_key="dag/run/task/-1")
    # The caller "crashed" after the put and retries from scratch: newer read_version, same key.
    again = lance.LanceDataset.commit(
        uri, lance.LanceOperation.Append(lance.write_fragments(table(5, 5), uri)), first.version,
        idempotency_key="dag/run/task/-1",
    )
    assert again.version == first.version == 2
    assert lance.dataset(uri).count_rows() == 10 and lance.dataset(uri).latest_version == 2
    txn = lance.dataset(uri).manifest_file.manifest.transaction_file
    assert txn.startswith("1-")


def test_idempotency_lookback_is_bounded(uri):
    lance.write_dataset(table(0, 1), uri)
    lance.LanceDataset.commit(uri, lance.LanceOperation.Append(lance.write_fragments(table(1, 1), uri)), 1,
                              idempotency_key="k")
    for i in range(3):
        lance.write_dataset(table(10 + i, 1), uri, mode="append")
    ds = lance.LanceDataset.commit(uri, lance.LanceOperation.Append(lance.write_fragments(table(1, 1), uri)), 5,
                                   idempotency_key="k", idempotency_lookback=2)
    assert ds.version == 6
    ds = lance.LanceDataset.commit(uri, lance.LanceOperation.Append(lance.write_fragments(table(1, 1), uri)), 6,
                                   idempotency_key="k")
    assert ds.version == 6


def test_commit_message_and_properties_are_stored(uri):
    lance.write_dataset(table(0, 1), uri, commit_message="hello", transaction_properties={"a": "b"})
    from airflow_lance.core.transaction import read_transaction_file

    ds = lance.dataset(uri)
    txn = read_transaction_file(ds.store, ds.manifest_file.manifest.transaction_file)
    assert txn.transaction_properties == {"__lance_commit_message": "hello", "a": "b"}
    assert IDEMPOTENCY_KEY not in txn.transaction_properties


def test_restore_makes_old_version_latest(uri):
    lance.write_dataset(table(0, 3), uri)
    lance.write_dataset(table(3, 3), uri, mode="append")
    lance.dataset(uri).delete("id = 0")
    restored = lance.dataset(uri, version=1).restore()
    assert restored.version == 4 and restored.to_table().equals(table(0, 3))
    assert restored.manifest_file.manifest.max_fragment_id == 1
    ds = lance.write_dataset(table(9, 1), uri, mode="append")
    assert [f.fragment_id for f in ds.get_fragments()] == [0, 2]


def test_tags_lifecycle(uri):
    lance.write_dataset(table(0, 3), uri)
    lance.write_dataset(table(3, 3), uri, mode="append")
    tags = lance.dataset(uri).tags
    tags.create("v1", 1)
    with pytest.raises(lance.TagAlreadyExistsError):
        tags.create("v1", 2)
    assert tags.get_version("v1") == 1 and lance.dataset(uri, version="v1").count_rows() == 3
    tags.update("v1", 2)
    assert lance.dataset(uri).checkout_version("v1").version == 2
    assert tags.list()["v1"]["version"] == 2
    tags.delete("v1")
    with pytest.raises(lance.TagNotFoundError):
        tags.get_version("v1")
    with pytest.raises(lance.InvalidInputError):
        tags.create("../escape", 1)
    with pytest.raises(lance.VersionNotFoundError):
        tags.create("later", 9)


def test_pending_manifest_names_never_overwrite(uri):
    ds = lance.write_dataset(table(0, 1), uri)
    path = os.path.join(uri, layout.manifest_path(2, layout.ManifestNamingScheme.V2))
    store = ds.store
    assert store.put_if_not_exists(layout.manifest_path(2, layout.ManifestNamingScheme.V2), b"first")
    assert not store.put_if_not_exists(layout.manifest_path(2, layout.ManifestNamingScheme.V2), b"second")
    with open(path, "rb") as handle:
        assert handle.read() == b"first"


def test_update_config_and_schema_metadata(uri):
    lance.write_dataset(pa.table({"id": [1]}), uri)
    op = lance.LanceOperation.UpdateConfig(
        config_updates=lance.LanceOperation.UpdateMap({"k": "v"}),
        schema_metadata_updates=lance.LanceOperation.UpdateMap({"owner": "team"}),
    )
    ds = lance.LanceDataset.commit(uri, op, 1)
    assert dict(ds.manifest_file.manifest.config) == {"k": "v"}
    assert ds.schema.metadata == {b"owner": b"team"}
    assert ds.manifest_file.manifest.writer_feature_flags & 8
    ds = lance.LanceDataset.commit(uri, lance.LanceOperation.UpdateConfig(
        config_updates=lance.LanceOperation.UpdateMap({"k": None})), 2)
    assert dict(ds.manifest_file.manifest.config) == {} and not ds.manifest_file.manifest.writer_feature_flags & 8

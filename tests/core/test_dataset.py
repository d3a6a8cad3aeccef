"""The dataset API on local disk: create/append/overwrite, versions, reading, errors."""

from __future__ import annotations

import os
import pathlib

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import airflow_lance.core as lance
from airflow_lance.core import layout


def _table(start: int, n: int) -> pa.Table:
    ids = pa.array(range(start, start + n), pa.int64())
    return pa.table({"id": ids, "name": pa.array([f"n{i}" for i in range(start, start + n)], pa.string())})


def test_create_append_overwrite_and_versions(uri):
    ds = lance.write_dataset(_table(0, 10), uri)
    assert (ds.version, ds.count_rows()) == (1, 10)
    ds = lance.write_dataset(_table(10, 5), uri, mode="append")
    assert (ds.version, ds.count_rows()) == (2, 15)
    assert ds.to_table().equals(pa.concat_tables([_table(0, 10), _table(10, 5)]))
    ds = lance.write_dataset(_table(100, 3), uri, mode="overwrite")
    assert (ds.version, ds.to_table().equals(_table(100, 3))) == (3, True)
    versions = ds.versions()
    assert [v["version"] for v in versions] == [1, 2, 3]
    assert [v["metadata"]["total_rows"] for v in versions] == ["10", "15", "3"]
    old = ds.checkout_version(1)
    assert old.version == 1 and old.latest_version == 3 and old.to_table().equals(_table(0, 10))
    assert lance.dataset(uri, version=2).count_rows() == 15
    assert ds.data_storage_version == "2.2"  # the default for new datasets


def test_v2_manifest_names_hint_and_transaction_files(uri):
    lance.write_dataset(_table(0, 3), uri, commit_message="first")
    names = os.listdir(os.path.join(uri, layout.VERSIONS_DIR))
    assert "18446744073709551614.manifest" in names and "latest_version_hint.json" in names
    ds = lance.dataset(uri)
    txn = ds.manifest_file.manifest.transaction_file
    assert txn.startswith("0-") and os.path.exists(os.path.join(uri, "_transactions", txn))


def test_fragments_follow_max_rows_per_file(uri):
    ds = lance.write_dataset(_table(0, 25), uri, max_rows_per_file=10)
    assert [f.count_rows() for f in ds.get_fragments()] == [10, 10, 5]
    assert [f.fragment_id for f in ds.get_fragments()] == [0, 1, 2]
    ds = lance.write_dataset(_table(25, 4), uri, mode="append", max_rows_per_file=10)
    assert [f.fragment_id for f in ds.get_fragments()] == [0, 1, 2, 3]
    assert ds.get_fragment(3).to_table().equals(_table(25, 4))


def test_streaming_input_reader_and_iterable(uri):
    batches = [_table(i * 7, 7).to_batches()[0] for i in range(5)]
    reader = pa.RecordBatchReader.from_batches(batches[0].schema, iter(batches))
    ds = lance.write_dataset(reader, uri, max_rows_per_file=12)
    assert ds.count_rows() == 35 and len(ds.get_fragments()) == 3
    ds = lance.write_dataset(iter(batches), uri, mode="append")
    assert ds.to_table().column("id").to_pylist() == list(range(35)) * 2


def test_projection_and_expression_filter(uri):
    lance.write_dataset(_table(0, 50), uri, max_rows_per_file=20)
    ds = lance.dataset(uri)
    assert ds.to_table(columns=["name"]).schema.names == ["name"]
    got = ds.to_table(columns=["name"], filter=pc.field("id") >= 45)
    assert got.column("name").to_pylist() == [f"n{i}" for i in range(45, 50)]
    batches = list(ds.to_batches(columns=["id"]))
    assert sum(b.num_rows for b in batches) == 50


def test_empty_table_creates_an_empty_version(uri):
    ds = lance.write_dataset(_table(0, 0), uri)
    assert ds.version == 1 and ds.count_rows() == 0 and ds.get_fragments() == []
    assert ds.to_table().schema == _table(0, 0).schema


def test_write_fragments_then_commit(uri):
    frags = lance.write_fragments(_table(0, 30), uri, max_rows_per_file=10)
    assert len(frags) == 3 and all(f.id == 0 for f in frags)
    roundtrip = [lance.FragmentMetadata.from_json(f.to_json()) for f in frags]
    assert roundtrip == frags
    ds = lance.LanceDataset.commit(uri, lance.LanceOperation.Overwrite(_table(0, 0).schema, roundtrip))
    assert ds.count_rows() == 30
    more = lance.write_fragments(_table(30, 5), uri)
    ds = lance.LanceDataset.commit(uri, lance.LanceOperation.Append(more), read_version=1)
    assert ds.version == 2 and ds.to_table().column("id").to_pylist() == list(range(35))


def test_create_only_commit_never_replaces_a_dataset_created_meanwhile(uri):
    ours = lance.write_fragments(_table(0, 3), uri, mode="create")
    lance.write_dataset(_table(10, 1), uri)  # another writer creates the dataset first
    with pytest.raises(lance.DatasetAlreadyExistsError, match="already exists"):
        lance.LanceDataset.commit(uri, lance.LanceOperation.Overwrite(_table(0, 0).schema, ours), 0,
                                  create_only=True)
    assert lance.dataset(uri).version == 1 and lance.dataset(uri).to_table().column("id").to_pylist() == [10]
    other = str(pathlib.Path(uri).with_name("fresh.lance"))
    mine = lance.write_fragments(_table(0, 3), other, mode="create")
    ds = lance.LanceDataset.commit(other, lance.LanceOperation.Overwrite(_table(0, 0).schema, mine), 0,
                                   create_only=True)
    assert ds.version == 1 and ds.count_rows() == 3


def test_concurrent_appends_from_one_read_version_both_land(uri):
    lance.write_dataset(_table(0, 1), uri)
    a = lance.write_fragments(_table(1, 1), uri)
    b = lance.write_fragments(_table(2, 1), uri)
    lance.LanceDataset.commit(uri, lance.LanceOperation.Append(a), read_version=1)
    ds = lance.LanceDataset.commit(uri, lance.LanceOperation.Append(b), read_version=1)
    assert ds.version == 3 and sorted(ds.to_table().column("id").to_pylist()) == [0, 1, 2]
    assert [f.fragment_id for f in ds.get_fragments()] == [0, 1, 2]


def test_append_after_concurrent_overwrite_is_incompatible(uri):
    lance.write_dataset(_table(0, 1), uri)
    frags = lance.write_fragments(_table(1, 1), uri)
    lance.write_dataset(_table(5, 1), uri, mode="overwrite")
    with pytest.raises(lance.IncompatibleTransactionError, match="overwrite"):
        lance.LanceDataset.commit(uri, lance.LanceOperation.Append(frags), read_version=1)
    assert lance.dataset(uri).version == 2


# -- errors ---------------------------------------------------------------------------------------


def test_missing_dataset(tmp_path):
    with pytest.raises(lance.DatasetNotFoundError, match="no Lance dataset"):
        lance.dataset(str(tmp_path / "nothing"))


def test_create_twice(uri):
    lance.write_dataset(_table(0, 1), uri)
    with pytest.raises(lance.DatasetAlreadyExistsError, match="already exists"):
        lance.write_dataset(_table(0, 1), uri)
    assert lance.dataset(uri).version == 1


def test_missing_version_and_tag(uri):
    lance.write_dataset(_table(0, 1), uri)
    with pytest.raises(lance.VersionNotFoundError, match="version 7"):
        lance.dataset(uri, version=7)
    with pytest.raises(lance.TagNotFoundError, match="nope"):
        lance.dataset(uri, version="nope")


def test_schema_mismatch_on_append_names_fields(uri):
    lance.write_dataset(_table(0, 1), uri)
    bad = pa.table({"id": pa.array(["x"]), "extra": pa.array([1])})
    with pytest.raises(lance.SchemaMismatchError) as err:
        lance.write_dataset(bad, uri, mode="append")
    message = str(err.value)
    assert "id" in message and "extra" in message and "name" in message
    assert lance.dataset(uri).version == 1
    assert not [n for n in os.listdir(os.path.join(uri, "data")) if n.startswith(".tmp")]


def test_bad_mode_and_arguments(uri):
    with pytest.raises(lance.InvalidInputError, match="mode"):
        lance.write_dataset(_table(0, 1), uri, mode="upsert")
    with pytest.raises(lance.InvalidInputError, match="max_rows_per_file"):
        lance.write_dataset(_table(0, 1), uri, max_rows_per_file=0)
    with pytest.raises(lance.InvalidInputError):
        lance.write_dataset(42, uri)
    with pytest.raises(lance.InvalidInputError, match="dict"):  # columns of unequal length
        lance.write_dataset({"a": [1], "b": [1, 2]}, uri)
    assert not os.path.exists(os.path.join(uri, "_versions"))


def test_unsupported_storage_version_is_refused(uri):
    with pytest.raises(lance.UnsupportedFeatureError, match="2.3"):
        lance.write_dataset(_table(0, 1), uri, data_storage_version="next")
    with pytest.raises(lance.UnsupportedFeatureError, match="1.9"):
        lance.write_dataset(_table(0, 1), uri, data_storage_version="1.9")


def test_legacy_storage_version_is_written(uri):
    ds = lance.write_dataset(_table(0, 3), uri, data_storage_version="legacy")
    assert ds.data_storage_version == "0.1"
    assert lance.dataset(uri).to_table().equals(_table(0, 3))


def test_corrupt_manifest_names_the_file(uri):
    lance.write_dataset(_table(0, 1), uri)
    path = pathlib.Path(uri, layout.manifest_path(1, layout.ManifestNamingScheme.V2))
    data = path.read_bytes()
    path.write_bytes(data[:-3] + b"XYZ")
    with pytest.raises(lance.CorruptFileError, match="18446744073709551614.manifest.*magic"):
        lance.dataset(uri)
    path.write_bytes(data[:10])
    with pytest.raises(lance.CorruptFileError, match="truncated|outside|length"):
        lance.dataset(uri)


def test_unknown_feature_flags_are_refused(uri):
    from airflow_lance.core.manifest import read_manifest, serialize_manifest

    lance.write_dataset(_table(0, 1), uri)
    mf = read_manifest(lance.dataset(uri).store, 1)
    mf.manifest.reader_feature_flags |= 4096
    mf.manifest.writer_feature_flags |= 4096
    with open(os.path.join(uri, mf.path), "wb") as handle:
        handle.write(serialize_manifest(mf.manifest, mf.index_section))
    with pytest.raises(lance.UnsupportedFeatureError, match="bit 4096"):
        lance.dataset(uri)


def test_writer_flags_refuse_append(uri):
    from airflow_lance.core.manifest import read_manifest, serialize_manifest

    lance.write_dataset(_table(0, 1), uri)
    mf = read_manifest(lance.dataset(uri).store, 1)
    mf.manifest.writer_feature_flags |= 64
    with open(os.path.join(uri, mf.path), "wb") as handle:
        handle.write(serialize_manifest(mf.manifest, mf.index_section))
    with pytest.raises(lance.UnsupportedFeatureError, match="refusing to write"):
        lance.write_dataset(_table(1, 1), uri, mode="append")
    assert lance.dataset(uri).version == 1

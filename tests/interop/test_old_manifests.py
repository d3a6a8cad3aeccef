"""Manifests as old Lance releases wrote them: fields added later are absent.

pylance 14 writes the datasets; the manifest is then rewritten without the field, exactly
as an older writer left it (proto3 drops an absent ``optional`` field and a plain ``uint32``
of 0 alike). Lance reads such manifests by deriving the value (``Manifest::try_from`` and
``max_fragment_id()`` in lance-table); so must we, or appends corrupt the dataset.
"""

from __future__ import annotations

import os

import lance as pylance
import pyarrow as pa
import pytest

import airflow_lance.core as ours
from airflow_lance.core import layout
from airflow_lance.core.manifest import read_latest_manifest, serialize_manifest
from airflow_lance.core.storage import open_store


def _rewrite_latest(uri: str, *fields: str) -> None:
    """Clear ``fields`` of the latest manifest, in place."""
    store = open_store(uri)
    latest = read_latest_manifest(store)
    for field in fields:
        latest.manifest.ClearField(field)
    with open(os.path.join(uri, latest.path), "wb") as handle:
        handle.write(serialize_manifest(latest.manifest, latest.index_section))


def _files(uri: str) -> set[str]:
    return set(os.listdir(os.path.join(uri, "data")))


def _ids(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


@pytest.mark.parametrize("fragments", [1, 3])
def test_append_without_max_fragment_id_takes_ids_above_every_fragment(tmp_path, fragments):
    uri = str(tmp_path / "ds.lance")
    pylance.write_dataset(_ids(0, 6 * fragments), uri, max_rows_per_file=6)
    _rewrite_latest(uri, "max_fragment_id")
    assert not read_latest_manifest(open_store(uri)).manifest.HasField("max_fragment_id")

    ours.write_dataset(_ids(1000, 200), uri, mode="append")

    ids = [f.id for f in read_latest_manifest(open_store(uri)).manifest.fragments]
    assert ids == list(range(fragments + 1))
    theirs = pylance.dataset(uri)
    assert theirs.count_rows() == 6 * fragments + 200
    assert sorted(theirs.to_table()["id"].to_pylist()) == list(range(6 * fragments)) + list(range(1000, 1200))
    pylance.write_dataset(_ids(5000, 3), uri, mode="append")  # and appends after us
    assert pylance.dataset(uri).count_rows() == 6 * fragments + 203


@pytest.mark.parametrize("version", ["2.0", "2.1"])
def test_append_without_data_format_keeps_the_files_version(tmp_path, version):
    uri = str(tmp_path / "ds.lance")
    pylance.write_dataset(_ids(0, 10), uri, data_storage_version=version)
    _rewrite_latest(uri, "data_format")
    assert ours.dataset(uri).data_storage_version == version

    ds = ours.write_dataset(_ids(10, 5), uri, mode="append")

    assert ds.data_storage_version == version
    manifest = read_latest_manifest(open_store(uri)).manifest
    assert manifest.data_format.version == version  # recorded as Lance records it
    assert {(f.file_major_version, f.file_minor_version) for frag in manifest.fragments for f in frag.files} == {
        (2, int(version[-1]))}
    theirs = pylance.dataset(uri)
    assert theirs.data_storage_version == version
    assert sorted(theirs.to_table()["id"].to_pylist()) == list(range(15))


def test_append_to_legacy_dataset_without_data_format_writes_legacy_files(tmp_path):
    uri = str(tmp_path / "ds.lance")
    pylance.write_dataset(_ids(0, 10), uri, data_storage_version="legacy")
    _rewrite_latest(uri, "data_format")
    assert ours.dataset(uri).data_storage_version == "0.1"
    before = _files(uri)

    ours.write_dataset(_ids(10, 5), uri, mode="append")

    (added,) = _files(uri) - before
    manifest = read_latest_manifest(open_store(uri)).manifest
    new_file = [f for fragment in manifest.fragments for f in fragment.files if f.path == added][0]
    assert (new_file.file_major_version, new_file.file_minor_version) == (0, 2)
    assert list(new_file.column_indices) == []
    assert pylance.dataset(uri).to_table().equals(_ids(0, 15))
    assert ours.dataset(uri).to_table().equals(_ids(0, 15))


def test_commit_of_foreign_fragments_checks_the_inferred_version(tmp_path):
    """A 2.2 fragment written elsewhere cannot be committed into a 2.0 dataset without data_format."""
    uri = str(tmp_path / "ds.lance")
    pylance.write_dataset(_ids(0, 10), uri, data_storage_version="2.0")
    _rewrite_latest(uri, "data_format")
    fragments = ours.write_fragments(_ids(10, 5), str(tmp_path / "other.lance"), data_storage_version="2.2")
    versions = sorted(os.listdir(os.path.join(uri, layout.VERSIONS_DIR)))
    with pytest.raises(ours.InvalidInputError, match="2.2 but the dataset uses 2.0"):
        ours.LanceDataset.commit(uri, ours.LanceOperation.Append(fragments), read_version=1)
    assert sorted(os.listdir(os.path.join(uri, layout.VERSIONS_DIR))) == versions
    assert pylance.dataset(uri).count_rows() == 10


def _dictionaries() -> pa.Table:
    return pa.table({
        "id": pa.array([1, 2, 3, 4, 5], pa.int64()),
        "tag": pa.array(["red", "green", "red", "", "blue"]).dictionary_encode(),
        "level": pa.array([10, 20, 10, 30, 20], pa.int32()).dictionary_encode(),
    })


def test_commits_to_a_legacy_dataset_keep_its_dictionary_values(tmp_path):
    """Legacy datasets store dictionary values inside the manifest file (``Field.dictionary``
    points there); every manifest we write must carry them, or pylance reads garbage."""
    uri = str(tmp_path / "ds.lance")
    pylance.write_dataset(_dictionaries(), uri, data_storage_version="legacy")
    original = pylance.dataset(uri).to_table()
    ds = ours.dataset(uri)
    ds.delete("id = 2")
    ds = ours.dataset(uri)
    ds.tags.create("kept", ds.version)
    ours.dataset(uri).delete("id = 5")  # a second commit on a manifest we wrote

    expected = original.filter(pa.compute.is_in(pa.compute.field("id"), pa.array([1, 3, 4])))
    theirs = pylance.dataset(uri)
    assert theirs.to_table().to_pydict() == expected.to_pydict()
    assert pylance.dataset(uri, version="kept").to_table().equals(original.filter(pa.compute.field("id") != 2))
    assert ours.dataset(uri).to_table().equals(expected)
    theirs.delete("id = 1")  # pylance carries on from our manifest
    assert pylance.dataset(uri).to_table()["level"].to_pylist() == [10, 30]

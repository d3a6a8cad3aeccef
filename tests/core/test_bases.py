"""core/bases.py: where files with a ``base_id`` live, and what is refused as corrupt."""

from __future__ import annotations

import pytest

from airflow_lance.core import bases
from airflow_lance.core._proto import table_pb2
from airflow_lance.core.errors import CorruptFileError
from airflow_lance.core.fragment import DataFile, DeletionFile
from airflow_lance.core.storage import open_store


def _manifest(version: int, *base_paths: table_pb2.BasePath) -> table_pb2.Manifest:
    manifest = table_pb2.Manifest(version=version)
    manifest.base_paths.extend(base_paths)
    return manifest


def test_files_resolve_through_their_base(tmp_path):
    store = open_store(str(tmp_path / "root"))
    root_base = table_pb2.BasePath(id=0, path=str(tmp_path / "source"), is_dataset_root=True)
    data_base = table_pb2.BasePath(id=1, name="b1", path=str(tmp_path / "b1"))
    bases.register(store, _manifest(1, root_base, data_base))
    in_root = DataFile("a.lance", (0,), (0,), base_id=0)
    in_data = DataFile("b.lance", (0,), (0,), base_id=1)
    opened, path = bases.data_file_location(store, in_root)
    assert (opened.uri, path) == (str(tmp_path / "source"), "data/a.lance")
    opened, path = bases.data_file_location(store, in_data)
    assert (opened.uri, path) == (str(tmp_path / "b1"), "b.lance")
    assert bases.data_file_location(store, DataFile("c.lance", (0,), (0,)))[0] is store
    deletion = DeletionFile(read_version=1, id=5, file_type="array", num_deleted_rows=1, base_id=1)
    with pytest.raises(CorruptFileError, match="not a dataset root"):  # deletions live in dataset roots only
        bases.deletion_location(store, deletion, "_deletions/0-1-5.arrow")
    with pytest.raises(CorruptFileError, match="base path id 7"):
        bases.data_file_location(store, DataFile("d.lance", (0,), (0,), base_id=7))


def test_a_base_id_that_changes_path_between_versions_is_corrupt(tmp_path):
    store = open_store(str(tmp_path / "root"))
    bases.register(store, _manifest(1, table_pb2.BasePath(id=0, path="/one", is_dataset_root=True)))
    bases.register(store, _manifest(2, table_pb2.BasePath(id=0, path="/one", is_dataset_root=True)))  # the same
    with pytest.raises(CorruptFileError, match="base path 0"):
        bases.register(store, _manifest(3, table_pb2.BasePath(id=0, path="/two", is_dataset_root=True)))

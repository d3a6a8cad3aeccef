"""``LanceDataset.validate()`` against pylance's ``validate()``: both accept what either engine wrote and
both refuse the same damaged manifests (ours with a ``CorruptFileError`` naming the cause)."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable

import lance as pylance
import numpy as np
import pyarrow as pa
import pytest

import airflow_lance.core as ours
from airflow_lance.core._proto import table_pb2
from airflow_lance.core.deletion import deletion_path
from airflow_lance.core.errors import CorruptFileError
from airflow_lance.core.manifest import read_latest_manifest, serialize_manifest


def _table(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, "s": pa.array(np.char.add("s", ids.astype(str)))})


def _dataset(uri: str, engine, version: str | None = None, stable: bool = False) -> None:
    options = {"data_storage_version": version} if version else {}
    engine.write_dataset(_table(0, 300), uri, max_rows_per_file=100, enable_stable_row_ids=stable, **options)
    engine.write_dataset(_table(300, 50), uri, mode="append")
    engine.dataset(uri).delete("id % 7 = 1")
    engine.dataset(uri).update({"s": "'x'"}, where="id < 20")


@pytest.mark.parametrize("engine", [ours, pylance], ids=["ours", "pylance"])
@pytest.mark.parametrize(("version", "stable"), [(None, False), (None, True), ("2.0", False), ("legacy", False)])
def test_what_either_engine_writes_validates_in_both(tmp_path, engine, version, stable):
    uri = str(tmp_path / "d")
    _dataset(uri, engine, version, stable)
    if version != "legacy":
        engine.dataset(uri).create_scalar_index("id", "BTREE")
        engine.write_dataset(_table(350, 50), uri, mode="append")
        pylance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=0)  # a second segment
        engine.dataset(uri).optimize.compact_files()
    for handle in (ours.dataset(uri), pylance.dataset(uri)):
        handle.validate()
    for v in ours.dataset(uri).versions():
        ours.dataset(uri, version=v["version"]).validate()


def _damage(uri: str, change: Callable[[table_pb2.Manifest, table_pb2.IndexSection], None]) -> None:
    """Rewrite the latest manifest file in place with ``change`` applied."""
    store = ours.dataset(uri).store
    latest = read_latest_manifest(store)
    manifest = table_pb2.Manifest()
    manifest.CopyFrom(latest.manifest)
    section = table_pb2.IndexSection()
    section.ParseFromString(latest.index_section or b"")
    change(manifest, section)
    data = serialize_manifest(manifest, section.SerializeToString() if section.indices else None, latest.dictionaries)
    with open(os.path.join(uri, latest.path), "wb") as f:
        f.write(data)


def _reverse(m, _):
    fragments = list(m.fragments)[::-1]
    del m.fragments[:]
    m.fragments.extend(fragments)


def _duplicate(m, _):
    m.fragments.add().CopyFrom(m.fragments[-1])


def _physical_rows(m, _):
    m.fragments[0].physical_rows += 1


def _deleted_rows(m, _):
    next(f for f in m.fragments if f.HasField("deletion_file")).deletion_file.num_deleted_rows += 3


def _overlapping_segments(_, section):
    copy = section.indices.add()
    copy.CopyFrom(section.indices[0])
    copy.uuid.uuid = uuid.uuid4().bytes


def _same_uuid(_, section):
    section.indices.add().CopyFrom(section.indices[0])


def _field_twice(m, _):  # fragment 0's second file (the added column) claims the first file's field
    m.fragments[0].files[1].fields[0] = m.fragments[0].files[0].fields[0]


def _column_indices(m, _):
    del m.fragments[0].files[0].column_indices[-1]


def _mixed_versions(m, _):
    m.fragments[0].files[1].file_major_version, m.fragments[0].files[1].file_minor_version = 0, 2


def _unequal_files(m, _):  # fragment 0's second file swapped for the 50-row fragment's
    short = next(f for f in m.fragments if f.physical_rows == 50)
    m.fragments[0].files[1].path = short.files[1].path
    m.fragments[0].files[1].file_size_bytes = 0  # unknown, as old releases wrote: the length check finds it


@pytest.mark.parametrize(("change", "cause"), [
    (_field_twice, "stored twice"),
    (_column_indices, "column indices"),
    (_mixed_versions, "mixes legacy and 2.x"),
    (_unequal_files, "holds 50 rows"),
    (_reverse, "not in increasing order"),
    (_duplicate, "listed more than once"),
    (_physical_rows, "physical rows"),
    (_deleted_rows, "deleted rows"),
    (_overlapping_segments, "overlap on fragments"),
    (_same_uuid, "listed more than once"),
])
def test_damaged_manifests_are_refused_as_pylance_refuses_them(tmp_path, change, cause):
    uri = str(tmp_path / "d")
    _dataset(uri, pylance)
    pylance.dataset(uri).add_columns({"t": "id * 2"})  # a second data file in every fragment
    pylance.dataset(uri).create_scalar_index("id", "BTREE")
    _damage(uri, change)
    with pytest.raises((OSError, ValueError)):  # pylance refuses some of them when it opens the version
        pylance.dataset(uri).validate()
    with pytest.raises(CorruptFileError, match=cause):
        ours.dataset(uri).validate()


def test_a_deletion_vector_beyond_its_fragment_is_refused_as_pylance_refuses_it(tmp_path):
    """The 50-row fragment given a copy of a 100-row fragment's deletion file (same count, offsets past 49)."""
    uri = str(tmp_path / "d")
    _dataset(uri, pylance)
    fragments = {f.fragment_id: f for f in ours.dataset(uri).get_fragments()}
    long, short = fragments[1], next(f for f in fragments.values() if f.physical_rows == 50)
    source = deletion_path(long.fragment_id, long.deletion_file())
    target = deletion_path(short.fragment_id, long.deletion_file())
    shutil.copyfile(os.path.join(uri, source), os.path.join(uri, target))

    def borrow(m, _):
        pb = next(f for f in m.fragments if f.id == short.fragment_id)
        pb.deletion_file.CopyFrom(next(f for f in m.fragments if f.id == long.fragment_id).deletion_file)

    _damage(uri, borrow)
    with pytest.raises(OSError):
        pylance.dataset(uri).validate()
    with pytest.raises(CorruptFileError, match="of a fragment of 50 rows"):
        ours.dataset(uri).validate()

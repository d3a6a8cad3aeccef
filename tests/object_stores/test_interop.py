"""pylance and we share datasets on object stores, with the very same storage_options dict."""

from __future__ import annotations

import datetime as dt

import lance as pylance
import pyarrow as pa
import pytest

import airflow_lance.core as lance
from airflow_lance.core.storage import open_store


def _ids(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "s": [f"v{i}" for i in range(n)]})


@pytest.fixture(params=["s3_seaweedfs", "s3_moto", "azure_azurite"])
def shared(request):
    """Backends where pylance writes too (fake-gcs-server lacks the XML-API uploads pylance uses)."""
    return request.getfixturevalue(request.param)


def test_interleaved_appends(shared):
    uri, options = shared.new_uri("ds.lance"), shared.options
    pylance.write_dataset(_ids(0, 5), uri, storage_options=options, data_storage_version="2.0")
    for round_ in range(3):
        lance.write_dataset(_ids(100 + 10 * round_, 3), uri, mode="append", storage_options=options)
        pylance.write_dataset(_ids(200 + 10 * round_, 2), uri, mode="append", storage_options=options)
    ours = lance.dataset(uri, storage_options=options)
    theirs = pylance.dataset(uri, storage_options=options)
    assert ours.version == theirs.version == 7
    assert ours.to_table().sort_by("id").equals(theirs.to_table().sort_by("id"))
    for version in range(1, 8):
        assert (
            lance.dataset(uri, version=version, storage_options=options).count_rows()
            == pylance.dataset(uri, version=version, storage_options=options).count_rows()
        )


def test_pylance_reads_what_we_write_on_gcs(gcs_fake):
    uri = gcs_fake.new_uri("ds.lance")
    lance.write_dataset(_ids(0, 10), uri, storage_options=gcs_fake.options)
    lance.write_dataset(_ids(10, 5), uri, mode="append", storage_options=gcs_fake.options)
    theirs = pylance.dataset(uri, storage_options=gcs_fake.options)
    assert theirs.version == 2 and theirs.to_table().num_rows == 15


def test_shallow_clones_across_the_store(shared):
    """pylance's clone and ours of a dataset on the store: read, written to and cleaned up through the
    clone's base path with the dataset's own storage options; the source's objects stay as they were."""
    source, options = shared.new_uri("source.lance"), shared.options
    pylance.write_dataset(_ids(0, 30), source, storage_options=options, max_rows_per_file=10)
    pylance.dataset(source, storage_options=options).delete("id % 4 = 0")
    before = sorted((i.path, i.size) for i in open_store(source, options).list(""))
    theirs, mine = shared.new_uri("theirs.lance"), shared.new_uri("mine.lance")
    pylance.dataset(source, storage_options=options).shallow_clone(theirs, 2, storage_options=options)
    lance.dataset(source, storage_options=options).shallow_clone(mine, 2)
    expected = pylance.dataset(source, storage_options=options).to_table()
    for clone in (theirs, mine):
        assert lance.dataset(clone, storage_options=options).to_table().equals(expected)
        lance.write_dataset(_ids(100, 5), clone, mode="append", storage_options=options)
        ds = lance.dataset(clone, storage_options=options)
        ds.delete("id % 3 = 0")
        ds.optimize.compact_files()
        ds.cleanup_old_versions(older_than=dt.timedelta(0), delete_unverified=True)
        rows = sorted(pylance.dataset(clone, storage_options=options).to_table().column("id").to_pylist())
        assert rows == [i for i in list(range(30)) + list(range(100, 105)) if (i % 4 or i >= 100) and i % 3]
    assert sorted((i.path, i.size) for i in open_store(source, options).list("")) == before

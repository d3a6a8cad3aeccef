"""Cleanup and version resolution work unchanged on s3:// and s3+ddb:// datasets."""

from __future__ import annotations

import lance as pylance
import pyarrow as pa
import pytest

import airflow_lance.core as lance
from airflow_lance.core.errors import VersionNotFoundError
from airflow_lance.core.storage import open_store


@pytest.fixture(params=["s3_seaweedfs", "ddb"])
def s3_like(request):
    return request.getfixturevalue(request.param)


def test_cleanup_old_versions(s3_like):
    uri, options = s3_like.new_uri("ds.lance"), s3_like.options
    lance.write_dataset(pa.table({"id": [0]}), uri, storage_options=options)
    lance.write_dataset(pa.table({"id": [1]}), uri, mode="overwrite", storage_options=options)
    for n in range(2, 5):
        lance.write_dataset(pa.table({"id": [n]}), uri, mode="append", storage_options=options)
    stats = lance.cleanup_old_versions(uri, retain_versions=2, storage_options=options)
    assert stats.old_versions == 3 and stats.data_files_removed == 1  # version 1's data, replaced by the overwrite
    ds = lance.dataset(uri, storage_options=options)
    assert [v["version"] for v in ds.versions()] == [4, 5]
    assert sorted(ds.to_table()["id"].to_pylist()) == [1, 2, 3, 4]
    with pytest.raises(VersionNotFoundError):
        lance.dataset(uri, version=2, storage_options=options)
    assert pylance.dataset(uri, storage_options=options).count_rows() == 4
    lance.write_dataset(pa.table({"id": [5]}), uri, mode="append", storage_options=options)
    assert pylance.dataset(uri, storage_options=options).version == 6


def test_daily_append_compact_cleanup_keeps_storage_bounded(s3_like):
    """Compaction is one version on S3 and through the external manifest store, so a daily
    append -> compact -> cleanup(retain_versions=2) keeps only the files of those two versions."""
    uri, options = s3_like.new_uri("daily.lance"), s3_like.options
    store = open_store(uri, options)
    rows = 0
    for day in range(3):
        for _ in range(4):
            table = pa.table({"id": pa.array(range(rows, rows + 25), pa.int64())})
            lance.write_dataset(table, uri, mode="append" if rows else "create", storage_options=options)
            rows += 25
        before = lance.dataset(uri, storage_options=options).version
        metrics = lance.compact_files(uri, storage_options=options)
        assert (metrics.version, metrics.versions_created, metrics.fragments_added) == (before + 1, 1, 1)
        lance.cleanup_old_versions(uri, retain_versions=2, storage_options=options)
        ds = lance.dataset(uri, storage_options=options)
        assert [v["version"] for v in ds.versions()] == [before, before + 1]
        kept = {(f.path, f.file_size_bytes) for v in (before, before + 1)
                for fragment in ds.checkout_version(v).get_fragments() for f in fragment.data_files()}
        on_store = {(info.path.rsplit("/", 1)[-1], info.size) for info in store.list("data")}
        assert on_store == kept  # the pre-compaction files of the day before are gone
        assert len(kept) == 4 + 1 + (day > 0)  # the small files it replaced, the new one (+ yesterday's)
    assert pylance.dataset(uri, storage_options=options).to_table()["id"].to_pylist() == list(range(rows))

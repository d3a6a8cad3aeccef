"""Cleanup and version resolution work unchanged on s3:// and s3+ddb:// datasets."""

from __future__ import annotations

import lance as pylance
import pyarrow as pa
import pytest

import airflow_lance.core as lance
from airflow_lance.core.errors import VersionNotFoundError


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

"""The idempotent retry after cleanup on object stores and through ``s3+ddb://`` (scenario in cleanup_retry_cases)."""

from __future__ import annotations

import pytest
from cleanup_retry_cases import build_and_clean_up, run_retry_after_cleanup

import airflow_lance.core as lance
from airflow_lance.core import layout

from . import servers
from .conftest import BUCKET, DDB_TABLE


@pytest.mark.parametrize("backend_name", ["s3_seaweedfs", "s3_moto", "azure_azurite", "gcs_fake", "ddb"])
def test_idempotent_retry_after_cleanup(request, backend_name):
    backend = request.getfixturevalue(backend_name)
    run_retry_after_cleanup(backend.new_uri("ds.lance"), backend.options)


def test_through_ddb_the_rows_of_cleaned_up_versions_stay_and_are_not_read(ddb):
    """Cleanup removes manifests, not DynamoDB rows: the look-back goes by the manifests that exist."""
    uri = ddb.new_uri("ds.lance")
    build_and_clean_up(uri, ddb.options)
    client = servers.botocore_client("dynamodb", ddb.server.endpoint)
    base = uri.split("?")[0][len(f"s3+ddb://{BUCKET}/"):]
    rows = client.query(  # type: ignore[attr-defined]
        TableName=DDB_TABLE, KeyConditionExpression="base_uri = :b",
        ExpressionAttributeValues={":b": {"S": base}}, ConsistentRead=True,
    )["Items"]
    assert sorted(int(row["version"]["N"]) for row in rows) == [1, 2, 3, 4, 5]
    store = lance.dataset(uri, storage_options=ddb.options).store
    assert not store.exists(layout.manifest_path(3, layout.ManifestNamingScheme.V2))
    search = lance.find_landed_version(store, "run-2")
    assert (search.version, search.first, search.last, search.searched, search.cleaned_up) == (None, 1, 5, 2, True)
    assert lance.find_landed_version(store, "run-4").version == 4

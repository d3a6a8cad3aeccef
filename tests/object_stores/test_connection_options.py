"""Storage options built from the ``lance`` Airflow connection drive our stores and pylance alike."""

from __future__ import annotations

import json
import uuid

import lance as pylance
import pyarrow as pa
import pytest

import airflow_lance.core as lance
from airflow_lance.connection import LanceConnectionError, parse_connection

from . import servers
from .conftest import BUCKET, DDB_TABLE


def test_connection_with_dynamodb_commit_table(seaweedfs, dynalite):
    config = parse_connection(
        host=f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}",
        login=servers.S3_KEY,
        password=servers.S3_SECRET,
        extra=json.dumps({
            "region": "us-east-1", "endpoint": seaweedfs.endpoint, "allow_http": True,
            "dynamodb_table_name": DDB_TABLE, "dynamodb_endpoint": dynalite.endpoint,
            "storage_options": {"aws_virtual_hosted_style_request": "false"},
        }),
    )
    uri = config.resolve("events.lance")
    assert uri.startswith("s3+ddb://") and uri.endswith(f"?ddbTableName={DDB_TABLE}")
    lance.write_dataset(pa.table({"id": [1, 2]}), uri, storage_options=config.storage_options)
    pylance.write_dataset(pa.table({"id": [3]}), uri, mode="append", storage_options=config.storage_options)
    assert lance.dataset(uri, storage_options=config.storage_options).count_rows() == 3
    assert servers.S3_SECRET not in repr(lance.dataset(uri, storage_options=config.storage_options).store)


def test_pylance_option_names_as_top_level_extra_keys_drive_the_store(seaweedfs):
    """A connection written with pylance's names only (no form fields) reaches SeaweedFS, and pylance
    reads what we wrote with the very same options."""
    config = parse_connection(
        host=f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}",
        extra=json.dumps({**servers.s3_options(seaweedfs.endpoint), "aws_virtual_hosted_style_request": False}),
    )
    uri = config.resolve("events.lance")
    lance.write_dataset(pa.table({"id": [1, 2, 3]}), uri, storage_options=config.storage_options)
    assert pylance.dataset(uri, storage_options=config.storage_options).count_rows() == 3


def test_a_misspelt_endpoint_never_reaches_a_store(seaweedfs):
    with pytest.raises(LanceConnectionError, match=r"unknown key 'aws_endpont' \(did you mean 'aws_endpoint'\?\)"):
        parse_connection(f"s3://{BUCKET}/x", servers.S3_KEY, servers.S3_SECRET,
                         {"aws_endpont": seaweedfs.endpoint, "allow_http": True})

"""The ``lance+<store>://`` asset URIs: conversion, Airflow's normalisation through our handler,
the factory and the OpenLineage naming."""

from __future__ import annotations

import pytest

from airflow_lance.assets.lance import (
    create_asset,
    to_asset_uri,
    to_dataset_uri,
)


@pytest.mark.parametrize(("dataset", "asset"), [
    ("/data/ds.lance", "lance+file:///data/ds.lance"),
    ("file:///data/ds.lance", "lance+file:///data/ds.lance"),
    ("s3://bucket/path/ds.lance", "lance+s3://bucket/path/ds.lance"),
    ("gs://bucket/ds.lance", "lance+gs://bucket/ds.lance"),
    ("lance+az://c/ds.lance", "lance+az://c/ds.lance"),
])
def test_asset_uri_round_trip(dataset: str, asset: str) -> None:
    assert to_asset_uri(dataset) == asset
    assert to_dataset_uri(asset) == ("/data/ds.lance" if dataset.startswith(("/", "file:")) else
                                     dataset.removeprefix("lance+"))


def test_airflow_normalises_lance_assets_with_our_handler() -> None:
    assert create_asset(uri="/data/ds.lance/").uri == "lance+file:///data/ds.lance"
    asset = create_asset(uri="s3+ddb://bucket/p/ds.lance?ddbTableName=t", name="orders", extra={"team": "a"})
    assert (asset.uri, asset.name, asset.group, asset.extra) == (
        "lance+s3+ddb://bucket/p/ds.lance?ddbTableName=t", "orders", "lance", {"team": "a"})


@pytest.mark.parametrize("uri", ["lance+s3:///no-bucket/ds.lance", "lance+file://host/ds.lance"])
def test_uris_that_name_no_dataset_are_rejected(uri: str) -> None:
    from airflow.providers.common.compat.sdk import Asset

    with pytest.raises(ValueError, match="asset URI needs"):
        Asset(uri=uri)


def test_not_a_lance_uri() -> None:
    with pytest.raises(ValueError, match="not a Lance asset URI"):
        to_dataset_uri("s3://bucket/ds.lance")


@pytest.mark.parametrize("uri", ["ftp://files.example/lake/ds.lance", "http://127.0.0.1:8000/ds.lance",
                                 "hdfs://namenode:8020/lake/ds.lance", "lance+webhdfs://nn/ds.lance"])
def test_no_asset_for_a_store_the_provider_does_not_write_to(uri: str) -> None:
    import airflow_lance.core as lance

    scheme = uri.removeprefix("lance+").split("://")[0]
    with pytest.raises(lance.UnsupportedFeatureError) as raised:
        create_asset(uri=uri)
    assert str(raised.value).startswith(
        f"no Lance asset for {to_asset_uri(uri)!r}: {scheme}:// is not a store the provider writes Lance datasets to")
    assert "file://, s3://, s3a://, s3+ddb://, gs://, gcs://, az://, abfs://, abfss://, memory://" in str(raised.value)


def test_an_operator_on_an_unsupported_store_is_refused_when_the_dag_is_parsed() -> None:
    """The automatic outlet would register ``lance+ftp://...``: the operator is refused instead."""
    from airflow.providers.common.compat.sdk import DAG

    import airflow_lance.core as lance
    from airflow_lance.operators.maintenance import LanceCompactFilesOperator
    from airflow_lance.operators.spark_write import LanceSparkWriteOperator

    with DAG("refused_at_parse_time", schedule=None):
        with pytest.raises(lance.UnsupportedFeatureError, match=r"no Lance asset for 'lance\+ftp://h/ds.lance'"):
            LanceSparkWriteOperator(task_id="w", uri="ftp://h/ds.lance", source_sql="SELECT 1 AS id")
        with pytest.raises(lance.UnsupportedFeatureError, match=r"no Lance asset for 'lance\+http://h/ds.lance'"):
            LanceCompactFilesOperator(task_id="c", uri="http://h/ds.lance")
        templated = LanceSparkWriteOperator(task_id="ok", uri="{{ params.uri }}", source_sql="SELECT 1 AS id")
    assert templated.outlets == []  # known at run time only: the hook's check_writable refuses it then

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

"""Resolving ``dataset_or_uri`` arguments to a store and a manifest, and small manifest facts."""

from __future__ import annotations

import os
from collections.abc import Mapping

from airflow_lance.core import feature_flags
from airflow_lance.core._proto import table_pb2
from airflow_lance.core.dataset import LanceDataset
from airflow_lance.core.errors import InvalidInputError
from airflow_lance.core.fragment import DataFile
from airflow_lance.core.manifest import ManifestFile, read_latest_manifest, read_manifest
from airflow_lance.core.storage import ObjectStore, open_store

DatasetOrUri = LanceDataset | str | os.PathLike[str]


def open_source(
    dataset_or_uri: DatasetOrUri, storage_options: Mapping[str, str] | None, version: int | None = None
) -> tuple[ObjectStore, ManifestFile]:
    """The store and the manifest of ``version`` (default: the handle's version, or the latest)."""
    if isinstance(dataset_or_uri, LanceDataset):
        store, current = dataset_or_uri.store, dataset_or_uri.manifest_file
        if version is None or version == current.version:
            return store, current
    elif isinstance(dataset_or_uri, (str, os.PathLike)):
        store = open_store(dataset_or_uri, storage_options)
        if version is None:
            return store, read_latest_manifest(store)
    else:
        raise InvalidInputError(f"expected a LanceDataset or a dataset URI, not {type(dataset_or_uri).__name__}")
    return store, read_manifest(store, version)


def has_stable_row_ids(manifest: table_pb2.Manifest) -> bool:
    return bool(manifest.reader_feature_flags & feature_flags.STABLE_ROW_IDS)


def file_version(data_file: DataFile) -> str:
    """The data storage version string of one data file (legacy 0.3 files are 2.0)."""
    major, minor = data_file.file_major_version, data_file.file_minor_version
    if major == 0:
        return "2.0" if minor >= 3 else "0.1"
    return f"{major}.{minor}"

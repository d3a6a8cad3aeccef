"""Pick the object store for a dataset URI.

| URI | store | commits |
|---|---|---|
| path, ``file://`` | :class:`LocalStore` | temp file + ``os.link`` |
| ``s3://``, ``s3a://`` | :class:`S3Store` | ``If-None-Match: *`` |
| ``s3+ddb://b/p?ddbTableName=T`` | :class:`S3Store` + DynamoDB | conditional PutItem (Lance's protocol) |
| ``gs://``, ``gcs://`` | :class:`GcsStore` | ``ifGenerationMatch=0`` |
| ``az://``, ``abfs://``, ``abfss://`` | :class:`AzureStore` | ``If-None-Match: *`` |
| ``memory://`` | :class:`FsspecStore` | under a process-wide lock |
| any other fsspec URL | :class:`FsspecStore` | refused, unless ``allow_unsafe_commit`` |
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, urlparse

from airflow_lance.core.errors import InvalidInputError
from airflow_lance.core.storage.azure import AzureStore
from airflow_lance.core.storage.base import ObjectStore
from airflow_lance.core.storage.dynamodb import DynamoDBManifestStore
from airflow_lance.core.storage.fsspec_store import FsspecStore
from airflow_lance.core.storage.gcs import GcsStore
from airflow_lance.core.storage.local import LocalStore
from airflow_lance.core.storage.options import local_direct_io
from airflow_lance.core.storage.s3 import S3Store

DDB_SCHEME = "s3+ddb"
DDB_QUERY_KEY = "ddbTableName"
_BACKENDS: dict[str, type[FsspecStore]] = {
    "s3": S3Store, "s3a": S3Store, "gs": GcsStore, "gcs": GcsStore, "az": AzureStore, "abfs": AzureStore,
    "abfss": AzureStore,
}


def normalize_uri(uri: str | os.PathLike[str]) -> str:
    """Strip trailing slashes; plain paths stay plain."""
    text = os.fspath(uri)
    if not text:
        raise InvalidInputError("dataset URI is empty")
    return text.rstrip("/") or "/"


def _ddb_store(text: str, options: Mapping[str, Any] | None) -> S3Store:
    base, _, query = text.partition("?")
    pairs = parse_qsl(query, keep_blank_values=True)
    if len(pairs) != 1 or pairs[0][0] != DDB_QUERY_KEY:
        raise InvalidInputError(f"s3+ddb:// URIs take exactly one query parameter, {DDB_QUERY_KEY}: {text!r}")
    base = base.rstrip("/")
    target = "s3://" + base[len(DDB_SCHEME) + 3:]
    store = S3Store(text, target, options)
    _bucket, key = target[5:].partition("/")[::2]
    store.external_manifests = DynamoDBManifestStore(pairs[0][1], key.strip("/"), options)
    return store


def open_store(uri: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None) -> ObjectStore:
    """Return the store for a dataset root: a local path, ``file://`` URI or any fsspec URI."""
    store = _open_store(uri, storage_options)
    store.storage_options = dict(storage_options or {})
    return store


def _open_store(uri: str | os.PathLike[str], storage_options: Mapping[str, Any] | None) -> ObjectStore:
    text = normalize_uri(uri)
    parsed = urlparse(text)
    scheme = parsed.scheme.lower()
    if scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt"):
        path = parsed.path if scheme == "file" else text
        return LocalStore(text, os.path.expanduser(path), direct_io=local_direct_io(storage_options))
    if scheme == DDB_SCHEME:
        return _ddb_store(text, storage_options)
    if parsed.query and scheme in _BACKENDS:
        raise InvalidInputError(f"unexpected query string in {text!r}")
    store_class = _BACKENDS.get(scheme, FsspecStore)
    try:
        return store_class(text, text, storage_options)
    except (ImportError, ValueError) as exc:
        if isinstance(exc, InvalidInputError):
            raise
        raise InvalidInputError(f"cannot open {text!r}: {type(exc).__name__}: {exc}") from None


def ensure_committable(uri: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None) -> None:
    """Raise before any work when ``uri`` cannot take a commit: ``UnsupportedFeatureError`` for a
    store without an atomic put-if-not-exists (``ftp://``, ``http(s)://``, ``hdfs://``, ... unless
    ``allow_unsafe_commit``), ``InvalidInputError`` for options the store cannot take. Decided from
    the URI and the options: no request is sent."""
    open_store(uri, storage_options).ensure_committable()

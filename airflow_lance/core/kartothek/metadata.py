"""Find Kartothek datasets in a store location and parse their metadata file.

A Kartothek dataset is identified by ``<uuid>.by-dataset-metadata.json`` or
``<uuid>.by-dataset-metadata.msgpack.zstd`` (zstd-compressed msgpack) at the
root of its storage location. The file holds ``dataset_metadata_version``
(3 or 4), ``dataset_uuid``, ``metadata`` (annotations, including
``creation_time``), ``partitions`` (label -> ``{"files": {table: key}}``),
``partition_keys`` and ``indices`` (column -> index file key, or an embedded
index ``{value: [labels]}``). All other files are referenced by storage keys
relative to the storage location. Without ``partitions`` (a header written
before any data), partitions are derived from the Parquet files under
``<uuid>/``, as Kartothek does.

Parsing collects every structural problem and raises
:class:`KartothekMetadataError` naming all of them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any

import msgpack
import zstandard

from airflow_lance.core.kartothek.errors import (
    KartothekDatasetNotFoundError,
    KartothekMetadataError,
    KartothekUnsupportedError,
)
from airflow_lance.core.kartothek.partitions import unquote_text
from airflow_lance.core.storage import ObjectStore, open_store
from airflow_lance.core.storage.local import LocalStore

METADATA_SUFFIX = ".by-dataset-metadata"
FORMATS = {"json": ".json", "msgpack": ".msgpack.zstd"}
SUPPORTED_METADATA_VERSIONS = (3, 4)
COMMON_METADATA = "_common_metadata"
PARQUET_SUFFIX = ".parquet"
INDEX_SUFFIX = ".by-dataset-index.parquet"


def metadata_key(dataset_uuid: str, fmt: str) -> str:
    return f"{dataset_uuid}{METADATA_SUFFIX}{FORMATS[fmt]}"


def open_source_store(store_uri: str | os.PathLike[str], storage_options: Mapping[str, str] | None) -> ObjectStore:
    """The store of a Kartothek storage location. Besides paths and fsspec URLs this
    accepts storefact's local ``hfs://`` URLs, as Kartothek users wrote them."""
    text = os.fspath(store_uri)
    if text.startswith("hfs://"):
        text = text[len("hfs://"):]
    return open_store(text, storage_options)


@dataclasses.dataclass(frozen=True)
class KartothekDatasetRef:
    """A dataset found in a storage location."""

    dataset_uuid: str
    metadata_format: str  # "json" or "msgpack"
    metadata_path: str


def find_kartothek_datasets(
    store_uri: str | os.PathLike[str], *, storage_options: Mapping[str, str] | None = None
) -> list[KartothekDatasetRef]:
    """Every Kartothek dataset at the root of a storage location, sorted by uuid.

    When both a JSON and a msgpack metadata file exist for one uuid, the JSON
    one is reported (Kartothek reads that one first).
    """
    store = open_source_store(store_uri, storage_options)
    if isinstance(store, LocalStore):
        names = sorted(store.list_names(""))  # no recursive walk of the whole location
    else:
        names = sorted({info.path for info in store.list("") if "/" not in info.path})
    found: dict[str, KartothekDatasetRef] = {}
    for fmt in ("msgpack", "json"):
        suffix = METADATA_SUFFIX + FORMATS[fmt]
        for name in names:
            if name.endswith(suffix) and len(name) > len(suffix):
                uuid = name[: -len(suffix)]
                found[uuid] = KartothekDatasetRef(uuid, fmt, name)
    return [found[uuid] for uuid in sorted(found)]


@dataclasses.dataclass(frozen=True)
class KartothekMetadata:
    """The parsed metadata file of one dataset (nothing else read yet)."""

    dataset_uuid: str
    metadata_version: int
    metadata_format: str
    metadata_path: str
    #: sha256 of the metadata file's bytes: identifies this state of the dataset.
    metadata_sha256: str
    #: Annotations (``creation_time`` and user metadata).
    metadata: dict[str, Any]
    #: label -> {table: storage key}, in the file's order. Derived from the files when not explicit.
    partitions: dict[str, dict[str, str]]
    explicit_partitions: bool
    #: From the file, else from the first partition's path, else empty.
    partition_keys: tuple[str, ...]
    #: column -> index file storage key (str) or embedded index (dict value -> labels).
    indices: dict[str, str | dict[str, list[str]]]

    @property
    def creation_time(self) -> str | None:
        value = self.metadata.get("creation_time")
        return value if isinstance(value, str) else None


def _decode(raw: bytes, fmt: str, path: str) -> Any:
    if fmt == "json":
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise KartothekMetadataError(path, [f"not valid JSON: {exc}"]) from exc
    try:
        stream = zstandard.ZstdDecompressor().decompressobj()
        plain = stream.decompress(raw)
    except zstandard.ZstdError as exc:
        raise KartothekMetadataError(path, [f"not a zstd stream: {exc}"]) from exc
    if not stream.eof:
        raise KartothekMetadataError(path, ["the zstd stream is truncated"])
    if stream.unused_data:
        raise KartothekMetadataError(path, [f"{len(stream.unused_data)} bytes after the zstd frame"])
    try:
        return msgpack.unpackb(plain, raw=False, strict_map_key=False)
    except (ValueError, msgpack.exceptions.ExtraData, msgpack.exceptions.FormatError,
            msgpack.exceptions.StackError) as exc:
        raise KartothekMetadataError(path, [f"not valid msgpack: {exc}"]) from exc


def read_raw_metadata(store: ObjectStore, dataset_uuid: str) -> tuple[str, str, bytes]:
    """(format, path, bytes) of the dataset's metadata file; JSON is tried first."""
    tried = []
    for fmt in ("json", "msgpack"):
        path = metadata_key(dataset_uuid, fmt)
        tried.append(path)
        try:
            return fmt, path, store.read(path)
        except FileNotFoundError:
            continue
    raise KartothekDatasetNotFoundError(dataset_uuid, store.uri, tried)


def _is_str_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def parse_metadata(
    document: Any, dataset_uuid: str, fmt: str, path: str, sha256: str
) -> tuple[KartothekMetadata | None, list[str]]:
    """Check the document's shape; return the parsed metadata (partitions may still need
    deriving when not explicit) or the list of problems."""
    problems: list[str] = []
    if not isinstance(document, dict):
        return None, [f"the document is a {type(document).__name__}, not a map"]
    version = document.get("dataset_metadata_version")
    if isinstance(version, bool) or not isinstance(version, int):
        problems.append(f"dataset_metadata_version must be an integer, got {version!r}")
    uuid = document.get("dataset_uuid")
    if not isinstance(uuid, str):
        problems.append(f"dataset_uuid must be a string, got {uuid!r}")
    elif uuid != dataset_uuid:
        problems.append(f"dataset_uuid is {uuid!r} but the file is named for {dataset_uuid!r}")
    annotations = document.get("metadata", {})
    if annotations is None:
        annotations = {}
    if not isinstance(annotations, dict) or not all(isinstance(k, str) for k in annotations):
        problems.append("metadata must be a map with string keys")
        annotations = {}
    partitions: dict[str, dict[str, str]] = {}
    explicit = "partitions" in document
    raw_partitions = document.get("partitions", {})
    if not isinstance(raw_partitions, dict):
        problems.append(f"partitions must be a map, got {type(raw_partitions).__name__}")
        raw_partitions = {}
    for label, partition in raw_partitions.items():
        if not isinstance(label, str):
            problems.append(f"partition label {label!r} is not a string")
            continue
        files = partition.get("files") if isinstance(partition, dict) else None
        if not _is_str_map(files):
            problems.append(f"partition {label!r}: 'files' must be a map of table name to storage key")
            continue
        partitions[label] = dict(files)
    keys = document.get("partition_keys")
    if keys is not None and (not isinstance(keys, list) or not all(isinstance(k, str) for k in keys)):
        problems.append(f"partition_keys must be a list of strings, got {keys!r}")
        keys = None
    if keys is not None and len(set(keys)) != len(keys):
        problems.append(f"partition_keys has duplicates: {keys!r}")
    indices: dict[str, str | dict[str, list[str]]] = {}
    raw_indices = document.get("indices", {}) or {}
    if not isinstance(raw_indices, dict):
        problems.append(f"indices must be a map, got {type(raw_indices).__name__}")
        raw_indices = {}
    for column, index in raw_indices.items():
        if not isinstance(column, str):
            problems.append(f"index column {column!r} is not a string")
        elif isinstance(index, str):
            indices[column] = index
        elif isinstance(index, dict) and all(
            isinstance(labels, list) and all(isinstance(label, str) for label in labels)
            for labels in index.values()
        ):
            indices[column] = {str(value): list(labels) for value, labels in index.items()}
        else:
            problems.append(f"index {column!r} must be a storage key or a map of value to partition labels")
    if problems:
        return None, problems
    if version not in SUPPORTED_METADATA_VERSIONS:
        raise KartothekUnsupportedError(
            f"{path}: dataset_metadata_version {version} is not supported "
            f"(supported: {', '.join(map(str, SUPPORTED_METADATA_VERSIONS))})"
        )
    return (
        KartothekMetadata(
            dataset_uuid=dataset_uuid,
            metadata_version=version,
            metadata_format=fmt,
            metadata_path=path,
            metadata_sha256=sha256,
            metadata=annotations,
            partitions=partitions,
            explicit_partitions=explicit,
            partition_keys=tuple(keys) if keys is not None else (),
            indices=indices,
        ),
        problems,
    )


def _derive_partitions(meta: KartothekMetadata, listing: list[str]) -> dict[str, dict[str, str]]:
    """Kartothek's implicit partitions: ``<uuid>/<table>/<k=v/...>/<name>.parquet`` keys,
    labelled ``<k=v/...>/<name>``."""
    partitions: dict[str, dict[str, str]] = {}
    prefix = meta.dataset_uuid + "/"
    for key in sorted(listing):
        if not key.startswith(prefix) or not key.endswith(PARQUET_SUFFIX) or key.endswith(INDEX_SUFFIX):
            continue
        parts = key.split("/")
        if len(parts) < 3 or parts[1] == "indices":
            continue
        label = "/".join(parts[2:])[: -len(PARQUET_SUFFIX)]
        partitions.setdefault(label, {})[parts[1]] = key
    return partitions


def _keys_from_first_partition(partitions: dict[str, dict[str, str]]) -> tuple[str, ...]:
    for files in partitions.values():
        for key in files.values():
            names = []
            for component in key.split("/")[2:-1]:
                pieces = component.split("=")
                if len(pieces) == 2:
                    try:
                        names.append(unquote_text(pieces[0]))
                    except ValueError:
                        return ()
            return tuple(names)
    return ()


def list_dataset_files(store: ObjectStore, dataset_uuid: str) -> dict[str, int]:
    """Every object under ``<uuid>/`` with its size (one listing call)."""
    return {info.path: info.size for info in store.list(dataset_uuid)}


def read_kartothek_metadata(
    store: ObjectStore, dataset_uuid: str, listing: dict[str, int] | None = None
) -> KartothekMetadata:
    """Read and parse the metadata of ``dataset_uuid``; derive partitions (from
    ``listing``, listed when not given) and partition keys when the file has none."""
    fmt, path, raw = read_raw_metadata(store, dataset_uuid)
    document = _decode(raw, fmt, path)
    meta, problems = parse_metadata(document, dataset_uuid, fmt, path, hashlib.sha256(raw).hexdigest())
    if meta is None:
        raise KartothekMetadataError(path, problems)
    partitions = meta.partitions
    if not meta.explicit_partitions:
        if listing is None:
            listing = list_dataset_files(store, dataset_uuid)
        partitions = _derive_partitions(meta, list(listing))
    keys = meta.partition_keys
    if "partition_keys" not in document or document.get("partition_keys") is None:
        keys = _keys_from_first_partition(partitions)
    return dataclasses.replace(meta, partitions=partitions, partition_keys=keys)

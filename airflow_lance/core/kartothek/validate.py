"""Open one table of a Kartothek dataset, checking it as the specification demands.

:func:`open_kartothek_table` reads the metadata file, lists the dataset's files
once, reads the table schema and the secondary indices, and (by default) the
footer of every payload file of the table. It collects every problem and
raises one :class:`KartothekValidationError` listing them all:

* names (dataset uuid, tables, payload files) use only ``A-Z a-z 0-9 + - _``;
* every partition has the same set of tables, with the same partition values;
* payload keys are ``<uuid>/<table>/<k>=<v>/.../<name>.parquet`` with the
  dataset's partition keys in order, and their values decode and parse as the
  column's type;
* every referenced file exists: payload files of all tables, each table's
  ``_common_metadata``, index files;
* payload files are Parquet with exactly the schema's columns (besides pandas
  index columns and partition columns), of admitted types.

Only then is anything read or written, so a broken source writes nothing.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_lance.core.errors import LanceError
from airflow_lance.core.kartothek.errors import KartothekError, KartothekFileError, KartothekValidationError
from airflow_lance.core.kartothek.metadata import (
    COMMON_METADATA,
    PARQUET_SUFFIX,
    KartothekMetadata,
    list_dataset_files,
    open_source_store,
    read_kartothek_metadata,
)
from airflow_lance.core.kartothek.partitions import parse_payload_key, partition_scalar, valid_name
from airflow_lance.core.kartothek.schema import (
    common_metadata_key,
    pandas_index_columns,
    payload_type_admitted,
    read_table_schema,
)
from airflow_lance.core.schema import LanceSchema
from airflow_lance.core.storage import ObjectStore

#: Footers read at once when checking payload files (object stores are latency bound).
FOOTER_READERS = 8


@dataclasses.dataclass(frozen=True)
class SecondaryIndexInfo:
    """A secondary index of the dataset: Kartothek's value -> partitions map of one column."""

    column: str
    #: Distinct values indexed.
    num_values: int
    #: Distinct partition labels the index points to.
    num_partitions: int
    #: Index file key, or None for an index embedded in the metadata file.
    storage_key: str | None
    value_type: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class PartitionSource:
    """One Kartothek partition of the table: its payload file and partition values."""

    label: str
    key: str
    #: (column, typed value) per partition key.
    values: tuple[tuple[str, pa.Scalar], ...]
    size: int | None


@dataclasses.dataclass(frozen=True)
class KartothekTable:
    """One validated table of a Kartothek dataset, ready to be read."""

    store_uri: str
    storage_options: Mapping[str, str] | None
    meta: KartothekMetadata
    table: str
    #: The table's data schema: partition columns first (typed), then payload columns.
    schema: pa.Schema
    partition_keys: tuple[str, ...]
    partitions: tuple[PartitionSource, ...]
    tables: tuple[str, ...]
    indices: tuple[SecondaryIndexInfo, ...]

    @property
    def dataset_uuid(self) -> str:
        return self.meta.dataset_uuid

    @property
    def payload_columns(self) -> list[str]:
        return [name for name in self.schema.names if name not in self.partition_keys]

    def open_store(self) -> ObjectStore:
        return open_source_store(self.store_uri, self.storage_options)


def _tables(meta: KartothekMetadata, listing: Mapping[str, int]) -> list[str]:
    if meta.partitions:
        found: dict[str, None] = {}
        for files in meta.partitions.values():
            found.update(dict.fromkeys(files))
        return list(found)
    prefix = meta.dataset_uuid + "/"
    found = {
        key.split("/")[1]
        for key in listing
        if key.startswith(prefix) and key.count("/") == 2 and key.endswith("/" + COMMON_METADATA)
    }
    return sorted(found)


def _exists(store: ObjectStore, key: str, listing: Mapping[str, int], dataset_uuid: str) -> bool:
    if key in listing:
        return True
    if key.startswith(dataset_uuid + "/"):
        return False  # the listing covers everything under <uuid>/
    return store.exists(key)


def _check_layout(
    store: ObjectStore, meta: KartothekMetadata, listing: Mapping[str, int], tables: list[str]
) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """Names, table sets, payload keys and file existence; returns (problems, parsed payload keys)."""
    uuid = meta.dataset_uuid
    problems: list[str] = []
    if not valid_name(uuid):
        problems.append(f"dataset uuid {uuid!r} has characters outside A-Z a-z 0-9 + - _")
    for table in tables:
        if not valid_name(table):
            problems.append(f"table name {table!r} has characters outside A-Z a-z 0-9 + - _")
        if not _exists(store, common_metadata_key(uuid, table), listing, uuid):
            problems.append(f"table {table!r}: schema file {common_metadata_key(uuid, table)} is missing")
    expected_tables = set(tables)
    parsed: dict[str, dict[str, Any]] = {}
    keys = list(meta.partition_keys)
    for label, files in meta.partitions.items():
        if set(files) != expected_tables:
            problems.append(f"partition {label!r} lacks tables {sorted(expected_tables - set(files))} "
                            "(all partitions must have the same tables)")
        seen_values = None
        for table, key in files.items():
            try:
                payload = parse_payload_key(key, uuid)
            except ValueError as exc:
                problems.append(f"partition {label!r}, table {table!r}: {exc}")
                continue
            if payload.table != table:
                problems.append(f"partition {label!r}: file {key!r} of table {table!r} lies under table "
                                f"{payload.table!r}")
            if not payload.file_name.endswith(PARQUET_SUFFIX):
                problems.append(f"partition {label!r}, table {table!r}: {key!r} is not a Parquet file "
                                "(only Parquet payloads are supported)")
            elif not valid_name(payload.file_name[: -len(PARQUET_SUFFIX)]):
                problems.append(f"partition {label!r}, table {table!r}: file name {payload.file_name!r} has "
                                "characters outside A-Z a-z 0-9 + - _")
            names = [name for name, _ in payload.values]
            if names != keys:
                problems.append(f"partition {label!r}, table {table!r}: path {key!r} has partition columns "
                                f"{names}, the dataset's partition keys are {keys}")
            if seen_values is not None and payload.values != seen_values:
                problems.append(f"partition {label!r}: tables disagree on the partition values")
            seen_values = payload.values
            if not _exists(store, key, listing, uuid):
                problems.append(f"partition {label!r}, table {table!r}: file {key} is missing")
            parsed.setdefault(label, {})[table] = payload
    for column, index in meta.indices.items():
        if isinstance(index, str) and not _exists(store, index, listing, uuid):
            problems.append(f"index {column!r}: file {index} is missing")
    return problems, parsed


def _partition_fields(
    meta: KartothekMetadata, schema: pa.Schema, problems: list[str], table: str
) -> list[pa.Field]:
    fields = []
    for key in meta.partition_keys:
        index = schema.get_field_index(key)
        if index >= 0:
            fields.append(schema.field(index))
        elif meta.metadata_version == 3:
            fields.append(pa.field(key, pa.string()))  # version 3: untyped partition columns are strings
        else:
            problems.append(f"table {table!r}: partition column {key!r} has no type in {COMMON_METADATA}")
    return fields


def _read_index(store: ObjectStore, column: str, index: str | dict[str, list[str]]) -> SecondaryIndexInfo:
    if isinstance(index, dict):
        labels = {label for values in index.values() for label in values}
        return SecondaryIndexInfo(column, len(index), len(labels), None, "string")
    with store.open_input(index) as source:
        try:
            data = pq.read_table(source)
        except (pa.ArrowException, OSError) as exc:
            raise KartothekFileError(index, f"not a Parquet index file: {exc}") from exc
    if column not in data.column_names or "partition" not in data.column_names:
        raise KartothekFileError(index, f"an index file needs columns {column!r} and 'partition', "
                                        f"has {data.column_names}")
    labels = pc.unique(data.column("partition").combine_chunks().flatten())
    return SecondaryIndexInfo(column, data.num_rows, len(labels), index, str(data.schema.field(column).type))


def _check_footer(
    store: ObjectStore, key: str, schema: pa.Schema, partition_keys: tuple[str, ...]
) -> list[str]:
    try:
        with store.open_input(key) as source:
            file_schema = pq.ParquetFile(source).schema_arrow
    except FileNotFoundError:
        return [f"file {key} is missing"]
    except (pa.ArrowException, OSError) as exc:
        return [f"file {key} is not readable Parquet: {exc}"]
    ignored = pandas_index_columns(file_schema) | set(partition_keys)
    present = {field.name: field.type for field in file_schema if field.name not in ignored}
    expected = {field.name: field.type for field in schema if field.name not in partition_keys}
    problems = []
    missing = sorted(set(expected) - set(present))
    extra = sorted(set(present) - set(expected))
    if missing:
        problems.append(f"file {key} lacks columns {missing}")
    if extra:
        problems.append(f"file {key} has columns {extra} that the table schema does not have")
    for name in sorted(set(expected) & set(present)):
        if not payload_type_admitted(present[name], expected[name]):
            problems.append(f"file {key}: column {name!r} is {present[name]}, the table schema says "
                            f"{expected[name]}")
    return problems


def open_kartothek_table(
    store_uri: str | os.PathLike[str],
    dataset_uuid: str,
    table: str = "table",
    *,
    storage_options: Mapping[str, str] | None = None,
    check_payload: bool = True,
) -> KartothekTable:
    """Read and validate ``table`` of dataset ``dataset_uuid`` in the storage location ``store_uri``.

    Raises KartothekDatasetNotFoundError, KartothekMetadataError (malformed
    metadata file), KartothekUnsupportedError (metadata version) or
    KartothekValidationError (listing every problem found). With
    ``check_payload`` the footer of each payload file of the table is read too.
    """
    store = open_source_store(store_uri, storage_options)
    listing = list_dataset_files(store, dataset_uuid)
    meta = read_kartothek_metadata(store, dataset_uuid, listing)
    tables = _tables(meta, listing)
    problems, parsed = _check_layout(store, meta, listing, tables)
    if table not in tables:
        problems.append(f"table {table!r} is not in the dataset (tables: {tables})")
        raise KartothekValidationError(dataset_uuid, problems)
    try:
        schema = read_table_schema(store, dataset_uuid, table)
    except FileNotFoundError:
        raise KartothekValidationError(dataset_uuid, problems) from None  # reported by _check_layout
    except KartothekError as exc:
        raise KartothekValidationError(dataset_uuid, [*problems, str(exc)]) from exc
    fields = _partition_fields(meta, schema, problems, table)
    payload_fields = [field for field in schema if field.name not in meta.partition_keys]
    full_schema = pa.schema(fields + payload_fields)
    try:
        LanceSchema.from_arrow(full_schema)
    except LanceError as exc:
        problems.append(f"table {table!r}: the schema cannot be stored in Lance: {exc}")
    partitions = []
    types = {field.name: field.type for field in fields}
    for label, by_table in parsed.items():
        payload = by_table.get(table)
        if payload is None:
            continue
        values = []
        for name, encoded in payload.values:
            if name not in types:
                continue
            try:
                values.append((name, partition_scalar(encoded, types[name])))
            except ValueError as exc:
                problems.append(f"partition {label!r}: value of {name!r}: {exc}")
        key = meta.partitions[label][table]
        partitions.append(PartitionSource(label, key, tuple(values), listing.get(key)))
    indices = []
    for column, index in meta.indices.items():
        try:
            indices.append(_read_index(store, column, index))
        except FileNotFoundError:
            pass  # reported by _check_layout
        except KartothekError as exc:
            problems.append(f"index {column!r}: {exc}")
    if check_payload and not problems:
        with concurrent.futures.ThreadPoolExecutor(max_workers=FOOTER_READERS) as pool:
            results = pool.map(
                lambda part: _check_footer(store, part.key, full_schema, meta.partition_keys), partitions
            )
            problems.extend(problem for found in results for problem in found)
    if problems:
        raise KartothekValidationError(dataset_uuid, problems)
    return KartothekTable(
        store_uri=os.fspath(store_uri),
        storage_options=dict(storage_options) if storage_options else None,
        meta=meta,
        table=table,
        schema=full_schema,
        partition_keys=meta.partition_keys,
        partitions=tuple(partitions),
        tables=tuple(tables),
        indices=tuple(indices),
    )

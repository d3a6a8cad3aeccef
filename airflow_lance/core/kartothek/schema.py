"""Table schemas: ``<uuid>/<table>/_common_metadata`` and the payload types it admits.

``_common_metadata`` is an empty Parquet file whose schema is the ground truth
of the table's types (Kartothek's type system): partition columns first, then
the payload columns. Its types are normalised (signed integers to int64,
unsigned to uint64, floats to float64, dictionaries to their values, inside
lists too). A payload file may use any type of the same class
(``norm(payload) == schema``) or ``null`` (an all-missing pandas column).
Columns pandas stored for its index (``__index_level_N__``, or named in the
``pandas`` metadata's ``index_columns``) are not data.
"""

from __future__ import annotations

import json
import re

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_lance.core.kartothek.errors import KartothekFileError
from airflow_lance.core.kartothek.metadata import COMMON_METADATA
from airflow_lance.core.storage import ObjectStore

_INDEX_LEVEL = re.compile(r"__index_level_\d+__")


def common_metadata_key(dataset_uuid: str, table: str) -> str:
    return f"{dataset_uuid}/{table}/{COMMON_METADATA}"


def pandas_index_columns(schema: pa.Schema) -> set[str]:
    """Columns that hold a pandas index, not data."""
    names = {name for name in schema.names if _INDEX_LEVEL.fullmatch(name)}
    raw = (schema.metadata or {}).get(b"pandas")
    if raw:
        try:
            pandas_meta = json.loads(raw)
        except ValueError:
            pandas_meta = {}
        for entry in pandas_meta.get("index_columns", []) if isinstance(pandas_meta, dict) else []:
            if isinstance(entry, str):
                names.add(entry)
    return names


def data_schema(schema: pa.Schema) -> pa.Schema:
    """The schema without pandas index columns and without the ``pandas`` metadata."""
    drop = pandas_index_columns(schema)
    return pa.schema([field for field in schema if field.name not in drop])


def read_table_schema(store: ObjectStore, dataset_uuid: str, table: str) -> pa.Schema:
    """The table's data schema from ``_common_metadata`` (FileNotFoundError if missing)."""
    key = common_metadata_key(dataset_uuid, table)
    with store.open_input(key) as source:
        try:
            schema = pq.read_schema(source)
        except (pa.ArrowException, OSError) as exc:
            raise KartothekFileError(key, f"not a Parquet schema file: {exc}") from exc
    return data_schema(schema)


def normalize_type(arrow_type: pa.DataType) -> pa.DataType:
    """Kartothek's type normalisation (its type system's table)."""
    if pa.types.is_dictionary(arrow_type):
        return normalize_type(arrow_type.value_type)
    if pa.types.is_signed_integer(arrow_type):
        return pa.int64()
    if pa.types.is_unsigned_integer(arrow_type):
        return pa.uint64()
    if pa.types.is_floating(arrow_type):
        return pa.float64()
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        item = arrow_type.value_field
        normalized = item.with_type(normalize_type(item.type))
        return pa.list_(normalized) if pa.types.is_list(arrow_type) else pa.large_list(normalized)
    return arrow_type


def _is_list(arrow_type: pa.DataType) -> bool:
    return pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)


def payload_type_admitted(payload: pa.DataType, schema: pa.DataType) -> bool:
    """Whether a payload column of type ``payload`` holds values of the schema's ``schema`` type:
    same type class, or ``null`` (also as a list item: a column of empty lists)."""
    if pa.types.is_null(payload):
        return True
    mine, theirs = normalize_type(payload), normalize_type(schema)
    if _is_list(mine) and _is_list(theirs):
        return pa.types.is_list(mine) == pa.types.is_list(theirs) and payload_type_admitted(
            mine.value_type, theirs.value_type
        )
    if mine == theirs:
        return True
    if pa.types.is_timestamp(mine) and pa.types.is_timestamp(theirs):
        return mine.tz == theirs.tz
    string_like = (pa.types.is_string, pa.types.is_large_string)
    binary_like = (pa.types.is_binary, pa.types.is_large_binary)
    return any(check(mine) for check in string_like) and any(check(theirs) for check in string_like) or any(
        check(mine) for check in binary_like
    ) and any(check(theirs) for check in binary_like)

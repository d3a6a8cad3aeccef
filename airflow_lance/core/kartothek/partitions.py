"""Partition paths: names, URL decoding, and typed partition values.

A payload file's storage key is ``<uuid>/<table>/<k1>=<v1>/.../<kN>=<vN>/<name>.parquet``
where column names and values are percent-encoded (UTF-8, ``+`` is not a
space). The payload files do not hold the partition columns: readers rebuild
them from the path with the type the table schema gives the column.
"""

from __future__ import annotations

import dataclasses
import re
from urllib.parse import unquote_to_bytes

import pyarrow as pa

#: Components of dataset uuids, table names and file names (the specification's character set).
NAME = re.compile(r"[A-Za-z0-9+\-_]+")
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


def valid_name(name: str) -> bool:
    return NAME.fullmatch(name) is not None


def unquote_bytes(text: str) -> bytes:
    """Percent-decode; a ``%`` not followed by two hex digits is an error."""
    if _BAD_PERCENT.search(text):
        raise ValueError(f"{text!r} has a '%' that is not a percent-encoded byte")
    return unquote_to_bytes(text)


def unquote_text(text: str) -> str:
    data = unquote_bytes(text)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{text!r} does not decode to UTF-8 text") from exc


@dataclasses.dataclass(frozen=True)
class PayloadKey:
    """A parsed payload storage key."""

    table: str
    #: (decoded column name, still-encoded value) per directory level.
    values: tuple[tuple[str, str], ...]
    file_name: str


def parse_payload_key(key: str, dataset_uuid: str) -> PayloadKey:
    """Split a payload key into table, partition values and file name (ValueError says why not)."""
    parts = key.split("/")
    if len(parts) < 3 or parts[0] != dataset_uuid:
        raise ValueError(f"{key!r} is not of the form '{dataset_uuid}/<table>/.../<file>'")
    values: list[tuple[str, str]] = []
    for component in parts[2:-1]:
        if "=" not in component and values:
            # Kartothek percent-encodes '=' but leaves '/' in a value as it is: a directory
            # without '=' continues the previous value ('p=a/b' is the value 'a/b').
            name, value = values.pop()
            values.append((name, f"{value}/{component}"))
            continue
        pieces = component.split("=")
        if len(pieces) != 2 or not pieces[0]:
            raise ValueError(f"{key!r}: directory {component!r} is not '<column>=<value>'")
        values.append((unquote_text(pieces[0]), pieces[1]))
    return PayloadKey(parts[1], tuple(values), parts[-1])


def _value_type(arrow_type: pa.DataType) -> pa.DataType:
    return arrow_type.value_type if pa.types.is_dictionary(arrow_type) else arrow_type


def partition_scalar(encoded: str, arrow_type: pa.DataType) -> pa.Scalar:
    """The typed value of an encoded partition value (ValueError if it is not one)."""
    target = _value_type(arrow_type)
    if pa.types.is_binary(target) or pa.types.is_large_binary(target) or pa.types.is_fixed_size_binary(target):
        data = unquote_bytes(encoded)
        try:
            return pa.scalar(data, target)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise ValueError(f"{data!r} is not a {target} value") from exc
    text = unquote_text(encoded)
    if pa.types.is_string(target) or pa.types.is_large_string(target):
        return pa.scalar(text, target)
    if pa.types.is_null(target) or pa.types.is_nested(target):
        raise ValueError(f"a partition column cannot be of type {target}")
    try:
        return pa.array([text], pa.string()).cast(target)[0]
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise ValueError(f"{text!r} is not a {target} value") from exc


def partition_column(value: pa.Scalar, arrow_type: pa.DataType, num_rows: int) -> pa.Array:
    """``num_rows`` copies of ``value`` as an array of ``arrow_type`` (no per-row Python)."""
    column = pa.repeat(value, num_rows)
    return column if column.type == arrow_type else column.cast(arrow_type)

"""Our legacy (0.1) writer -> our legacy reader (pylance checks these files in tests/interop/test_legacy_write.py)."""

from __future__ import annotations

import io
import struct

import numpy as np
import pyarrow as pa
import pytest

from airflow_lance.core._proto import file_pb2
from airflow_lance.core.errors import InvalidInputError, SchemaMismatchError
from airflow_lance.core.file import LanceFileReader
from airflow_lance.core.file.legacy_writer import LegacyFileWriter
from airflow_lance.core.schema import LanceSchema

from .test_roundtrip import ARRAYS


def _write(batches, schema: LanceSchema, **kwargs) -> bytes:
    sink = io.BytesIO()
    writer = LegacyFileWriter(sink, schema, **kwargs)
    for batch in batches:
        writer.write_batch(batch)
    assert writer.column_indices == [] and writer.file_version == (0, 2)
    assert writer.field_ids == schema.field_ids()
    assert writer.finish() == len(sink.getvalue())
    return sink.getvalue()


def _read(data: bytes, schema: LanceSchema | None = None) -> pa.Table:
    reader = LanceFileReader(pa.BufferReader(data), path="mem.lance")
    assert reader.version == (0, 2)
    return reader.read(schema)


def _batch_offsets(data: bytes) -> list[int]:
    (position,) = struct.unpack_from("<Q", data, len(data) - 16)
    (size,) = struct.unpack_from("<I", data, position)
    metadata = file_pb2.Metadata()
    metadata.ParseFromString(data[position + 4:position + 4 + size])
    return list(metadata.batch_offsets)


LEGACY_NAMES = [n for n in ARRAYS if n != "empty_struct"]


def test_every_type_reads_back_and_is_a_fixed_point():
    """Values read back as written where the format can hold them; writing what we read gives the same file."""
    table = pa.table({name: ARRAYS[name] for name in LEGACY_NAMES})
    schema = LanceSchema.from_arrow(table.schema)
    data = _write(table.to_batches(), schema)
    read = _read(data)
    for name in LEGACY_NAMES:
        column, original = read.column(name), table.column(name)
        valid = original.is_valid()
        if pa.types.is_nested(original.type):
            continue  # nested nulls read back as zero/empty values: see the pylance comparisons
        if original.type in (pa.string(), pa.large_string(), pa.binary(), pa.large_binary()):
            # an empty value of a nullable field reads as null (the only null the format has)
            empty = "" if "str" in str(original.type) else b""
            column, original = column.fill_null(empty), original.fill_null(empty)
        assert column.filter(valid).equals(original.filter(valid)), name
    assert _write(read.to_batches(), schema) == data


def test_rows_are_stored_in_batches_of_1024():
    n = 3000
    table = pa.table({"id": pa.array(np.arange(n)), "s": pa.array([str(i) for i in range(n)]),
                      "l": pa.array([[i] * (i % 3) for i in range(n)], pa.list_(pa.int32()))})
    schema = LanceSchema.from_arrow(table.schema)
    pieces = [table.slice(a, b - a).to_batches()[0] for a, b in [(0, 7), (7, 1500), (1500, 1501), (1501, 3000)]]
    data = _write(pieces, schema)
    assert _batch_offsets(data) == [0, 1024, 2048, 3000]
    assert _read(data).equals(table)
    assert _batch_offsets(_write(pieces, schema, group_rows=1000)) == [0, 1000, 2000, 3000]
    assert _read(data, schema.project(["l"])).equals(table.select(["l"]))


def test_dictionaries_are_rekeyed_or_refused():
    schema = LanceSchema.from_arrow(pa.schema([("d", pa.dictionary(pa.int32(), pa.string()))]))
    first = pa.record_batch({"d": pa.array(["a", "b"]).dictionary_encode()})
    second = pa.record_batch({"d": pa.array(["b", None, "a"]).dictionary_encode()})
    read = _read(_write([first, second], schema))
    assert read["d"].to_pylist() == ["a", "b", "b", "a", "a"]  # the null key is stored as key 0
    pinned = {0: pa.array(["z", "b", "a"])}
    assert _read(_write([first], schema, dictionaries=pinned))["d"].combine_chunks().dictionary.equals(pinned[0])
    with pytest.raises(SchemaMismatchError, match=r"\['c'\]"):
        _write([first, pa.record_batch({"d": pa.array(["c"]).dictionary_encode()})], schema)


def test_misuse_is_refused():
    schema = LanceSchema.from_arrow(pa.schema([("x", pa.int64())]))
    sink = io.BytesIO()
    writer = LegacyFileWriter(sink, schema)
    writer.write_batch(pa.record_batch({"x": [1]}))
    writer.finish()
    with pytest.raises(InvalidInputError, match="after finish"):
        writer.write_batch(pa.record_batch({"x": [2]}))
    with pytest.raises(InvalidInputError, match="group_rows"):
        LegacyFileWriter(sink, schema, group_rows=0)
    with pytest.raises(SchemaMismatchError):
        LegacyFileWriter(io.BytesIO(), schema).write_batch(pa.record_batch({"y": [1]}))

"""Helpers for the data-file tests: write/read in memory, pylance-written files."""

from __future__ import annotations

import io
import pathlib
import struct
from collections.abc import Callable, Iterable

import pyarrow as pa
import pytest

from airflow_lance.core._proto import table_pb2
from airflow_lance.core.file import LanceFileReader, LanceFileWriter
from airflow_lance.core.schema import LanceSchema


def _write(data: pa.Table | Iterable[pa.RecordBatch], schema: pa.Schema | LanceSchema | None = None,
           **kwargs) -> bytes:
    if schema is None:
        schema = data.schema
    lance_schema = schema if isinstance(schema, LanceSchema) else LanceSchema.from_arrow(schema)
    sink = io.BytesIO()
    writer = LanceFileWriter(sink, lance_schema, **kwargs)
    for batch in [data] if isinstance(data, pa.Table) else data:
        writer.write_batch(batch)
    size = writer.finish()
    assert size == len(sink.getvalue())
    return sink.getvalue()


def _read(data: bytes, schema: LanceSchema | None = None, **kwargs) -> pa.Table:
    return LanceFileReader(pa.BufferReader(data), path="mem.lance").read(schema, **kwargs)


@pytest.fixture
def write_file() -> Callable[..., bytes]:
    """``write_file(table_or_batches, schema=None, **writer_kwargs) -> bytes``."""
    return _write


@pytest.fixture
def read_file() -> Callable[..., pa.Table]:
    """``read_file(data, schema=None, column_index=None) -> pa.Table``."""
    return _read


def read_manifest(path: pathlib.Path) -> table_pb2.Manifest:
    """The latest manifest of a dataset written by pylance."""
    manifest_file = sorted((path / "_versions").glob("*.manifest"))[0]
    data = manifest_file.read_bytes()
    (pos,) = struct.unpack("<Q", data[-16:-8])
    (length,) = struct.unpack("<I", data[pos: pos + 4])
    manifest = table_pb2.Manifest()
    manifest.ParseFromString(data[pos + 4: pos + 4 + length])
    return manifest


@pytest.fixture
def pylance_file(tmp_path) -> Callable[..., tuple[pathlib.Path, pathlib.Path, table_pb2.DataFile, LanceSchema]]:
    """``pylance_file(table, **write_kwargs) -> (dataset dir, data file, DataFile, dataset LanceSchema)``.

    Writes a one-fragment pylance dataset with ``data_storage_version="2.0"``.
    """
    lance = pytest.importorskip("lance")
    counter = iter(range(1000))

    def make(table: pa.Table, **kwargs):
        path = tmp_path / f"ds{next(counter)}.lance"
        lance.write_dataset(table, str(path), data_storage_version="2.0", **kwargs)
        manifest = read_manifest(path)
        (fragment,) = manifest.fragments
        (data_file,) = fragment.files
        schema = LanceSchema.from_fields(manifest.fields, manifest.schema_metadata)
        return path, path / "data" / data_file.path, data_file, schema

    return make

"""Write one Lance file of an index (``_indices/{uuid}/{name}``) and report it as an ``IndexFile``.

Index files are ordinary Lance files in the dataset's data storage version (legacy datasets:
2.0, footer 0.3), as pylance 14 writes them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pyarrow as pa

from airflow_lance.core import layout
from airflow_lance.core._proto import table_pb2
from airflow_lance.core.file import LanceFileWriter
from airflow_lance.core.file.writer import FILE_VERSIONS
from airflow_lance.core.schema import LanceSchema
from airflow_lance.core.storage import ObjectStore


@dataclasses.dataclass
class IndexFileData:
    """What one index file holds: its rows, schema metadata and extra global buffers."""

    table: pa.Table
    metadata: dict[str, str] = dataclasses.field(default_factory=dict)
    global_buffers: Sequence[bytes] = ()


def index_file_version(data_storage_version: str) -> str:
    return data_storage_version if data_storage_version in FILE_VERSIONS else "2.0"


def write_index_file(
    store: ObjectStore, uuid: str, name: str, data: IndexFileData, version: str
) -> table_pb2.IndexFile:
    """Write ``data`` as ``_indices/{uuid}/{name}``; its global buffers go first (as 1, 2, ...)."""
    table, metadata, global_buffers = data.table, data.metadata, data.global_buffers
    schema = LanceSchema.from_arrow(table.schema.with_metadata({k: v for k, v in (metadata or {}).items()}))
    path = f"{layout.index_dir(uuid)}/{name}"
    with store.open_output(path) as sink:
        writer = LanceFileWriter(sink, schema, version=index_file_version(version))
        for data in global_buffers:
            writer.add_global_buffer(data)
        if table.num_rows:
            writer.write_batch(table)
        size = writer.finish()
    return table_pb2.IndexFile(path=name, size_bytes=size)

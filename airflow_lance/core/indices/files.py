"""Write one Lance file of an index (``_indices/{uuid}/{name}``) and report it as an ``IndexFile``.

Index files are ordinary Lance files in the dataset's data storage version (legacy datasets:
2.0, footer 0.3), as pylance 14 writes them.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from airflow_lance.core import layout
from airflow_lance.core._proto import table_pb2
from airflow_lance.core.file import LanceFileWriter
from airflow_lance.core.file.writer import FILE_VERSIONS
from airflow_lance.core.schema import LanceSchema
from airflow_lance.core.storage import ObjectStore


def index_file_version(data_storage_version: str) -> str:
    return data_storage_version if data_storage_version in FILE_VERSIONS else "2.0"


def write_index_file(
    store: ObjectStore, uuid: str, name: str, table: pa.Table, version: str,
    metadata: Mapping[str, str] | None = None,
) -> table_pb2.IndexFile:
    """Write ``table`` (with ``metadata`` as schema metadata) as ``_indices/{uuid}/{name}``."""
    schema = LanceSchema.from_arrow(table.schema.with_metadata({k: v for k, v in (metadata or {}).items()}))
    path = f"{layout.index_dir(uuid)}/{name}"
    with store.open_output(path) as sink:
        writer = LanceFileWriter(sink, schema, version=index_file_version(version))
        if table.num_rows:
            writer.write_batch(table)
        size = writer.finish()
    return table_pb2.IndexFile(path=name, size_bytes=size)

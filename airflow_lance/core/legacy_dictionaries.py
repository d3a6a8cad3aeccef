"""Dictionary values of legacy (0.1) datasets for the manifest of a new version.

Lance stores the values of a legacy dictionary column twice: in every data
file (its embedded schema) and in the manifest file of every version, in front
of the manifest's sections (``DictionaryValues``); pylance reads them from the
manifest. A commit that keeps the schema carries the values of the version it
builds on; a commit that replaces the data (``Overwrite``, or the first version)
takes them from the data files it commits, as pylance takes them from the data.
The data files a commit adds are checked to store the same values.
"""

from __future__ import annotations

import pyarrow as pa

from airflow_lance.core._proto import table_pb2
from airflow_lance.core.bases import data_file_location
from airflow_lance.core.errors import SchemaMismatchError
from airflow_lance.core.file.legacy import LegacyFile
from airflow_lance.core.manifest import (
    LEGACY_STORAGE_VERSION,
    DictionaryValues,
    ManifestFile,
    data_storage_version,
)
from airflow_lance.core.storage import ObjectStore
from airflow_lance.core.transaction import LanceOperation


def _stored_values(store: ObjectStore, data_file: table_pb2.DataFile, field_id: int) -> pa.Array | None:
    """The dictionary values of ``field_id`` stored in a legacy data file."""
    store, path = data_file_location(store, data_file)

    def read_range(offset: int, length: int) -> pa.Buffer:
        return pa.py_buffer(store.read_range(path, offset, length))

    return LegacyFile(read_range, store.size(path), path).stored_dictionary(field_id)


def manifest_dictionaries(
    store: ObjectStore,
    manifest: table_pb2.Manifest,
    base: ManifestFile | None,
    operation: LanceOperation.BaseOperation,
) -> dict[int, DictionaryValues]:
    """The dictionary values to write with ``manifest`` (whose ``Field.dictionary.length`` is set here).

    Every data file the commit adds must store the same values (a legacy dataset has one
    dictionary per column, which pylance reads from the manifest): ``SchemaMismatchError`` otherwise.
    """
    carried = {} if base is None or isinstance(operation, LanceOperation.Overwrite) else base.dictionaries
    if data_storage_version(manifest) != LEGACY_STORAGE_VERSION:
        return dict(carried)
    fields = [f for f in manifest.fields if f.logical_type.startswith("dict:")]
    if not fields:
        return {}
    known = {f.path for fragment in base.manifest.fragments for f in fragment.files} if base is not None else set()
    added = [f for fragment in manifest.fragments for f in fragment.files if f.path not in known]
    found: dict[int, DictionaryValues] = {}
    for field in fields:
        values = carried.get(field.id)
        if values is not None and values.logical_type != field.logical_type:
            values = None
        for data_file in added:
            if field.id not in data_file.fields:
                continue
            stored = _stored_values(store, data_file, field.id)
            if stored is None:
                continue
            if values is None:
                values = DictionaryValues.from_arrow(field.logical_type, stored)
            elif not stored.equals(values.to_arrow()):
                raise SchemaMismatchError(
                    f"data file {data_file.path} stores other dictionary values for field {field.name!r} than "
                    f"the dataset ({stored.to_pylist()[:10]} vs {values.to_arrow().to_pylist()[:10]}): a legacy "
                    "dataset has one dictionary per column")
        if values is None:
            field.ClearField("dictionary")
            continue
        found[field.id] = values
        field.dictionary.length = values.count
    return found

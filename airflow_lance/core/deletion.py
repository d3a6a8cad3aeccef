"""Deletion vectors: which row offsets of a fragment are deleted.

Two encodings exist: an Arrow IPC file with one ``row_id: uint32 not null``
column (``.arrow``, small sets) and a portable 32-bit roaring bitmap
(``.bin``, 5,000 rows or more). Readers accept either at any size.
"""

from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa
import pyroaring

from airflow_lance.core import layout
from airflow_lance.core.arrays import uint32_array
from airflow_lance.core.bases import deletion_location
from airflow_lance.core.errors import CorruptFileError, DataFileNotFoundError
from airflow_lance.core.fragment import DeletionFile
from airflow_lance.core.storage import ObjectStore

log = logging.getLogger(__name__)

ROW_ID_SCHEMA = pa.schema([pa.field("row_id", pa.uint32(), nullable=False)])
_FILE_TYPE_CODES = {"array": 0, "bitmap": 1}


def deletion_path(fragment_id: int, deletion: DeletionFile) -> str:
    """Path of a fragment's deletion file relative to the dataset root."""
    return layout.deletion_file_path(fragment_id, deletion.read_version, deletion.id, _FILE_TYPE_CODES[deletion.file_type])


def _decode_arrow(data: bytes, path: str) -> np.ndarray:
    try:
        table = pa.ipc.open_file(pa.py_buffer(data)).read_all()
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as exc:
        raise CorruptFileError(path, f"not an Arrow IPC file: {exc}") from exc
    if table.num_columns != 1 or table.schema.field(0).type != pa.uint32():
        raise CorruptFileError(path, f"unexpected deletion file schema {table.schema}")
    column = table.column(0)
    if column.null_count:
        raise CorruptFileError(path, "deletion file contains null row offsets")
    return column.to_numpy().astype(np.uint32, copy=False)


def _decode_bitmap(data: bytes, path: str) -> np.ndarray:
    try:
        bitmap = pyroaring.BitMap.deserialize(data)
    except (ValueError, OverflowError) as exc:
        raise CorruptFileError(path, f"not a roaring bitmap: {exc}") from exc
    return np.frombuffer(bitmap.to_array(), dtype=np.uint32)


def read_deletion_vector(store: ObjectStore, fragment_id: int, deletion: DeletionFile) -> np.ndarray:
    """Deleted row offsets (uint32, any order) of one fragment."""
    path = deletion_path(fragment_id, deletion)
    source, path = deletion_location(store, deletion, path)
    try:
        data = source.read(path)
    except FileNotFoundError as exc:
        raise DataFileNotFoundError(path, f"deletion file is missing from dataset {store.uri}"
                                    + (f" (base path {source.uri})" if source is not store else "")) from exc
    if deletion.file_type == "array":
        return _decode_arrow(data, path)
    if deletion.file_type == "bitmap":
        return _decode_bitmap(data, path)
    raise CorruptFileError(path, f"unknown deletion file type {deletion.file_type!r}")


def keep_mask(physical_rows: int, deleted: np.ndarray, path: str = "") -> np.ndarray:
    """Boolean mask of the rows that survive ``deleted``.

    Offsets past the fragment delete nothing, as in Lance (which tests each row of the fragment
    against the vector): pylance 0.2x with stable row ids wrote row ids of other fragments into
    deletion vectors, and pylance reads those datasets with the rows kept.
    """
    if deleted.size and int(deleted.max()) >= physical_rows:
        log.warning("%s: deletion vector names rows past the fragment's %d rows; they delete nothing",
                    path, physical_rows)
        deleted = deleted[deleted < physical_rows]
    mask = np.ones(physical_rows, dtype=bool)
    mask[deleted] = False
    return mask


#: From this many deleted rows on, a fragment's deletion vector is a roaring bitmap.
BITMAP_THRESHOLD = 5000


def _encode_arrow(deleted: np.ndarray) -> bytes:
    batch = pa.record_batch([pa.array(deleted, pa.uint32())], schema=ROW_ID_SCHEMA)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, ROW_ID_SCHEMA) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def _encode_bitmap(deleted: np.ndarray) -> bytes:
    return pyroaring.BitMap(uint32_array(deleted)).serialize()


def write_deletion_vector(
    store: ObjectStore, fragment_id: int, read_version: int, deleted: np.ndarray
) -> DeletionFile:
    """Write the deleted row offsets (unique, uint32) of one fragment; return its DeletionFile.

    Fewer than :data:`BITMAP_THRESHOLD` rows give an Arrow IPC file, more a roaring bitmap,
    as Lance does.
    """
    deleted = np.asarray(deleted, dtype=np.uint32)
    kind = "bitmap" if deleted.size >= BITMAP_THRESHOLD else "array"
    info = DeletionFile(
        read_version=read_version, id=layout.new_deletion_file_id(), file_type=kind, num_deleted_rows=int(deleted.size)
    )
    payload = _encode_bitmap(deleted) if kind == "bitmap" else _encode_arrow(deleted)
    store.write(deletion_path(fragment_id, info), payload)
    return info

"""Blob v2 columns (pylance 14's ``lance.blob.v2`` extension type, 2.2 files).

A blob field's logical type is ``struct<data: large_binary, uri: string, position: uint64,
size: uint64>`` (pylance's ``BlobType`` storage): a value is bytes (``data``) or a reference to
(a range of) an external object (``uri``, optionally ``position``/``size``). The data file stores
one column of descriptions instead, a 2.2 ``variable_packed_struct`` of

    kind u8, position u64, size u64, blob_id u32, blob_uri string

where ``kind`` says where the bytes are:

| kind | bytes | position, size |
|---|---|---|
| 0 inline | in the data file itself, each value 64-byte aligned | file offset, length |
| 1 packed | in the sidecar ``data/{stem}/{name(blob_id)}.blob`` shared by several values | offset in it, length |
| 2 dedicated | the whole sidecar ``data/{stem}/{name(blob_id)}.blob`` | 0, length |
| 3 external | the object at ``blob_uri`` | the range, or 0, 0 for all of it |

A value goes to a dedicated file above ``lance-encoding:blob-dedicated-size-threshold`` bytes
(4 MiB), else to a pack file above ``lance-encoding:blob-inline-size-threshold`` (64 KiB), else
inline; a pack file takes values until the next would bring it past
``lance-encoding:blob-pack-file-size-threshold`` (1 GiB). Blob ids count from 1 per data file, over
all its blob fields, in the order the files are started; ``name(id)`` is the id's 32 bits, lowest
first, as ``0``/``1`` characters. Reads give the logical type back: the bytes of stored values in
``data``, external references as ``uri`` (and their range), as pylance's ``take_blobs`` follows them.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_lance.core.arrays import sorted_unique
from airflow_lance.core.errors import (
    CorruptFileError,
    DataFileNotFoundError,
    InvalidInputError,
    UnsupportedFeatureError,
)
from airflow_lance.core.file.blob_bytes import gather_ranges
from airflow_lance.core.file.v21.util import exclusive_cumsum, take_ranges

EXTENSION_NAME = b"lance.blob.v2"
INLINE, PACKED, DEDICATED, EXTERNAL = 0, 1, 2, 3
DESCRIPTION = pa.struct([
    pa.field("kind", pa.uint8(), nullable=False),
    pa.field("position", pa.uint64()),
    pa.field("size", pa.uint64()),
    pa.field("blob_id", pa.uint32()),
    pa.field("blob_uri", pa.string()),
])
INLINE_KEY = "lance-encoding:blob-inline-size-threshold"
DEDICATED_KEY = "lance-encoding:blob-dedicated-size-threshold"
PACK_FILE_KEY = "lance-encoding:blob-pack-file-size-threshold"
DEFAULT_INLINE = 64 * 1024
DEFAULT_DEDICATED = 4 * 1024 * 1024
DEFAULT_PACK_FILE = 1 << 30
_ALIGNMENT = 64

#: Reads ``length`` bytes at ``offset`` of a sidecar (``length`` None: the whole object).
SidecarReader = Callable[[str, int, "int | None"], bytes]


def is_blob_v2(metadata: Mapping[str, bytes]) -> bool:
    return metadata.get("ARROW:extension:name") == EXTENSION_NAME


def sidecar_name(blob_id: int) -> str:
    """``{blob_id}``'s 32 bits, lowest first, and ``.blob``."""
    return f"{blob_id:032b}"[::-1] + ".blob"


@dataclasses.dataclass(frozen=True)
class Thresholds:
    inline: int = DEFAULT_INLINE
    dedicated: int = DEFAULT_DEDICATED
    pack_file: int = DEFAULT_PACK_FILE

    @classmethod
    def of(cls, name: str, metadata: Mapping[str, bytes]) -> Thresholds:
        """The field's thresholds (its metadata, else pylance's defaults); InvalidInputError if malformed."""
        values = {}
        for attribute, key in (("inline", INLINE_KEY), ("dedicated", DEDICATED_KEY), ("pack_file", PACK_FILE_KEY)):
            raw = metadata.get(key)
            if raw is None:
                continue
            try:
                values[attribute] = int(raw)
            except ValueError:
                raise InvalidInputError(f"field {name!r}: {key} must be a number of bytes, not {raw!r}") from None
            if values[attribute] < 0:
                raise InvalidInputError(f"field {name!r}: {key} must not be negative")
        return cls(**values)


# ---------------------------------------------------------------------------------------- reading


def _numbers(array: pa.Array, dtype: str) -> np.ndarray:
    return np.asarray(array.fill_null(0).to_numpy(zero_copy_only=False), dtype=dtype)


def resolve(descriptions: pa.StructArray, read_inline: Callable[[int, int], Any], file_size: int, path: str,
            read_sidecar: SidecarReader | None, dtype: pa.DataType) -> pa.StructArray:
    """The logical values (``dtype``: the field's storage struct) of blob v2 ``descriptions``."""
    n = len(descriptions)
    valid = np.asarray(descriptions.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    kind = _numbers(descriptions.field("kind"), "u1")
    position = _numbers(descriptions.field("position"), "u8")
    size = _numbers(descriptions.field("size"), "u8")
    blob_id = _numbers(descriptions.field("blob_id"), "u4")
    if bool(np.any(valid & (kind > EXTERNAL))):
        raise CorruptFileError(path, f"blob v2 description of unknown kind {int(kind[valid].max())}")
    groups: list[tuple[np.ndarray, pa.Array]] = []

    def add(rows: np.ndarray, data: np.ndarray, offsets: np.ndarray) -> None:
        groups.append((rows, pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), len(rows), [None, pa.py_buffer(offsets.astype(np.int64)), pa.py_buffer(data)])))

    rows = np.flatnonzero(valid & (kind == INLINE))
    if len(rows):
        add(rows, *gather_ranges(read_inline, file_size, path, position[rows], size[rows]))
    for stored in (PACKED, DEDICATED):
        chosen = np.flatnonzero(valid & (kind == stored))
        if not len(chosen):
            continue
        if read_sidecar is None:
            raise CorruptFileError(path, "blob values in sidecar files, which cannot be found from this file alone")
        for one in sorted_unique(blob_id[chosen]).tolist():
            rows = chosen[blob_id[chosen] == one]
            name = sidecar_name(one)
            if stored == PACKED:
                add(rows, *gather_ranges(lambda offset, length, name=name: read_sidecar(name, offset, length),
                                         None, f"{path} blob {name}", position[rows], size[rows]))
                continue
            data = np.frombuffer(read_sidecar(name, 0, None), dtype=np.uint8)
            if bool(np.any(size[rows] != len(data))):
                raise CorruptFileError(path, f"dedicated blob {name} has {len(data)} bytes, its description "
                                       f"says {int(size[rows][0])}")
            add(rows, np.tile(data, len(rows)), np.arange(len(rows) + 1, dtype=np.int64) * len(data))
    order = np.concatenate([r for r, _ in groups]) if groups else np.zeros(0, np.int64)
    where = np.full(n, -1, dtype=np.int64)
    where[order] = np.arange(len(order))
    combined = pa.concat_arrays([a for _, a in groups]) if groups else pa.array([], pa.large_binary())
    data = combined.take(pa.array(where, mask=where < 0))
    external = valid & (kind == EXTERNAL)
    if bool(np.any(external & (blob_id != 0))):
        raise UnsupportedFeatureError(f"{path}: external blobs relative to a registered base are not supported")
    uri = pc.if_else(pa.array(external), descriptions.field("blob_uri").cast(pa.string()),
                     pa.scalar(None, pa.string()))
    ranged = external & (size > 0)
    children = {"data": data, "uri": uri, "position": pa.array(position, mask=~ranged),
                "size": pa.array(size, mask=~ranged)}
    return pa.StructArray.from_arrays([children[f.name].cast(f.type) for f in dtype], fields=list(dtype),
                                      mask=pa.array(~valid))


# ---------------------------------------------------------------------------------------- writing


class SidecarWriter:
    """The sidecar files of one data file (``directory`` in ``store``): packed values appended to the
    current pack file, each dedicated value a file of its own, blob ids counted from 1."""

    def __init__(self, store: Any, directory: str) -> None:
        self.store = store
        self.directory = directory
        self.next_id = 1
        self._stack = contextlib.ExitStack()
        self._pack: BinaryIO | None = None
        self._pack_id = 0
        self._pack_size = 0

    def _new_id(self) -> int:
        blob_id, self.next_id = self.next_id, self.next_id + 1
        return blob_id

    def _close_pack(self) -> None:
        if self._pack is not None:
            self._stack.close()
            self._stack = contextlib.ExitStack()
            self._pack = None

    def pack(self, data: np.ndarray, lengths: np.ndarray, max_size: int) -> tuple[np.ndarray, np.ndarray]:
        """Append values (``lengths`` of them, back to back in ``data``); (blob ids, positions)."""
        ids = np.zeros(len(lengths), np.uint32)
        positions = np.zeros(len(lengths), np.uint64)
        ends = np.cumsum(lengths, dtype=np.int64)
        starts = ends - lengths
        i = 0
        while i < len(lengths):
            if self._pack is not None and self._pack_size + int(lengths[i]) > max_size:
                self._close_pack()
            if self._pack is None:
                self._pack_id, self._pack_size = self._new_id(), 0
                self._pack = self._stack.enter_context(
                    self.store.open_output(f"{self.directory}/{sidecar_name(self._pack_id)}"))
            # the values that fit (at least one: a value larger than a pack file gets one of its own)
            j = max(i + 1, int(np.searchsorted(ends, starts[i] + max_size - self._pack_size, side="right")))
            self._pack.write(memoryview(data[starts[i]:ends[j - 1]]))
            ids[i:j] = self._pack_id
            positions[i:j] = self._pack_size + (starts[i:j] - starts[i])
            self._pack_size += int(ends[j - 1] - starts[i])
            i = j
        return ids, positions

    def dedicated(self, data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Write each value to a file of its own; their blob ids."""
        ids = np.zeros(len(lengths), np.uint32)
        for k, (start, length) in enumerate(zip(starts.tolist(), lengths.tolist())):
            ids[k] = self._new_id()
            self.store.write(f"{self.directory}/{sidecar_name(int(ids[k]))}", data[start:start + length].tobytes())
        return ids

    def close(self) -> None:
        """Publish the open pack file."""
        self._close_pack()

    def abort(self) -> None:
        """Drop the open pack file unpublished."""
        self._stack.__exit__(RuntimeError, RuntimeError("aborted"), None)
        self._stack = contextlib.ExitStack()
        self._pack = None


def _binary(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(values bytes, offsets) of a large_binary array (nulls as empty)."""
    array = array.cast(pa.large_binary())
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int64)[array.offset:array.offset + len(array) + 1] \
        if len(array) else np.zeros(1, np.int64)
    data = array.buffers()[2]
    values = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    return values, offsets


def describe(values: pa.StructArray, name: str, thresholds: Thresholds,
             write_inline: Callable[[list], tuple[int, int]], sidecars: SidecarWriter | None) -> pa.StructArray:
    """Store the bytes of blob ``values`` (the logical struct) as pylance does; their descriptions.

    ``write_inline`` writes one aligned buffer to the data file and returns its (position, size).
    InvalidInputError for a value that is not exactly one of bytes and a reference."""
    n = len(values)
    valid = np.asarray(values.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    data, uri = values.field("data"), values.field("uri")
    has_data = valid & np.asarray(data.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    has_uri = valid & np.asarray(uri.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    if bool(np.any(has_data & has_uri)):
        raise InvalidInputError(f"blob field {name!r}: a value has both data and a uri")
    if bool(np.any(valid & ~has_data & ~has_uri)):
        raise InvalidInputError(f"blob field {name!r}: a value has neither data nor a uri (use a null blob)")
    names = [f.name for f in values.type]
    ranged = np.zeros(n, dtype=bool)
    position = np.zeros(n, np.uint64)
    size = np.zeros(n, np.uint64)
    if "position" in names and "size" in names:
        given_position = values.field("position")
        given_size = values.field("size")
        has_position = valid & np.asarray(given_position.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        has_size = valid & np.asarray(given_size.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        if bool(np.any(has_position != has_size)) or bool(np.any(has_position & ~has_uri)):
            raise InvalidInputError(f"blob field {name!r}: position and size select a range of a uri, both or none")
        ranged = has_position
        position = np.where(ranged, _numbers(given_position, "u8"), 0).astype(np.uint64)
        size = np.where(ranged, _numbers(given_size, "u8"), 0).astype(np.uint64)
        if bool(np.any(ranged & (size == 0))):
            raise InvalidInputError(f"blob field {name!r}: an external range must have a size above 0")
    uris = pc.fill_null(uri.cast(pa.string()), "")
    absolute = np.asarray(pc.match_substring(uris, "://").to_numpy(zero_copy_only=False), dtype=bool)
    if bool(np.any(has_uri & ~absolute)):
        raise InvalidInputError(f"blob field {name!r}: external blob uris must be absolute URIs (scheme://...)")
    bytes_, offsets = _binary(data)
    lengths = np.where(has_data, np.diff(offsets), 0).astype(np.int64)
    kind = np.full(n, INLINE, np.uint8)
    blob_id = np.zeros(n, np.uint32)
    dedicated = has_data & (lengths > thresholds.dedicated)
    packed = has_data & ~dedicated & (lengths > thresholds.inline)
    inline = has_data & ~dedicated & ~packed & (lengths > 0)
    if bool(np.any(packed | dedicated)) and sidecars is None:
        raise InvalidInputError(f"blob field {name!r}: values above {thresholds.inline} bytes go to sidecar files, "
                                "which only a dataset write can create")
    kind[packed], kind[dedicated], kind[has_uri] = PACKED, DEDICATED, EXTERNAL
    size[has_data] = lengths[has_data]
    rows = np.flatnonzero(inline)
    if len(rows):  # each value at a 64-byte boundary of one buffer
        padded = -(-lengths[rows] // _ALIGNMENT) * _ALIGNMENT
        at = exclusive_cumsum(padded)
        source = take_ranges(bytes_, offsets[rows], lengths[rows])
        out = np.zeros(int(at[-1]), np.uint8)
        out[np.arange(len(source)) + np.repeat(at[:-1] - exclusive_cumsum(lengths[rows])[:-1], lengths[rows])] = source
        start = write_inline([pa.py_buffer(out)])[0]
        position[rows] = start + at[:-1]
    rows = np.flatnonzero(packed)
    if len(rows):
        blob_id[rows], position[rows] = sidecars.pack(take_ranges(bytes_, offsets[rows], lengths[rows]),
                                                      lengths[rows], thresholds.pack_file)
    rows = np.flatnonzero(dedicated)
    if len(rows):
        blob_id[rows] = sidecars.dedicated(bytes_, offsets[rows], lengths[rows])
    return pa.StructArray.from_arrays(
        [pa.array(kind), pa.array(position), pa.array(size), pa.array(blob_id),
         pc.if_else(pa.array(has_uri), uris, "")],
        fields=list(DESCRIPTION), mask=pa.array(~valid))


def read_sidecars(store: Any, directory: str, path: str) -> SidecarReader:
    """Reads of the sidecar files in ``directory`` of ``store`` (those of the data file ``path``)."""

    def read(name: str, offset: int, length: int | None) -> bytes:
        where = f"{directory}/{name}"
        try:
            return store.read(where) if length is None else store.read_range(where, offset, length)
        except FileNotFoundError as exc:
            raise DataFileNotFoundError(where, f"blob file of {path} is missing from {store.uri}") from exc

    return read


# ------------------------------------------------------------------- 'lance-encoding:blob' in 2.2

V1_KEY = "lance-encoding:blob"
_V1_CHILDREN = [pa.field("data", pa.large_binary()), pa.field("uri", pa.string())]
_ALL_CHILDREN = [*_V1_CHILDREN, pa.field("position", pa.uint64()), pa.field("size", pa.uint64())]


def _is_v1(field: pa.Field) -> bool:
    value = (field.metadata or {}).get(V1_KEY.encode())
    return value is not None and value.lower() not in (b"false", b"0", b"no") \
        and pa.types.is_large_binary(field.type)


def convert_v1(schema: pa.Schema, batches: Any, existing: Mapping[str, pa.DataType] | None = None
               ) -> tuple[pa.Schema, Any]:
    """pylance 14 stores a top-level ``lance-encoding:blob`` large_binary field of a 2.2 dataset as a
    blob v2 column of ``struct<data, uri>`` (the values as ``data``), and appends such a field to
    a blob v2 column: (the schema, the batches) with those fields so converted. ``existing``: the
    dataset's storage types by field name (an append takes its blob struct's children)."""
    chosen = [i for i, field in enumerate(schema) if _is_v1(field)]
    if not chosen:
        return schema, batches
    fields = list(schema)
    for i in chosen:
        field = fields[i]
        target = (existing or {}).get(field.name)
        children = list(target) if target is not None and pa.types.is_struct(target) else _V1_CHILDREN
        metadata = {k: v for k, v in (field.metadata or {}).items() if k != V1_KEY.encode()}
        metadata[b"ARROW:extension:name"] = EXTENSION_NAME
        fields[i] = pa.field(field.name, pa.struct(children), field.nullable, metadata)
    converted = pa.schema(fields, metadata=schema.metadata)

    def convert(batch: pa.RecordBatch) -> pa.RecordBatch:
        columns = list(batch.columns)
        for i in chosen:
            values = columns[i]
            children = [values if f.name == "data" else pa.nulls(len(values), f.type) for f in converted.field(i).type]
            columns[i] = pa.StructArray.from_arrays(children, fields=list(converted.field(i).type),
                                                    mask=values.is_null())
        return pa.RecordBatch.from_arrays(columns, schema=converted)

    return converted, (convert(batch) for batch in batches)

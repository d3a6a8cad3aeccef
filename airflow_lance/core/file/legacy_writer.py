"""Writer of legacy (format 0.1, file version 0.2) Lance data files, as pylance 14 writes them.

The mirror of :mod:`~airflow_lance.core.file.legacy` (its docstring has the layout)::

    writer = LegacyFileWriter(sink, schema, dictionaries={field_id: values})
    writer.write_batch(batch)      # any number of times; rows are grouped into batches of 1024
    size = writer.finish()         # page table, dictionary values, manifest, metadata, footer
    writer.field_ids, writer.column_indices, writer.file_version   # for DataFile: all ids, [], (0, 2)
    writer.dictionaries            # the dictionary values written, by field id

Rows are written in on-disk batches of ``group_rows`` (1024, pylance's
``max_rows_per_group``), each batch field by field in schema order (pre-order,
a list's positions before its items, a struct only through its children), pages
back to back without padding:

* fixed-width values (integers, floats incl. half, decimals, temporal types,
  fixed-size binary; fixed-size lists as their items): the values; booleans
  LSB-first bits;
* strings/binaries: the value bytes, then ``length + 1`` i64 absolute file
  positions (the page starts at the positions);
* lists: ``length + 1`` i32 (large: i64) positions into the item page of the
  batch (page length ``length + 1``), then the items;
* dictionaries: the keys; the values once per file after the page table
  (``Field.dictionary`` of the embedded manifest points at them);
* the null type: an empty page that only has a length.

Legacy files store no validity. As pylance does, the bytes under a null value
are written as the Arrow buffers hold them (zero, an empty string or list for
arrays pyarrow builds from Python values; pylance reads them back as such, an
empty string of a nullable field as null), booleans as false. Unlike pylance, this writer stores
no per-batch statistics (``Metadata.statistics``; pylance only uses them to skip
batches in filtered scans of legacy files and reads files without them).

Dictionary columns: every batch of the file is stored against one dictionary,
``dictionaries[field_id]`` when given (the dataset's), else the first batch's.
Batches with another dictionary are re-keyed onto it (pylance writes their keys
unchanged, against the wrong values); a value the file's dictionary lacks raises
``SchemaMismatchError``. :func:`check_dictionaries` is pylance's append check
(the data's dictionary must equal the dataset's) for the first batch.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import airflow_lance
from airflow_lance.core import jsonb
from airflow_lance.core._proto import file_pb2, table_pb2
from airflow_lance.core.errors import InvalidInputError, SchemaMismatchError, UnsupportedFeatureError
from airflow_lance.core.schema import LanceSchema, storage_type

#: Rows per on-disk batch (pylance's ``max_rows_per_group``).
GROUP_ROWS = 1024
#: ``DataFile`` (major, minor) of a legacy file.
LEGACY_FILE_VERSION = (0, 2)
#: ``data_format.version`` of legacy (0.1/0.2 file) datasets, as Lance names it.
LEGACY_STORAGE_VERSION = "0.1"
_FOOTER = struct.Struct("<QHH4s")
_LEN = struct.Struct("<I")
_VARIABLE = (pa.string(), pa.binary(), pa.large_string(), pa.large_binary())


def check_legacy_layouts(schema: LanceSchema) -> None:
    """Refuse, before anything is written, what legacy files do not hold here: JSON inside lists
    (pylance 14 writes it but cannot read it back: "column types must match schema types"). JSON
    elsewhere is written as pylance writes it, JSONB bytes; other extension types are refused when
    written, as by pylance."""
    for field in schema.to_arrow():
        if _json_in_list(field.type):
            raise UnsupportedFeatureError(f"field {field.name!r}: JSON inside lists in legacy data files "
                                          "(pylance 14 cannot read them back)")


def _json_in_list(dtype: pa.DataType, in_list: bool = False) -> bool:
    if jsonb.is_json(dtype):
        return in_list
    if pa.types.is_struct(dtype):
        return any(_json_in_list(f.type, in_list) for f in dtype)
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype) or pa.types.is_fixed_size_list(dtype):
        return _json_in_list(dtype.value_type, True)
    return False


def _valid(array: pa.Array) -> np.ndarray | None:
    if not array.null_count:
        return None
    return np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def _width(dtype: pa.DataType) -> int:
    if pa.types.is_fixed_size_binary(dtype):
        return dtype.byte_width
    if pa.types.is_primitive(dtype) or pa.types.is_decimal(dtype):
        return dtype.bit_width // 8
    raise UnsupportedFeatureError(f"legacy data files cannot store {dtype}")


def fixed_bytes(array: pa.Array) -> bytes | np.ndarray:
    """The PLAIN page of a fixed-width array: its value bytes as they are, booleans as bits (nulls false)."""
    dtype = array.type
    n = len(array)
    if pa.types.is_fixed_size_list(dtype):
        return fixed_bytes(array.values.slice(array.offset * dtype.list_size, n * dtype.list_size))
    buffer = array.buffers()[1]
    if pa.types.is_boolean(dtype):
        if n == 0:
            return b""
        raw = np.frombuffer(buffer, np.uint8, (array.offset + n + 7) // 8)
        bits = np.unpackbits(raw, bitorder="little")[array.offset:array.offset + n]
        valid = _valid(array)
        if valid is not None:
            bits = bits & valid
        return np.packbits(bits, bitorder="little")
    width = _width(dtype)
    if n == 0:
        return b""
    return np.frombuffer(buffer, np.uint8, n * width, array.offset * width)


def _offsets(array: pa.Array, large: bool) -> np.ndarray:
    width = 8 if large else 4
    return np.frombuffer(array.buffers()[1], f"<i{width}", len(array) + 1, array.offset * width)


def binary_parts(array: pa.Array) -> tuple[bytes | np.ndarray, np.ndarray]:
    """(value bytes, value offsets from 0) of a string/binary array, as its buffers hold them."""
    large = pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type)
    offsets = _offsets(array, large).astype(np.int64)
    start, stop = int(offsets[0]), int(offsets[-1])
    data = array.buffers()[2]
    payload = np.frombuffer(data, np.uint8, stop - start, start) if stop > start else b""
    return payload, offsets - start


def _stored(values: pa.Array) -> pa.Array:
    """Dictionary values as a legacy file stores them: a null string is an empty one."""
    if values.null_count and values.type in _VARIABLE:
        empty = b"" if pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type) else ""
        return pc.fill_null(values, empty)
    return values


def _same(a: pa.Array, b: pa.Array) -> bool:
    return a.type == b.type and _stored(a).equals(_stored(b))


def check_dictionaries(batch: pa.RecordBatch, schema: LanceSchema, pinned: Mapping[int, pa.Array]) -> None:
    """pylance's append check: each top-level dictionary column's values equal the dataset's."""
    for field, column in zip(schema.top_level(), batch.columns):
        values = pinned.get(field.id)
        if values is not None and pa.types.is_dictionary(column.type) and not _same(column.dictionary, values):
            raise SchemaMismatchError(
                f"Append with different schema: dictionary for `{field.name}` did not match expected dictionary "
                f"(a legacy dataset stores one dictionary per column: {values.to_pylist()[:10]})")


class LegacyFileWriter:
    """Streaming writer of one legacy data file (see module docstring)."""

    def __init__(self, sink: BinaryIO, schema: LanceSchema, *, dictionaries: Mapping[int, pa.Array] | None = None,
                 group_rows: int = GROUP_ROWS) -> None:
        if group_rows <= 0:
            raise InvalidInputError(f"group_rows must be positive, got {group_rows}")
        if not schema.fields:
            raise InvalidInputError("cannot write a legacy data file without fields")
        self.schema = schema
        self.group_rows = group_rows
        self.dictionaries: dict[int, pa.Array] = dict(dictionaries or {})
        self._arrow_schema = schema.to_arrow()
        check_legacy_layouts(schema)
        self._stored_schema = pa.schema([f.with_type(storage_type(f.type, only_json=True)) for f in self._arrow_schema])
        self._sink = sink
        self._position = 0
        self._num_rows = 0
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._pages: dict[int, list[tuple[int, int]]] = {}
        self._batch_offsets = [0]
        self._finished = False
        self._failed = False

    # ------------------------------------------------------------------ public API

    @property
    def num_rows(self) -> int:
        """Rows taken so far (written or buffered)."""
        return self._num_rows

    @property
    def bytes_written(self) -> int:
        """Bytes handed to the sink plus the Arrow size of the buffered rows."""
        return self._position + sum(b.nbytes for b in self._pending)

    @property
    def field_ids(self) -> list[int]:
        """``DataFile.fields``: every field id, parents included, in pre-order."""
        return self.schema.field_ids()

    @property
    def column_indices(self) -> list[int]:
        """``DataFile.column_indices``: empty for legacy files."""
        return []

    @property
    def file_version(self) -> tuple[int, int]:
        return LEGACY_FILE_VERSION

    def write_batch(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Take rows (aligned to the schema); full groups of ``group_rows`` are written at once."""
        self._check_usable("write_batch")
        if batch.num_rows == 0:
            return
        if not batch.schema.equals(self._arrow_schema):
            batch = self.schema.align(batch)
        if not self._stored_schema.equals(self._arrow_schema):
            columns = [jsonb.to_storage(c, f.type, own.type) for c, f, own
                       in zip(batch.columns, self._stored_schema, batch.schema)]
            batch = (pa.Table if isinstance(batch, pa.Table) else pa.RecordBatch).from_arrays(
                columns, schema=self._stored_schema)
        try:
            for piece in batch.to_batches() if isinstance(batch, pa.Table) else [batch]:
                piece = self._rekey(piece)
                self._pending.append(piece)
                self._pending_rows += piece.num_rows
                self._num_rows += piece.num_rows
                while self._pending_rows >= self.group_rows:
                    self._write_group(self.group_rows)
        except BaseException:
            self._failed = True
            raise

    def finish(self) -> int:
        """Write the last group, page table, dictionary values, manifest, metadata, footer; return the size."""
        self._check_usable("finish")
        self._finished = True
        if self._pending_rows:
            self._write_group(self._pending_rows)
        page_table_position = self._position
        self._write(self._page_table())
        fields = [file_pb2.Field() for _ in self.schema.fields]
        for proto, field in zip(fields, self.schema.fields):
            proto.CopyFrom(field)
            proto.ClearField("dictionary")
            values = self.dictionaries.get(field.id)
            if values is not None:
                proto.dictionary.offset = self._write_values(values)
                proto.dictionary.length = len(values)
        manifest = table_pb2.Manifest(fields=fields, version=1)
        for key, value in self.schema.metadata.items():
            manifest.schema_metadata[key] = value
        manifest.writer_version.library = "airflow-lance"
        manifest.writer_version.version = airflow_lance.__version__
        manifest.data_format.file_format = "lance"
        manifest.data_format.version = LEGACY_STORAGE_VERSION
        manifest_position = self._message(manifest)
        metadata = file_pb2.Metadata(batch_offsets=self._batch_offsets, page_table_position=page_table_position,
                                     manifest_position=manifest_position)
        metadata_position = self._message(metadata)
        self._write(_FOOTER.pack(metadata_position, *LEGACY_FILE_VERSION, b"LANC"))
        return self._position

    def _check_usable(self, operation: str) -> None:
        if self._failed:
            raise InvalidInputError(f"{operation}() after a failed write_batch(): discard this file")
        if self._finished:
            raise InvalidInputError(f"{operation}() after finish()")

    # ------------------------------------------------------------------ dictionaries

    def _rekey(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Store every top-level dictionary column against the file's dictionary (see module docstring)."""
        columns = list(batch.columns)
        changed = False
        for index, (field, column) in enumerate(zip(self.schema.top_level(), columns)):
            if not pa.types.is_dictionary(column.type):
                continue
            values = self.dictionaries.setdefault(field.id, column.dictionary)
            if _same(column.dictionary, values):
                continue
            mapping = pc.index_in(_stored(column.dictionary), value_set=_stored(values))
            keys = mapping.take(column.indices)
            lost = pc.and_(pc.is_null(keys), column.indices.is_valid())
            if pc.any(lost).as_py():
                missing = pc.filter(column.dictionary.take(column.indices), lost).unique().to_pylist()[:10]
                raise SchemaMismatchError(
                    f"column {field.name!r}: values {missing} are not in the dictionary of this legacy file "
                    f"({values.to_pylist()[:10]}); a legacy dataset stores one dictionary per column")
            columns[index] = pa.DictionaryArray.from_arrays(keys.cast(column.type.index_type), values)
            changed = True
        return pa.RecordBatch.from_arrays(columns, schema=batch.schema) if changed else batch

    def _check_nested_dictionary(self, field: file_pb2.Field, array: pa.DictionaryArray) -> None:
        values = self.dictionaries.setdefault(field.id, array.dictionary)
        if not _same(array.dictionary, values):
            raise UnsupportedFeatureError(
                f"field {field.name!r}: nested dictionary columns with differing dictionaries in a legacy file")

    # ------------------------------------------------------------------ pages

    def _write_group(self, rows: int) -> None:
        taken, remaining, count = [], [], 0
        for piece in self._pending:
            if count >= rows:
                remaining.append(piece)
            elif count + piece.num_rows <= rows:
                taken.append(piece)
            else:
                cut = rows - count
                taken.append(piece.slice(0, cut))
                remaining.append(piece.slice(cut))
            count += piece.num_rows
        self._pending, self._pending_rows = remaining, self._pending_rows - rows
        group = taken[0] if len(taken) == 1 else pa.concat_batches(taken)
        for field, column in zip(self.schema.top_level(), group.columns):
            self._write_field(field, column)
        self._batch_offsets.append(self._batch_offsets[-1] + rows)

    def _page(self, field: file_pb2.Field, position: int, length: int) -> None:
        self._pages.setdefault(field.id, []).append((position, length))

    def _write_field(self, field: file_pb2.Field, array: pa.Array) -> None:
        dtype = array.type
        if pa.types.is_null(dtype):
            self._page(field, self._position, len(array))
        elif pa.types.is_struct(dtype):
            children = [array.field(i) for i in range(array.type.num_fields)]  # offset applied, own validity
            for child, child_array in zip(self.schema.children(field.id), children):
                self._write_field(child, child_array)
        elif pa.types.is_dictionary(dtype):
            self._check_nested_dictionary(field, array)
            self._page(field, self._position, len(array))
            self._write(fixed_bytes(array.indices))
        elif dtype in _VARIABLE:
            payload, offsets = binary_parts(array)
            self._write(payload)
            position = self._position
            self._write((offsets + (position - len(payload))).astype("<i8"))
            self._page(field, position, len(array))
        elif pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
            large = pa.types.is_large_list(dtype)
            offsets = _offsets(array, large).astype(np.int64)
            start = int(offsets[0])
            self._page(field, self._position, len(array) + 1)
            self._write((offsets - start).astype("<i8" if large else "<i4"))
            (child,) = self.schema.children(field.id)
            self._write_field(child, array.values.slice(start, int(offsets[-1]) - start))
        else:
            self._page(field, self._position, len(array))
            self._write(fixed_bytes(array))

    def _write_values(self, values: pa.Array) -> int:
        """Dictionary values (numbers plainly, strings as bytes + positions); returns ``Dictionary.offset``."""
        if values.type in _VARIABLE:
            payload, offsets = binary_parts(values)
            self._write(payload)
            position = self._position
            self._write((offsets + (position - len(payload))).astype("<i8"))
            return position
        if pa.types.is_boolean(values.type) or not (pa.types.is_primitive(values.type)
                                                     or pa.types.is_decimal(values.type)):
            raise UnsupportedFeatureError(f"legacy dictionaries of {values.type} values")
        position = self._position
        self._write(fixed_bytes(values))
        return position

    def _page_table(self) -> bytes:
        """(position, length) per (field, batch) for fields min_id..max paged id; (0, 0) where none."""
        ids = self.schema.field_ids()
        low = min(ids)
        high = max(self._pages, default=max(ids))
        batches = len(self._batch_offsets) - 1
        table = np.zeros((high - low + 1, batches, 2), dtype="<i8")
        for field_id, pages in self._pages.items():
            table[field_id - low] = pages
        return table.tobytes()

    # ------------------------------------------------------------------ output

    def _message(self, message) -> int:
        body = message.SerializeToString()
        position = self._position
        self._write(_LEN.pack(len(body)) + body)
        return position

    def _write(self, data: bytes | np.ndarray) -> None:
        if isinstance(data, np.ndarray):
            data = data.tobytes() if not data.flags.c_contiguous else memoryview(data).cast("B")
        if len(data):
            self._sink.write(data)
            self._position += len(data)

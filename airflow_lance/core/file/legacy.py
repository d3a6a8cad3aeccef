"""Reader of legacy (format 0.1, file version 0.2) Lance data files.

Layout (format notes 6.5)::

    [pages ...]                 batch by batch, field by field
    [page table]                i64 (position, length) per (field, batch), fields
                                min_id..max_id in order, batches inner
    [u32 size][Manifest]        the file's own schema (and dictionary values)
    [u32 size][Metadata]        batch_offsets (cumulative rows), page table position
    [u64 metadata position][u16 0][u16 2]["LANC"]

Pages per field type (``length`` = values in the batch):

* fixed-width values (PLAIN): ``length`` values back to back (booleans as
  LSB-first bits, fixed-size lists as their items);
* strings/binary (VAR_BINARY): ``length + 1`` i64 absolute file positions of
  the values; the bytes lie between the first and the last position;
* lists: ``length + 1`` i32 (large: i64) positions into the item field's
  page of the same batch;
* dictionary: the keys (PLAIN); the values are stored elsewhere in the file
  (``Field.dictionary`` of the embedded manifest: ``length`` i64 positions at
  ``offset`` + their bytes);
* structs have no page (children only), the null type only a length.

Legacy files store no validity. As pylance reads them: primitive, boolean,
fixed-size-list and list nulls come back as zero / false / empty values; an
empty string or binary of a nullable field comes back as null (the only way
the format marks a null); structs are always valid.

Every column is decoded for all batches at once: page ranges come from the
page table as arrays and are gathered with ``take_ranges``; file bytes are
read with coalesced range requests.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import numpy as np
import pyarrow as pa
from google.protobuf.message import DecodeError

from airflow_lance.core import jsonb
from airflow_lance.core._proto import file_pb2, table_pb2
from airflow_lance.core.errors import CorruptFileError, InvalidInputError, UnsupportedFeatureError
from airflow_lance.core.file.v21.blocks import Fixed, Variable, to_arrow
from airflow_lance.core.file.v21.util import Ctx, exclusive_cumsum, take_ranges
from airflow_lance.core.schema import LanceSchema, storage_type

_LEGACY_FOOTER = struct.Struct("<QHH4s")
#: Ranges closer than this are fetched with one request.
_GAP = 256 * 1024
_VARIABLE = (pa.string(), pa.binary(), pa.large_string(), pa.large_binary())


def _fixed_width_bits(dtype: pa.DataType) -> int | None:
    if pa.types.is_fixed_size_binary(dtype):
        return dtype.byte_width * 8
    if pa.types.is_boolean(dtype) or pa.types.is_primitive(dtype) or pa.types.is_decimal(dtype):
        return dtype.bit_width
    return None


class LegacyFile:
    """Footer, metadata, embedded schema and page table of one legacy file."""

    def __init__(self, read_range: Callable[[int, int], pa.Buffer], file_size: int, path: str) -> None:
        self.path = path
        self._read_range = read_range
        self.file_size = file_size
        try:
            self._open()
        except (DecodeError, struct.error, ValueError, IndexError, KeyError, InvalidInputError) as exc:
            raise CorruptFileError(path, f"malformed legacy file metadata: {exc}") from exc

    def _message(self, position: int, message):
        if position < 0 or position + 4 > self.file_size:
            raise CorruptFileError(self.path, f"metadata position {position} outside the file")
        (size,) = struct.unpack("<I", self._read_range(position, 4).to_pybytes())
        message.ParseFromString(self._read_range(position + 4, size).to_pybytes())
        return message

    def _open(self) -> None:
        if self.file_size < _LEGACY_FOOTER.size:
            raise CorruptFileError(self.path, "file too small for a legacy footer")
        tail = self._read_range(self.file_size - _LEGACY_FOOTER.size, _LEGACY_FOOTER.size).to_pybytes()
        position, _major, _minor, _magic = _LEGACY_FOOTER.unpack(tail)
        metadata = self._message(position, file_pb2.Metadata())
        offsets = list(metadata.batch_offsets)
        if not offsets or offsets[0] != 0 or any(b < a for a, b in zip(offsets, offsets[1:])):
            raise CorruptFileError(self.path, "batch offsets are not increasing")
        self.batch_rows = np.diff(np.array(offsets, dtype=np.int64))
        self.num_rows = int(offsets[-1])
        if not metadata.manifest_position:
            raise UnsupportedFeatureError(f"{self.path}: legacy data file without an embedded schema")
        manifest = self._message(metadata.manifest_position, table_pb2.Manifest())
        self.schema = LanceSchema.from_fields(manifest.fields, manifest.schema_metadata)
        self._dictionaries = {f.id: (f.dictionary.offset, f.dictionary.length)
                              for f in manifest.fields if f.HasField("dictionary")}
        ids = [f.id for f in manifest.fields]
        self._min_id, self._max_id = min(ids), max(ids)
        batches = len(self.batch_rows)
        if self._min_id > 0 and not metadata.HasField("statistics") and self._starts_at_zero(
                metadata, self._max_id + 1, batches):
            # Lance 0.7 and older (no statistics yet) laid the page table out from field id 0, not
            # from the file's lowest field id (files holding only columns added later by ``merge``)
            self._min_id = 0
        count = (self._max_id - self._min_id + 1) * batches * 2
        start = metadata.page_table_position
        if start + 8 * count > self.file_size:
            raise CorruptFileError(self.path, "page table outside the file")
        table = np.frombuffer(self._read_range(start, 8 * count), dtype="<i8")
        self._pages = table.reshape(self._max_id - self._min_id + 1, batches, 2)
        if np.any(self._pages < 0):
            raise CorruptFileError(self.path, "negative page position or length")

    def _starts_at_zero(self, metadata: file_pb2.Metadata, fields: int, batches: int) -> bool:
        """Whether the page table holds ``fields`` entries from id 0: it then fills the space up to
        the embedded schema exactly and the entries below the file's lowest field id are empty."""
        start, end = metadata.page_table_position, metadata.manifest_position
        if end - start != fields * batches * 16:
            return False
        below = np.frombuffer(self._read_range(start, self._min_id * batches * 16), dtype="<i8")
        return not below.any()

    # ------------------------------------------------------------------ I/O

    def _fetch(self, starts: np.ndarray, sizes: np.ndarray, ctx: Ctx) -> tuple[np.ndarray, np.ndarray]:
        """Read byte ranges with coalesced requests: (bytes, start of each range in them)."""
        starts = np.asarray(starts, dtype=np.int64)
        sizes = np.asarray(sizes, dtype=np.int64)
        if len(starts) and (int(starts.min()) < 0 or int((starts + sizes).max()) > self.file_size):
            raise ctx.corrupt("page outside the file")
        nonempty = sizes > 0
        if not nonempty.any():
            return np.zeros(0, np.uint8), np.zeros(len(starts), np.int64)
        order = np.argsort(starts[nonempty], kind="stable")
        s, e = starts[nonempty][order], (starts + sizes)[nonempty][order]
        run_end = np.maximum.accumulate(e)
        new_run = np.ones(len(s), dtype=bool)
        new_run[1:] = s[1:] > run_end[:-1] + _GAP
        run_id = np.cumsum(new_run) - 1
        run_start = s[new_run]
        run_stop = np.maximum.reduceat(e, np.flatnonzero(new_run))
        blocks = [np.frombuffer(self._read_range(int(a), int(b - a)), dtype=np.uint8)
                  for a, b in zip(run_start.tolist(), run_stop.tolist())]
        base = exclusive_cumsum(run_stop - run_start)
        data = np.concatenate(blocks)
        local = np.zeros(len(starts), dtype=np.int64)
        idx = np.flatnonzero(nonempty)[order]
        local[idx] = base[run_id] + (s - run_start[run_id])
        return data, local

    def _page_table(self, field: file_pb2.Field, ctx: Ctx) -> tuple[np.ndarray, np.ndarray]:
        if not self._min_id <= field.id <= self._max_id:
            raise ctx.corrupt(f"field id {field.id} not in the page table")
        pages = self._pages[field.id - self._min_id]
        return pages[:, 0], pages[:, 1]

    # ------------------------------------------------------------------ reading

    def read(self, schema: LanceSchema) -> pa.Table:
        """Read the top-level fields of ``schema`` (a projection of the file's schema)."""
        arrow_schema = schema.to_arrow()
        arrays = []
        for top, arrow_field in zip(schema.top_level(), arrow_schema):
            if self.schema._by_id.get(top.id) is None:
                arrays.append(pa.nulls(self.num_rows, arrow_field.type))
                continue
            array = self._read_field(schema, top, storage_type(arrow_field.type), None)
            if array.type != arrow_field.type:  # extension types from their storage, JSONB as JSON text
                array = jsonb.from_storage(array, arrow_field.type) if jsonb.contains_json(arrow_field.type) \
                    else array.cast(arrow_field.type)
            if len(array) != self.num_rows:
                raise CorruptFileError(self.path, f"field {top.name!r} has {len(array)} rows, expected "
                                                  f"{self.num_rows}")
            arrays.append(array)
        return pa.Table.from_arrays(arrays, schema=arrow_schema)

    def _read_field(self, schema: LanceSchema, field: file_pb2.Field, dtype: pa.DataType,
                    ranges: tuple[np.ndarray, np.ndarray] | None) -> pa.Array:
        """All batches of a field; ``ranges`` = (first value, count) per batch (None: whole pages)."""
        ctx = Ctx(self.path, f"field {field.name!r}")
        positions, lengths = self._page_table(field, ctx)
        is_list = pa.types.is_list(dtype) or pa.types.is_large_list(dtype)
        values_in_page = lengths - 1 if is_list else lengths  # list pages hold length + 1 positions
        if ranges is None:
            first, counts = np.zeros(len(lengths), np.int64), self.batch_rows
            if not pa.types.is_struct(dtype) and not np.array_equal(values_in_page, counts):
                raise ctx.corrupt("page lengths do not match the batch rows")
        else:
            first, counts = ranges
            if not pa.types.is_struct(dtype) and np.any(first + counts > values_in_page):
                raise ctx.corrupt("list positions exceed the item pages")
        if pa.types.is_null(dtype):
            return pa.nulls(int(counts.sum()))
        if pa.types.is_struct(dtype):
            children = [self._read_field(schema, child, dtype.field(i).type, (first, counts))
                        for i, child in enumerate(schema.children(field.id))]
            return pa.StructArray.from_arrays(children, fields=list(dtype)) if children else \
                pa.array([{}] * int(counts.sum()), dtype)
        if pa.types.is_dictionary(dtype):
            return self._dictionary(field, dtype, positions, first, counts, ctx)
        if dtype in _VARIABLE:
            return self._binary(field, dtype, positions, first, counts, ctx)
        if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
            width = 8 if pa.types.is_large_list(dtype) else 4
            data, local = self._fetch(positions + first * width, (counts + 1) * width, ctx)
            words = take_ranges(data, local, (counts + 1) * width).view(f"<i{width}").astype(np.int64)
            ends = exclusive_cumsum(counts + 1)
            start_of = words[ends[:-1]]
            stop_of = words[ends[1:] - 1]
            if np.any(stop_of < start_of) or np.any(start_of < 0):
                raise ctx.corrupt("list positions are not monotonic")
            keep = np.ones(len(words), dtype=bool)
            keep[ends[1:] - 1] = False
            item_counts = stop_of - start_of
            shift = np.repeat(start_of - exclusive_cumsum(item_counts)[:-1], counts)
            offsets = np.concatenate([words[keep] - shift, [int(item_counts.sum())]])
            if np.any(np.diff(offsets) < 0):
                raise ctx.corrupt("list positions are not monotonic")
            (child,) = schema.children(field.id)
            items = self._read_field(schema, child, dtype.value_type, (start_of, item_counts))
            return pa.Array.from_buffers(dtype, int(counts.sum()), [None, pa.py_buffer(
                offsets.astype(np.int64 if width == 8 else np.int32))], children=[items])
        return self._fixed(dtype, positions, first, counts, ctx)

    def _fixed(self, dtype, positions, first, counts, ctx) -> pa.Array:
        if pa.types.is_fixed_size_list(dtype):
            dim = dtype.list_size
            items = self._fixed(dtype.value_type, positions, first * dim, counts * dim, ctx)
            return pa.FixedSizeListArray.from_arrays(items, dim)
        bits = _fixed_width_bits(dtype)
        if bits is None:
            raise UnsupportedFeatureError(f"{self.path}: legacy pages of type {dtype} are not supported")
        total = int(counts.sum())
        if bits == 1:
            nbytes = (first + counts + 7) // 8 - first // 8
            data, local = self._fetch(positions + first // 8, nbytes, ctx)
            raw = take_ranges(data, local, nbytes)
            bits_array = np.unpackbits(raw, bitorder="little")
            starts = exclusive_cumsum(nbytes)[:-1] * 8 + first % 8
            values = take_ranges(bits_array, starts, counts)
            packed = pa.py_buffer(np.packbits(values, bitorder="little"))
            return pa.Array.from_buffers(pa.bool_(), total, [None, packed])
        width = bits // 8
        data, local = self._fetch(positions + first * width, counts * width, ctx)
        block = Fixed(take_ranges(data, local, counts * width), bits, total)
        return to_arrow(block, dtype, None, ctx)

    def _binary(self, field, dtype, positions, first, counts, ctx) -> pa.Array:
        data, local = self._fetch(positions + first * 8, (counts + 1) * 8, ctx)
        words = take_ranges(data, local, (counts + 1) * 8).view("<i8").astype(np.int64)
        ends = exclusive_cumsum(counts + 1)
        lo, hi = words[ends[:-1]], words[ends[1:] - 1]
        steps = np.diff(words)
        steps[ends[1:-1] - 1] = 0  # between batches
        if np.any(hi < lo) or np.any(steps < 0):
            raise ctx.corrupt("string positions are not monotonic")
        payload, payload_local = self._fetch(lo, hi - lo, ctx)
        values = take_ranges(payload, payload_local, hi - lo)
        keep = np.ones(len(words), dtype=bool)
        keep[ends[1:] - 1] = False
        shift = np.repeat(lo - exclusive_cumsum(hi - lo)[:-1], counts)
        offsets = np.concatenate([words[keep] - shift, [int((hi - lo).sum())]])
        valid = None
        if field.nullable:
            valid = np.diff(offsets) > 0
        return to_arrow(Variable(offsets, values, int(counts.sum())), dtype, valid, ctx)

    def stored_dictionary(self, field_id: int) -> pa.Array | None:
        """The dictionary values of field ``field_id`` as stored (empty strings stay empty), or None."""
        if field_id not in self._dictionaries:
            return None
        field = self.schema.field(field_id)
        value_type = self.schema.arrow_field(field_id).type.value_type
        offset, length = self._dictionaries[field_id]
        where = (np.array([offset], dtype=np.int64), np.zeros(1, np.int64), np.array([length], dtype=np.int64))
        ctx = Ctx(self.path, f"dictionary of field {field.name!r}")
        if value_type in _VARIABLE:
            return self._binary(file_pb2.Field(nullable=False), value_type, *where, ctx)
        if pa.types.is_primitive(value_type) and not pa.types.is_boolean(value_type):
            return self._fixed(value_type, *where, ctx)
        raise UnsupportedFeatureError(f"{self.path}: legacy dictionaries of {value_type}")

    def _dictionary(self, field, dtype, positions, first, counts, ctx) -> pa.Array:
        location = self._dictionaries.get(field.id)
        if location is None:
            raise UnsupportedFeatureError(f"{self.path}: dictionary field {field.name!r} without stored values")
        offset, length = location
        value_type = dtype.value_type
        where = (np.array([offset], dtype=np.int64), np.zeros(1, np.int64), np.array([length], dtype=np.int64))
        if value_type in _VARIABLE:  # an empty value of a nullable field is null, as pylance reads it
            values = self._binary(file_pb2.Field(nullable=field.nullable), value_type, *where, ctx)
        elif pa.types.is_primitive(value_type) and not pa.types.is_boolean(value_type):
            values = self._fixed(value_type, *where, ctx)
        else:
            raise UnsupportedFeatureError(f"{self.path}: legacy dictionaries of {value_type}")
        keys = self._fixed(dtype.index_type, positions, first, counts, ctx)
        key_values = np.asarray(keys.to_numpy(zero_copy_only=False)).astype(np.int64)
        if len(key_values) and (int(key_values.min()) < 0 or int(key_values.max()) >= len(values)):
            raise ctx.corrupt("dictionary key out of range")
        return pa.DictionaryArray.from_arrays(keys, values)

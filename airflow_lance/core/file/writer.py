"""Streaming writer of Lance data files, format 2.0 (default), 2.1 or 2.2.

::

    writer = LanceFileWriter(sink, schema, max_page_bytes=8 * 1024 * 1024, version="2.0")
    writer.write_batch(batch)          # pa.RecordBatch or pa.Table, any number of times
    writer.num_rows                    # rows written so far
    writer.bytes_written               # bytes handed to the sink + bytes buffered in pages
    size = writer.finish()             # footer written; returns the file size
    writer.field_ids, writer.column_indices   # for DataFile.fields / column_indices
    writer.file_version                # (major, minor) for DataFile: (2, 0), (2, 1), (2, 2)

``sink`` is any binary file-like object with ``write``; offsets are tracked
here, no ``seek``/``tell`` is needed. Every Lance field (parents included) is
one column (format notes 6.2). Each column buffers its values until about
``max_page_bytes`` are pending, then writes a page; pages never split a row,
list items and struct children page independently of their parents. A single
value larger than the limit gets a page of its own.

2.1/2.2 files (``version="2.1"``/``"2.2"``) have one column per *leaf* field
(struct and list structure goes into rep/def levels, see ``v21.write``);
every leaf column buffers the Arrow slices of its rows and encodes a page
when about ``max_page_bytes`` of leaf values (their Arrow size, as pylance
counts) are pending. Struct nulls are written there. Pages of at least
``BACKGROUND_PAGE_BYTES`` are encoded on a process-wide pool of threads (one
per core) while the writer cuts the next pages; most of that work runs without
the GIL (Arrow kernels, the compiled copy loops, the zstd codec), so one write
uses the machine's other cores. The writer writes them in order per column,
with at most ``ENCODING_PAGES`` pages' worth of bytes in flight; an error in
the background is raised by the ``write_batch`` or ``finish`` that writes it.

Batches are aligned to the schema first (:meth:`LanceSchema.align`): columns
are selected by name, struct children may come in any order, and types that
map to the same Lance type (e.g. a fixed-size-list item name) are cast.
Struct nulls cannot be stored in 2.0 files: ``UnsupportedFeatureError``. After
any error inside ``write_batch`` the writer refuses further calls (part of the
batch may have been taken): discard the file.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
import pyarrow as pa

from airflow_lance.core import jsonb
from airflow_lance.core._proto import file2_pb2, file_pb2
from airflow_lance.core.errors import InvalidInputError, UnsupportedFeatureError
from airflow_lance.core.file import blob_v2, encode
from airflow_lance.core.file.format import (
    ALIGNMENT,
    ARRAY_ENCODING_URL,
    COLUMN_ENCODING,
    PADDING_BYTE,
    TABLE_ENTRY,
    WRITE_VERSION,
    Footer,
    align_padding,
    wrap_any,
)
from airflow_lance.core.file.v21 import write as encode21
from airflow_lance.core.file.v21.pages import PAGE_LAYOUT_URL
from airflow_lance.core.file.v21.structure import ITEM, LIST, NodeData
from airflow_lance.core.schema import LanceSchema, storage_schema, storage_type

DEFAULT_MAX_PAGE_BYTES = 8 * 1024 * 1024
#: Field metadata naming the general compression of a 2.2 string field, as in pylance.
COMPRESSION_KEY = "lance-encoding:compression"
#: Page buffers at least this long start at the sink's ``alignment`` (4 KiB for a direct-I/O
#: file) rather than at 64 bytes, so that the sink can write them without a copy.
LARGE_BUFFER_BYTES = 1024 * 1024
#: ``version=`` values -> footer version written.
FILE_VERSIONS = {"2.0": WRITE_VERSION, "2.1": (2, 1), "2.2": (2, 2)}
#: DataFile (major, minor) per ``version=``.
DATA_FILE_VERSIONS = {"2.0": (2, 0), "2.1": (2, 1), "2.2": (2, 2)}


#: 2.1+ pages of at least this many pending bytes are encoded on the background page encoder.
BACKGROUND_PAGE_BYTES = 256 * 1024
#: A writer has at most this many pages' worth (``max_page_bytes`` each) of pending bytes in flight on
#: the background page encoder; past that it waits for its oldest pages and writes them.
ENCODING_PAGES = 8

_PAGE_ENCODER: ThreadPoolExecutor | None = None
_PAGE_ENCODER_LOCK = threading.Lock()


def _page_encoder() -> ThreadPoolExecutor:
    """The process's background page encoder (one thread per core this process may run on, at
    most ``ENCODING_PAGES``), started on first use."""
    global _PAGE_ENCODER
    with _PAGE_ENCODER_LOCK:
        if _PAGE_ENCODER is None:
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
            _PAGE_ENCODER = ThreadPoolExecutor(max_workers=max(1, min(cores, ENCODING_PAGES)),
                                               thread_name_prefix="lance-page-encoder")
        return _PAGE_ENCODER


def _forget_page_encoder() -> None:
    """In a forked child: the parent's encoder threads do not exist there."""
    global _PAGE_ENCODER, _PAGE_ENCODER_LOCK
    _PAGE_ENCODER, _PAGE_ENCODER_LOCK = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_page_encoder)


def _is_list(dtype: pa.DataType) -> bool:
    """Lists, and maps (written as a list of (key, value) entries, as pylance 14 does)."""
    return pa.types.is_list(dtype) or pa.types.is_large_list(dtype) or pa.types.is_map(dtype)


def _extract(array: pa.Array, path: list[tuple[int, pa.DataType]]) -> tuple[list[NodeData], pa.Array]:
    """Validity/offsets of every node on ``path`` (outermost first) and the leaf's values."""
    nodes: list[NodeData] = []
    for depth, (child_index, dtype) in enumerate(path):
        valid = None
        if array.null_count:
            valid = np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        if depth == len(path) - 1:
            nodes.append(NodeData(ITEM, len(array), valid))
            break
        next_index = path[depth + 1][0]
        if _is_list(dtype):
            offsets = np.asarray(array.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
            start = int(offsets[0])
            nodes.append(NodeData(LIST, len(array), valid, offsets - start))
            array = array.values.slice(start, int(offsets[-1]) - start)
        elif pa.types.is_struct(dtype):
            nodes.append(NodeData(ITEM, len(array), valid))
            array = array.field(next_index)
        else:
            raise UnsupportedFeatureError(f"nested type {dtype} cannot be written to a 2.1+ data file")
    return nodes, array


def _merge(pieces: list[tuple[list[NodeData], pa.Array]]) -> tuple[list[NodeData], pa.Array | pa.ChunkedArray]:
    """Concatenate the node data of several row runs; their leaf values as the chunks of one array
    (fixed-width values and string bytes are copied from each chunk straight into the page layout)."""
    if len(pieces) == 1:
        return pieces[0]
    merged = []
    for depth, first in enumerate(pieces[0][0]):
        parts = [p[0][depth] for p in pieces]
        valid = None
        if any(p.valid is not None for p in parts):
            valid = np.concatenate([np.ones(p.length, bool) if p.valid is None else p.valid for p in parts])
        offsets = None
        if first.kind == LIST:
            base = encode21.exclusive_cumsum(np.array([p.offsets[-1] for p in parts]))
            offsets = np.concatenate([p.offsets[:-1] + b for p, b in zip(parts, base[:-1])] + [base[-1:]])
        merged.append(NodeData(first.kind, sum(p.length for p in parts), valid, offsets))
    leaves = [p[1] for p in pieces]
    if pa.types.is_dictionary(leaves[0].type):
        return merged, pa.chunked_array(leaves).unify_dictionaries().combine_chunks()
    return merged, pa.chunked_array(leaves, leaves[0].type)  # encode_page joins them as it needs


class _LeafColumn:
    """Pending row runs and written pages of one 2.1+ leaf column."""

    def __init__(self, field_id: int, path: list[tuple[int, pa.DataType]], writer: LanceFileWriter,
                 compression: str | None = None, blob: bool = False) -> None:
        self.field_id = field_id
        self.blob = blob  # lance-encoding:blob: values out of line (2.1)
        self.path = path
        self.compression = compression  # the field's lance-encoding:compression, if any
        self.pages: list[file2_pb2.ColumnMetadata.Page] = []
        self.pending: list[tuple[list[NodeData], pa.Array]] = []
        self.pending_rows = 0
        self.pending_bytes = 0
        self.encoding: deque[_Encoding] = deque()  # pages being encoded in the background, oldest first
        self._writer = writer

    def append(self, array: pa.Array) -> None:
        limit = self._writer.max_page_bytes
        while len(array):
            nodes, leaf = _extract(array, self.path)
            size = leaf.nbytes + 8
            if self.pending_bytes + size <= limit or len(array) == 1:
                self.pending.append((nodes, leaf))
                self.pending_rows += len(array)
                self.pending_bytes += size
                if self.pending_bytes >= limit:
                    self.flush()
                return
            # the rows that fill the page (at least one if the page is empty), by the array's
            # average row size: taken whole even if their own size runs a little over, so that the
            # estimate's error never leaves a few rows behind as a page of their own
            take = int(len(array) * max(limit - self.pending_bytes, 0) / size)
            if take == 0 and not self.pending:
                take = 1
            if take:
                nodes, leaf = _extract(array.slice(0, take), self.path)
                self.pending.append((nodes, leaf))
                self.pending_rows += take
                self.pending_bytes += leaf.nbytes + 8
            self.flush()
            array = array.slice(take)

    def flush(self, *, final: bool = False) -> None:
        """Encode the pending row runs as a page (``final``: and write the pages still encoding).

        A page of at least ``BACKGROUND_PAGE_BYTES`` is encoded on the background page encoder
        while this thread goes on with the next pages and the other columns (most of that work
        runs without the GIL: Arrow kernels, the compiled copy loops, the zstd codec); the
        writer writes it later (see :meth:`LanceFileWriter._encode_later`). A column's pages
        are written in the order they were cut.
        """
        if self.pending and self.blob:  # the values' bytes are written first, where the page points
            nodes, leaf = _merge(self.pending)
            self.write_encoded()
            page = encode21.encode_blob_page(nodes, leaf, self.pending_rows, self._writer.version,
                                             self._writer._write_buffer)
            self.pages.append(self._writer._write_page(page, PAGE_LAYOUT_URL))
            self.pending, self.pending_rows, self.pending_bytes = [], 0, 0
        elif self.pending:
            nodes, leaf = _merge(self.pending)
            page_args = (nodes, leaf, self.pending_rows, self._writer.version, self.compression)
            if self.pending_bytes >= BACKGROUND_PAGE_BYTES:
                self._writer._encode_later(self, page_args, self.pending_bytes)
            else:
                self.write_encoded()
                self.pages.append(self._writer._write_page(encode21.encode_page(*page_args), PAGE_LAYOUT_URL))
            self.pending, self.pending_rows, self.pending_bytes = [], 0, 0
        if final:
            self.write_encoded()

    def write_encoded(self, upto: _Encoding | None = None) -> None:
        """Write this column's pages encoded in the background, oldest first: all of them, or up to
        ``upto`` (their errors are raised here)."""
        while self.encoding and (upto is None or upto.future is not None):
            entry = self.encoding.popleft()
            page, entry.future = entry.future.result(), None
            self._writer._encoding_bytes -= entry.size
            self.pages.append(self._writer._write_page(page, PAGE_LAYOUT_URL))


class _BlobV2Column(_LeafColumn):
    """A blob v2 field: its values' bytes stored inline, in pack files or dedicated files as pylance
    stores them (core/file/blob_v2.py), the column a variable packed struct of their descriptions."""

    def __init__(self, field_id: int, path: list[tuple[int, pa.DataType]], writer: LanceFileWriter, name: str,
                 thresholds: blob_v2.Thresholds) -> None:
        super().__init__(field_id, path, writer)
        self.name = name
        self.thresholds = thresholds

    def flush(self, *, final: bool = False) -> None:
        if self.pending:
            nodes, leaf = _merge(self.pending)
            values = leaf.combine_chunks() if isinstance(leaf, pa.ChunkedArray) else leaf
            descriptions = blob_v2.describe(values, self.name, self.thresholds, self._writer._write_buffer,
                                            self._writer.blob_sidecars)
            self.pages.append(self._writer._write_page(
                encode21.encode_page(nodes, descriptions, self.pending_rows, self._writer.version), PAGE_LAYOUT_URL))
            self.pending, self.pending_rows, self.pending_bytes = [], 0, 0


@dataclass
class _Encoding:
    """A page of ``column`` being encoded in the background (``future`` None once written)."""

    column: _LeafColumn
    future: Future | None
    size: int  # the pending bytes it was cut from


class _Column:
    """Pending values and written pages of one column."""

    def __init__(self, path: str, dtype: pa.DataType, writer: LanceFileWriter, packed: bool = False,
                 blob: bool = False) -> None:
        self.path = path
        self.kind = encode.column_kind(dtype, path)
        if packed:
            encode.check_packable(dtype, path)
            self.kind = encode.PACKED
        if blob and self.kind == encode.BINARY:
            self.kind = encode.BLOB
        self.children: list[_Column] = []
        self.pages: list[file2_pb2.ColumnMetadata.Page] = []
        self.pending: list[pa.Array] = []
        self.pending_items = 0
        self.pending_bytes = 0
        self._writer = writer

    def append(self, array: pa.Array) -> None:
        """Add the next items of this column (and route nested values to child columns)."""
        if not len(array):
            return
        if self.kind in (encode.STRUCT, encode.PACKED):
            if array.null_count:
                raise UnsupportedFeatureError(
                    f"The struct field `{self.path}` contains {array.null_count} null value(s), but Lance file "
                    "version 2.0 does not encode struct validity"
                )
            for i, child in enumerate(self.children):  # none when packed: its pages hold the values
                child.append(array.field(i))
        elif self.kind == encode.LIST:
            self.children[0].append(encode.list_items(array))
        self._add(array)

    def _add(self, array: pa.Array) -> None:
        limit = self._writer.max_page_bytes
        while len(array):
            size = encode.page_bytes(self.kind, array)
            if self.pending_bytes + size < limit:
                self._keep(array, size)
                return
            take = encode.rows_that_fit(self.kind, array, limit - self.pending_bytes)
            if take == 0 and not self.pending:
                take = 1
            if take:
                head = array.slice(0, take)
                self._keep(head, encode.page_bytes(self.kind, head))
            self.flush()
            array = array.slice(take)

    def _keep(self, array: pa.Array, size: int) -> None:
        if self.kind not in (encode.STRUCT, encode.NULL):  # their pages only count rows
            self.pending.append(array)
        self.pending_items += len(array)
        self.pending_bytes += size

    def flush(self, *, final: bool = False) -> None:
        """Write the pending items as a page (``final``: also an empty page if the column has none)."""
        if self.pending_items == 0 and not (final and not self.pages and self._writer.num_rows):
            return
        if self.kind == encode.BLOB:  # the values' bytes are written first, where the page points
            page = encode.encode_blob_page(self.pending, self.pending_items, self._writer._write_buffer)
        else:
            page = encode.encode_page(self.kind, self.pending, self.pending_items)
        self.pages.append(self._writer._write_page(page))
        self.pending, self.pending_items, self.pending_bytes = [], 0, 0


#: Field metadata that asks Lance to store a struct's children together in one column (any case of "true").
PACKED_STRUCT_KEYS = ("lance-encoding:packed", "packed")
#: Field metadata (any value) that makes Lance store binary values out of line, as blobs.
BLOB_KEY = "lance-encoding:blob"
_EXTENSION_KEY = "ARROW:extension:name"


def is_packed_struct(field: file_pb2.Field) -> bool:
    """Whether Lance stores this field as a packed struct (pylance's ``Field::is_packed_struct``)."""
    return field.logical_type == "struct" and any(
        field.metadata.get(key, b"").lower() == b"true" for key in PACKED_STRUCT_KEYS)


_BINARY = (pa.string(), pa.binary(), pa.large_string(), pa.large_binary())


def _check_packed(field: file_pb2.Field, dtype: pa.StructType, version: str) -> None:
    """A packed struct we can write as pylance does: fixed-width fields (not booleans), and in 2.2
    strings and binaries too; in 2.1/2.2 at most 256 bytes of fixed-width values (pylance's limits)."""
    why = None if dtype.num_fields else "no fields"
    for child in dtype:
        width = encode21.fixed_width(child.type)
        if width is None and not (child.type in _BINARY and version == "2.2"):
            why = why or f"field {child.name!r} of type {child.type}" + (
                f" in a {version} file (pylance packs strings and binaries from 2.2 on)"
                if child.type in _BINARY else "")
    if why is None and version != "2.0" and all(encode21.fixed_width(c.type) for c in dtype) and \
            sum(encode21.fixed_width(c.type) for c in dtype) > encode21.FULL_ZIP_THRESHOLD:
        why = f"more than {encode21.FULL_ZIP_THRESHOLD} bytes per value"
    if why is not None:
        raise UnsupportedFeatureError(
            f"field {field.name!r} is a packed struct ('lance-encoding:packed' metadata) with {why}, which cannot "
            "be written as pylance stores it; drop that metadata to store it as an ordinary struct")


def check_supported_layouts(schema: LanceSchema, version: str) -> None:
    """Refuse, before anything is written, fields pylance stores in a layout of their own that we do
    not write: packed structs of other fields than pylance packs (the others get pylance's packed
    layouts: one column of all the fields' values) and blob columns of 2.2 files (pylance 14's blob
    v2: descriptors and sidecar files; 2.0/2.1 blob columns get pylance's out-of-line layouts).
    Written as ordinary columns under that metadata, pylance read them as all nulls or not at all."""
    for field in schema.fields:
        if field.logical_type == "map" and version != "2.2":
            raise UnsupportedFeatureError(f"field {field.name!r}: maps in a {version} file (pylance writes them "
                                          "from 2.2 on)")
        if is_packed_struct(field):
            _check_packed(field, schema.arrow_field(field.id).type, version)
        blob = BLOB_KEY in field.metadata
        if blob_v2.is_blob_v2(field.metadata):
            _check_blob_v2(schema, field, version)
            continue
        if blob and version == "2.2":
            raise UnsupportedFeatureError(
                f"field {field.name!r} is a blob column ('lance-encoding:blob' metadata), which cannot be written "
                "to a 2.2 file here (2.0 and 2.1 files can hold them; in 2.2 use pylance's blob v2 type, "
                "lance.blob_field / lance.blob_array); drop that metadata to store its values inline")
        if blob and schema.arrow_field(field.id).type != pa.large_binary():
            raise UnsupportedFeatureError(
                f"field {field.name!r}: 'lance-encoding:blob' on a {schema.arrow_field(field.id).type} field "
                "(pylance stores blobs of large_binary values only)")


def _check_blob_v2(schema: LanceSchema, field: file_pb2.Field, version: str) -> None:
    """pylance's blob v2 columns: 2.2 files, top-level fields of its logical struct."""
    if version != "2.2":
        raise UnsupportedFeatureError(f"field {field.name!r}: blob v2 columns in a {version} file (pylance writes "
                                      "them in 2.2 files only)")
    if field.parent_id != -1:
        raise UnsupportedFeatureError(f"field {field.name!r}: blob v2 columns inside other fields")
    dtype = storage_type(schema.arrow_field(field.id).type)
    names = [f.name for f in dtype] if pa.types.is_struct(dtype) else []
    if names not in (["data", "uri"], ["data", "uri", "position", "size"]):
        raise UnsupportedFeatureError(f"field {field.name!r}: a blob v2 column of type {dtype} (pylance's is "
                                      "struct<data: large_binary, uri: string, position: uint64, size: uint64>)")
    blob_v2.Thresholds.of(field.name, field.metadata)


def to_storage(batch: pa.RecordBatch | pa.Table, stored: pa.Schema) -> pa.RecordBatch | pa.Table:
    """``batch`` with its columns as the types the files store (``stored``: the storage schema)."""
    columns = [jsonb.to_storage(column, field.type, own.type) for column, field, own
               in zip(batch.columns, stored, batch.schema)]
    columns = [c if c.type == f.type else c.cast(f.type) for c, f in zip(columns, stored)]
    if isinstance(batch, pa.Table):
        return pa.Table.from_arrays(columns, schema=stored)
    return pa.RecordBatch.from_arrays(columns, schema=stored)


class LanceFileWriter:
    """Writes one Lance data file (format 2.0 with footer version 0.3, or 2.1 / 2.2) to ``sink``."""

    def __init__(self, sink: BinaryIO, schema: LanceSchema, *, max_page_bytes: int = DEFAULT_MAX_PAGE_BYTES,
                 version: str = "2.0", blob_sidecars: blob_v2.SidecarWriter | None = None) -> None:
        """Prepare a file for ``schema``; raises ``UnsupportedFeatureError`` for unwritable types.

        ``blob_sidecars`` stores the blob v2 values too large to go inline (a dataset's writes give it)."""
        self.blob_sidecars = blob_sidecars
        if max_page_bytes <= 0:
            raise InvalidInputError(f"max_page_bytes must be positive, got {max_page_bytes}")
        if version not in FILE_VERSIONS:
            raise InvalidInputError(f"data file version must be one of {sorted(FILE_VERSIONS)}, not {version!r}")
        self.max_page_bytes = max_page_bytes
        self.schema = schema
        self._version_name = version
        self.version = FILE_VERSIONS[version]
        self._arrow_schema = schema.to_arrow()
        stored = storage_schema(self._arrow_schema)
        self._storage_schema = None if stored.equals(self._arrow_schema) else stored
        self._sink = sink
        self._position = 0
        self._num_rows = 0
        self._finished = False
        self._failed = False
        self._columns: list = []
        self._extra_global_buffers: list[tuple[int, int]] = []
        # pages of all columns being encoded in the background, oldest first, and their pending bytes
        self._encoding: deque[_Encoding] = deque()
        self._encoding_bytes = 0
        check_supported_layouts(schema, version)
        if version == "2.0":
            self._top = [self._build(schema, f, f.name) for f in schema.top_level()]
        else:
            self._top = [self._build_leaves(schema, f, [(0, storage_type(schema.arrow_field(f.id).type))]) for f in
                         schema.top_level()]

    def _build_leaves(self, schema: LanceSchema, field: file_pb2.Field, path: list) -> list[_LeafColumn]:
        """The leaf columns below ``field`` (pre-order), each with its path from the top-level field."""
        dtype = path[-1][1]
        children = schema.children(field.id)
        if blob_v2.is_blob_v2(field.metadata):  # one column of descriptions
            column = _BlobV2Column(field.id, path, self, field.name, blob_v2.Thresholds.of(field.name, field.metadata))
            self._columns.append(column)
            return [column]
        if is_packed_struct(field):  # one column of all the children's values
            column = _LeafColumn(field.id, path, self)
            self._columns.append(column)
            return [column]
        if not children:
            encode21.check_writable(dtype, field.name)
            compression = field.metadata.get(COMPRESSION_KEY)
            column = _LeafColumn(field.id, path, self,
                                 compression.decode(errors="replace").lower() if compression is not None else None,
                                 blob=BLOB_KEY in field.metadata)
            self._columns.append(column)
            return [column]
        if pa.types.is_fixed_size_list(dtype):
            raise UnsupportedFeatureError(f"field {field.name!r}: fixed-size lists of structs in 2.1+ files")
        out = []
        for index, child in enumerate(children):
            child_type = dtype.field(0).type if pa.types.is_map(dtype) else \
                dtype.value_type if _is_list(dtype) else dtype.field(index).type
            out += self._build_leaves(schema, child, [*path, (index, child_type)])
        return out

    def _build(self, schema: LanceSchema, field: file_pb2.Field, path: str) -> _Column:
        column = _Column(path, storage_type(schema.arrow_field(field.id).type), self, packed=is_packed_struct(field),
                         blob=BLOB_KEY in field.metadata)
        self._columns.append(column)
        if column.kind == encode.PACKED:  # one column of all its fields' values
            return column
        column.children = [self._build(schema, child, f"{path}.{child.name}") for child in schema.children(field.id)]
        return column

    # ------------------------------------------------------------------ public API

    @property
    def num_rows(self) -> int:
        """Rows written so far."""
        return self._num_rows

    @property
    def bytes_written(self) -> int:
        """Bytes handed to the sink plus the bytes buffered for pending pages."""
        return self._position + self._encoding_bytes + sum(c.pending_bytes for c in self._columns)

    @property
    def field_ids(self) -> list[int]:
        """``DataFile.fields``: 2.0: every field id in pre-order, parents included; 2.1+: the leaves."""
        if self._version_name == "2.0":  # but no fields below a packed struct (their values are its column's)
            packed = [f.id for f in self.schema.fields if is_packed_struct(f)]
            below = {i for field_id in packed for i in self.schema.subtree_ids(field_id) if i != field_id}
            return [i for i in self.schema.field_ids() if i not in below]
        return [column.field_id for column in self._columns]

    @property
    def column_indices(self) -> list[int]:
        """``DataFile.column_indices``: ``0 .. n-1``, one column per entry of ``field_ids``."""
        return list(range(len(self._columns)))

    @property
    def file_version(self) -> tuple[int, int]:
        """``DataFile`` (major, minor) of this file."""
        return DATA_FILE_VERSIONS[self._version_name]

    def write_batch(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Append rows; the data is aligned to the schema (see module docstring)."""
        self._check_usable("write_batch")
        if batch.num_rows == 0:
            return
        if not batch.schema.equals(self._arrow_schema):
            batch = self.schema.align(batch)
        if self._storage_schema is not None:  # extension types: their storage is written (JSON as JSONB)
            batch = to_storage(batch, self._storage_schema)
        try:
            for column, data in zip(self._top, batch.columns):
                for chunk in data.chunks if isinstance(data, pa.ChunkedArray) else [data]:
                    if isinstance(column, list):
                        for leaf in column:
                            leaf.append(chunk)
                    else:
                        column.append(chunk)
        except BaseException:
            self._failed = True  # some columns took rows of this batch: the file cannot be finished
            raise
        self._num_rows += batch.num_rows

    def _check_usable(self, operation: str) -> None:
        if self._failed:
            raise InvalidInputError(f"{operation}() after a failed write_batch(): discard this file")
        if self._finished:
            raise InvalidInputError(f"{operation}() after finish()")

    def add_global_buffer(self, data: bytes) -> int:
        """Write ``data`` as a global buffer now; return its index (1, 2, ...: buffer 0 is the
        file descriptor, written at finish). Lance index files keep side data there (a
        LABEL_LIST index's null-list rows)."""
        self._check_usable("add_global_buffer")
        self._extra_global_buffers.append(self._write_buffer([data]))
        return len(self._extra_global_buffers)

    def finish(self) -> int:
        """Write the remaining pages, schema, metadata and footer; return the file size."""
        self._check_usable("finish")
        self._finished = True
        for column in self._columns:
            column.flush()  # 2.1+: the last pages of all columns are encoded in the background at once
        for column in self._columns:
            column.flush(final=True)
        if self.blob_sidecars is not None:
            self.blob_sidecars.close()
        descriptor = file_pb2.FileDescriptor(schema=self.schema.to_proto(), length=self._num_rows)
        global_buffers = [self._write_buffer([descriptor.SerializeToString()]), *self._extra_global_buffers]
        column_meta_start = self._position
        column_entries = []
        for column in self._columns:
            metadata = file2_pb2.ColumnMetadata(encoding=COLUMN_ENCODING, pages=column.pages).SerializeToString()
            column_entries.append((self._position, len(metadata)))
            self._write(metadata)
        cmo_table_start = self._position
        self._write(b"".join(TABLE_ENTRY.pack(*entry) for entry in column_entries))
        gbo_table_start = self._position
        self._write(b"".join(TABLE_ENTRY.pack(*entry) for entry in global_buffers))
        footer = Footer(column_meta_start, cmo_table_start, gbo_table_start, len(global_buffers),
                        len(self._columns), *self.version)
        self._write(footer.pack())
        return self._position

    # ------------------------------------------------------------------ output

    def _write(self, data: bytes | pa.Buffer) -> None:
        self._sink.write(data)
        self._position += len(data)

    def _write_buffer(self, segments: list[bytes | pa.Buffer]) -> tuple[int, int]:
        """Write one 64-byte aligned buffer; returns (position, size).

        A buffer of at least :data:`LARGE_BUFFER_BYTES` starts at the sink's ``alignment`` if it
        has a larger one, and its segments go to the sink's ``write_retained`` if it has one (a
        direct-I/O file then writes them from their own memory). Segments are never modified
        once written: encoders hand over fresh arrays or immutable Arrow buffers.
        """
        size = sum(len(segment) for segment in segments)
        large = size >= LARGE_BUFFER_BYTES
        alignment = max(getattr(self._sink, "alignment", 1), ALIGNMENT) if large else ALIGNMENT
        padding = align_padding(self._position, alignment)
        if padding:
            self._write(PADDING_BYTE * padding)
        start = self._position
        write = getattr(self._sink, "write_retained", self._sink.write) if large else self._sink.write
        for segment in segments:
            write(segment)
            self._position += len(segment)
        return start, size

    def _encode_later(self, column: _LeafColumn, page_args: tuple, size: int) -> None:
        """Start encoding a page of ``column`` in the background; write the oldest pages in flight
        while more than ``ENCODING_PAGES`` pages' worth of bytes are."""
        entry = _Encoding(column, _page_encoder().submit(encode21.encode_page, *page_args), size)
        column.encoding.append(entry)
        self._encoding.append(entry)
        self._encoding_bytes += size
        while self._encoding and self._encoding_bytes > ENCODING_PAGES * self.max_page_bytes:
            oldest = self._encoding.popleft()
            oldest.column.write_encoded(oldest)

    def _write_page(self, page, url: str = ARRAY_ENCODING_URL) -> file2_pb2.ColumnMetadata.Page:
        positions = [self._write_buffer(segments) for segments in page.buffers]
        message = page.encoding if url == ARRAY_ENCODING_URL else page.layout
        return file2_pb2.ColumnMetadata.Page(
            buffer_offsets=[p for p, _ in positions],
            buffer_sizes=[s for _, s in positions],
            length=page.length,
            encoding=wrap_any(message, url),
            priority=0,
        )

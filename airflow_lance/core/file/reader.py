"""Reader of Lance data files (ours and pylance's): 2.0, 2.1, 2.2 and legacy 0.1.

::

    reader = LanceFileReader(source, path="data/x.lance", file_size=None, column_index=None)
    reader.version          # (major, minor) from the footer: (0, 3)/(2, 0), (2, 1), (2, 2), legacy (0, 1|2)
    reader.num_rows         # rows in the file (FileDescriptor.length)
    reader.num_columns
    reader.schema           # LanceSchema stored in the file (global buffer 0)
    table = reader.read(schema=None, column_index=None)

``source`` is a random-access ``pyarrow.NativeFile`` (``pa.memory_map``,
``pa.OSFile``, ``pa.PythonFile`` over an fsspec file). Bytes are read with
``seek`` + ``read_buffer`` so memory-mapped files are not copied; a reader is
therefore not safe for concurrent use from several threads. ``path`` is only
used in error messages.

``read(schema, column_index=...)`` reads the top-level fields of ``schema`` (the
*dataset* schema, possibly projected; its types, field metadata and schema
metadata are those of the result). ``column_index`` maps field id -> column
index (from ``DataFile.fields`` / ``column_indices``); by default the file's
own schema order is used. A field without a column reads as nulls. Only the
pages of the needed columns are read, with neighbouring byte ranges
coalesced into one request.

Top-level non-nested columns come back with one chunk per page, built over
the read buffers without copying; struct and list columns come back as one
chunk. Malformed files raise ``CorruptFileError`` naming the file, unknown
encodings and other format versions ``UnsupportedFeatureError``.

The version decides the decoder: 2.0 pages are decoded here (one column per
field, ``decode``); 2.1/2.2 files share the container but only leaves have
columns and pages carry structural layouts (``v21.read``); legacy files have
a different container altogether (``legacy``).
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError

from airflow_lance.core._proto import encodings_v2_1_pb2, file2_pb2, file_pb2
from airflow_lance.core._proto.encodings_v2_0_pb2 import ArrayEncoding
from airflow_lance.core.errors import CorruptFileError, InvalidInputError, LanceError, UnsupportedFeatureError
from airflow_lance.core import jsonb
from airflow_lance.core.file import decode
from airflow_lance.core.file.blob_bytes import gather_blobs
from airflow_lance.core.file.blob_v2 import SidecarReader
from airflow_lance.core.file.format import (
    FOOTER_SIZE,
    LEGACY_VERSIONS,
    TABLE_ENTRY,
    V2_1_VERSIONS,
    Footer,
    unwrap_array_encoding,
)
from airflow_lance.core.file.legacy import LegacyFile
from airflow_lance.core.file.v21.read import Assembler21, page_selection
from airflow_lance.core.file.v21.util import LazyBuffer
from airflow_lance.core.schema import LanceSchema, storage_type

#: Bytes read from the end of the file on open (footer, tables, usually all metadata).
TAIL_BYTES = 64 * 1024
#: Rows in one data file: Lance row addresses keep the offset in a fragment in 32 bits.
MAX_ROWS = 2**32
#: Byte ranges closer than this are read with one request.
COALESCE_GAP = 256 * 1024
#: The same for the partial reads of a page buffer (row reads) from a local file.
LOCAL_COALESCE_GAP = 16 * 1024
_SMALL_READ = 64 * 1024
_MALFORMED = (IndexError, KeyError, ValueError, OverflowError, TypeError, struct.error, DecodeError,
              pa.ArrowException)


def _is_packed(field: file_pb2.Field) -> bool:
    value = field.metadata.get("lance-encoding:packed", field.metadata.get("packed"))
    return value is not None and value.lower() not in (b"false", b"0", b"no")


def default_column_index(schema: LanceSchema, version: tuple[int, int]) -> dict[int, int]:
    """Field id -> column of a file written for ``schema`` (the file's own schema by default).

    2.0: every field has a column, in pre-order. 2.1+: only leaves (fields
    without children, and packed structs, whose children have none) in
    pre-order. Legacy: every field (the reader does not use columns).
    """
    if version not in V2_1_VERSIONS:
        return {f.id: i for i, f in enumerate(schema.fields)}
    out: dict[int, int] = {}

    def walk(field: file_pb2.Field) -> None:
        children = schema.children(field.id)
        if not children or (field.logical_type == "struct" and _is_packed(field)):
            out[field.id] = len(out)
            return
        for child in children:
            walk(child)

    for top in schema.top_level():
        walk(top)
    return out


class LanceFileReader:
    """Random-access reader of one Lance 2.0 data file."""

    def __init__(
        self,
        source: pa.NativeFile,
        *,
        path: str,
        file_size: int | None = None,
        column_index: Mapping[int, int] | None = None,
        blob_sidecars: SidecarReader | None = None,
    ) -> None:
        """Read and validate footer, offset tables and schema (``file_size`` 0/None: ask the source).

        ``blob_sidecars`` reads the file's blob sidecar files (blob v2 values stored out of the file)."""
        self.path = path
        self.blob_sidecars = blob_sidecars
        self._source = source
        self.reads = 0  # read requests made and bytes read (for I/O accounting)
        self.bytes_read = 0
        self._metadata_cache: dict[int, file2_pb2.ColumnMetadata] = {}
        self._legacy: LegacyFile | None = None
        try:
            self._open(file_size)
        except LanceError:
            raise
        except _MALFORMED as exc:
            raise CorruptFileError(path, f"malformed file metadata: {exc}") from exc
        self._column_index = dict(column_index) if column_index is not None else None

    def _open(self, file_size: int | None) -> None:
        actual = self._source.size()
        self.file_size = actual
        tail_start = max(0, actual - TAIL_BYTES)
        tail = self._read_range(tail_start, actual - tail_start)
        if tail.size >= 8 and tail.slice(tail.size - 4).to_pybytes() == b"LANC":
            version = struct.unpack("<HH", tail.slice(tail.size - 8, 4).to_pybytes())
            if version in LEGACY_VERSIONS:
                self._legacy = LegacyFile(self._read_range, actual, self.path)
                self.version = version
                self.schema = self._legacy.schema
                self.num_rows = self._legacy.num_rows
                self.num_columns = len(self.schema.fields)
                # pylance 0.39-4.0 recorded wrong sizes for legacy files; Lance reads them by the
                # file's own size, and so do we: the hint is not checked for legacy files
                return
        if file_size and file_size != actual:
            raise CorruptFileError(self.path, f"file has {actual} bytes, expected {file_size}")
        footer = Footer.parse(tail.slice(max(0, tail.size - FOOTER_SIZE)).to_pybytes(), actual, self.path)
        self._footer = footer
        self.version = (footer.major, footer.minor)
        self.num_columns = footer.num_columns
        start = footer.column_meta_start
        self._metadata = tail.slice(start - tail_start) if start >= tail_start else \
            self._read_range(start, actual - start)
        self._metadata_start = start
        self._columns = self._table(footer.cmo_table_start, footer.num_columns)
        if any(pos < start or pos + size > footer.cmo_table_start for pos, size in self._columns):
            raise CorruptFileError(self.path, "column metadata offsets out of range")
        buffers = self._table(footer.gbo_table_start, footer.num_global_buffers)
        if not buffers:
            raise CorruptFileError(self.path, "no global buffer with the file descriptor")
        position, size = buffers[0]
        if position + size > start:
            raise CorruptFileError(self.path, "global buffer offsets out of range")
        descriptor = file_pb2.FileDescriptor()
        descriptor.ParseFromString(self._read_range(position, size).to_pybytes())
        try:
            self.schema = LanceSchema.from_fields(descriptor.schema.fields, descriptor.schema.metadata)
        except InvalidInputError as exc:
            if self.version == (2, 0) or self.version == (0, 3):
                raise CorruptFileError(self.path, f"bad schema in file descriptor: {exc}") from exc
            # pylance 14 stores internal fields with id -1 (blob v2 descriptions) in 2.1+ files:
            # readers given the dataset schema do not need the file's own
            self.schema = None
            self._schema_error = exc
        self.num_rows = descriptor.length
        if self.num_rows > MAX_ROWS:
            raise CorruptFileError(self.path, f"implausible row count {self.num_rows}")

    def global_buffer(self, index: int) -> bytes:
        """The bytes of global buffer ``index`` (0 is the file descriptor; Lance index files keep
        side data in further ones)."""
        if self._legacy is not None:
            raise UnsupportedFeatureError(f"{self.path}: legacy files have no global buffers")
        buffers = self._table(self._footer.gbo_table_start, self._footer.num_global_buffers)
        if not 0 <= index < len(buffers):
            raise InvalidInputError(f"{self.path} has {len(buffers)} global buffers, no buffer {index}")
        position, size = buffers[index]
        return self._read_range(position, size).to_pybytes()

    # ------------------------------------------------------------------ low-level I/O

    def _read_range(self, offset: int, size: int) -> pa.Buffer:
        if offset < 0 or size < 0 or offset + size > self.file_size:
            raise CorruptFileError(self.path, f"byte range [{offset}, {offset + size}) outside the file")
        if size == 0:
            return pa.py_buffer(b"")
        self._source.seek(offset)
        data = self._source.read_buffer(size)
        self.reads += 1
        self.bytes_read += size
        if data.size != size:
            raise CorruptFileError(self.path, f"truncated: wanted {size} bytes at {offset}, got {data.size}")
        return data

    def _table(self, position: int, count: int) -> list[tuple[int, int]]:
        """(position, size) entries of the CMO or GBO table (inside the metadata region)."""
        start = position - self._metadata_start
        raw = self._metadata.slice(start, count * TABLE_ENTRY.size).to_pybytes()
        if start < 0 or len(raw) != count * TABLE_ENTRY.size:
            raise CorruptFileError(self.path, "offset table outside the metadata region")
        return [TABLE_ENTRY.unpack_from(raw, i * TABLE_ENTRY.size) for i in range(count)]

    def column_metadata(self, column: int) -> file2_pb2.ColumnMetadata:
        """The parsed ``ColumnMetadata`` of one column (cached)."""
        if self._legacy is not None:
            raise InvalidInputError(f"{self.path}: legacy files have no column metadata")
        cached = self._metadata_cache.get(column)
        if cached is not None:
            return cached
        if not 0 <= column < self.num_columns:
            raise CorruptFileError(self.path, f"column index {column} out of range ({self.num_columns} columns)")
        position, size = self._columns[column]
        metadata = file2_pb2.ColumnMetadata()
        metadata.ParseFromString(self._metadata.slice(position - self._metadata_start, size).to_pybytes())
        for page in metadata.pages:
            if len(page.buffer_offsets) != len(page.buffer_sizes):
                raise CorruptFileError(self.path, f"column {column}: page buffer tables differ in length")
            for offset, length in zip(page.buffer_offsets, page.buffer_sizes):
                if offset + length > self._metadata_start:
                    raise CorruptFileError(self.path, f"column {column}: page buffer outside the data region")
        self._metadata_cache[column] = metadata
        return metadata

    def _pages_of(self, column: int, selection: np.ndarray | None) -> list[int]:
        """Numbers of the pages of ``column`` holding rows of ``selection`` (all pages when None)."""
        pages = self.column_metadata(column).pages
        if selection is None:
            return list(range(len(pages)))
        chosen = page_selection(self.column_metadata(column), selection, self._entries_per_row.get(column, 1))
        return sorted(chosen)

    def _lazy_buffers(self, page: file2_pb2.ColumnMetadata.Page) -> set[int]:
        """Buffers of a 2.1+ page that a row read fetches only in part: mini-block chunk data,
        full-zip entry data (the rest, chunk metadata, dictionaries, indices, is read whole)."""
        try:
            encoding = any_pb2.Any()
            encoding.ParseFromString(page.encoding.direct.encoding)
            layout = encodings_v2_1_pb2.PageLayout()
            layout.ParseFromString(encoding.value)
        except DecodeError:
            return set()
        which = layout.WhichOneof("layout")
        return {1} if which == "mini_block_layout" else {0} if which == "full_zip_layout" else set()

    def _load_pages(
        self, columns: list[int], selection: np.ndarray | None = None
    ) -> dict[tuple[int, int], list[pa.Buffer]]:
        """Read the buffers of the pages of ``columns`` (those holding ``selection``'s rows) with
        coalesced requests. With a selection in a 2.1+ file the large data buffers stay
        :class:`LazyBuffer` objects: the page decoder reads only the chunks/rows it needs."""
        numbers = {column: self._pages_of(column, selection) for column in columns}
        lazy_pages = selection is not None and self.version in V2_1_VERSIONS
        lazy: dict[tuple[int, int], set[int]] = {}
        wanted: set[tuple[int, int]] = set()
        for column in columns:
            pages = self.column_metadata(column).pages
            for number in numbers[column]:
                page = pages[number]
                skip = lazy[(column, number)] = self._lazy_buffers(page) if lazy_pages else set()
                wanted.update((offset, size) for i, (offset, size) in enumerate(zip(page.buffer_offsets,
                              page.buffer_sizes)) if size and i not in skip)
        ranges = sorted(wanted)
        starts: list[int] = []
        blocks: list[pa.Buffer] = []
        run_start = run_end = -1
        for offset, size in [*ranges, (None, 0)]:
            if offset is None or offset > run_end + COALESCE_GAP or run_start < 0:
                if run_start >= 0:
                    starts.append(run_start)
                    blocks.append(self._read_range(run_start, run_end - run_start))
                if offset is None:
                    break
                run_start, run_end = offset, offset + size
            else:
                run_end = max(run_end, offset + size)
        empty = pa.py_buffer(b"")
        out: dict[tuple[int, int], list[pa.Buffer]] = {}
        for column in columns:
            pages = self.column_metadata(column).pages
            for number in numbers[column]:
                page = pages[number]
                buffers = []
                for index, (offset, size) in enumerate(zip(page.buffer_offsets, page.buffer_sizes)):
                    if not size:
                        buffers.append(empty)
                        continue
                    if index in lazy[(column, number)]:
                        buffers.append(self._lazy(offset, size))
                        continue
                    block = bisect.bisect_right(starts, offset) - 1
                    buffers.append(blocks[block].slice(offset - starts[block], size))
                out[(column, number)] = buffers
        return out

    def _lazy(self, base: int, size: int) -> LazyBuffer:
        """The buffer at file offset ``base`` as a ``LazyBuffer``: small ranges are read with
        ``read_at`` (no seek, no buffer object), large ones as buffers."""
        gap = LOCAL_COALESCE_GAP if isinstance(self._source, (pa.OSFile, pa.MemoryMappedFile)) else COALESCE_GAP

        def read(offset: int, length: int):
            if length <= _SMALL_READ:
                return self._read_at(base + offset, length)
            return self._read_range(base + offset, length)

        return LazyBuffer(read, size, gap)

    def _read_at(self, offset: int, size: int) -> bytes:
        if offset < 0 or offset + size > self.file_size:
            raise CorruptFileError(self.path, f"byte range [{offset}, {offset + size}) outside the file")
        data = self._source.read_at(size, offset)
        self.reads += 1
        self.bytes_read += size
        if len(data) != size:
            raise CorruptFileError(self.path, f"truncated: wanted {size} bytes at {offset}, got {len(data)}")
        return data

    # ------------------------------------------------------------------ reading

    def read(
        self,
        schema: LanceSchema | None = None,
        *,
        column_index: Mapping[int, int] | None = None,
        rows: np.ndarray | Sequence[int] | None = None,
    ) -> pa.Table:
        """Read the top-level fields of ``schema`` (default: the file's schema) as a table.

        ``rows``: row offsets in the file to read (any order, repeats allowed), in that order;
        only the pages (2.1+: mini-block chunks, full-zip rows) holding them are decoded.
        """
        if schema is None:
            if self.schema is None:
                raise CorruptFileError(self.path, f"bad schema in file descriptor: {self._schema_error}")
            schema = self.schema
        if column_index is not None:
            mapping = dict(column_index)
        elif self._column_index is not None:
            mapping = self._column_index
        else:
            if self.schema is None:
                raise CorruptFileError(self.path, f"bad schema in file descriptor: {self._schema_error}")
            mapping = default_column_index(self.schema, self.version)
        selection = inverse = None
        if rows is not None:
            wanted = np.asarray(rows)
            if wanted.size and (wanted.ndim != 1 or wanted.dtype.kind not in "iu"):
                raise InvalidInputError(f"{self.path}: rows must be a one-dimensional array of integers")
            wanted = wanted.astype(np.int64, copy=False)
            if wanted.size and (int(wanted.min()) < 0 or int(wanted.max()) >= self.num_rows):
                raise InvalidInputError(f"{self.path}: row offsets outside the file's {self.num_rows} rows")
            if wanted.size > 1 and not bool(np.all(wanted[1:] > wanted[:-1])):
                selection, inverse = np.unique(wanted, return_inverse=True)
            else:
                selection = wanted
        try:
            if self._legacy is not None:
                table = self._legacy.read(schema)
                return table if selection is None else table.take(pa.array(wanted))
            table = self._read(schema, mapping, selection)
        except LanceError:
            raise
        except _MALFORMED as exc:
            raise CorruptFileError(self.path, f"malformed data: {exc}") from exc
        return table if inverse is None else table.take(pa.array(inverse))

    def _string_byte_columns(self, columns: list[int], mapping: Mapping[int, int]) -> list[int]:
        """The unnamed u8 columns after list-encoded strings (pylance 0.12's 0.3 files)."""
        named = set(mapping.values())
        extra = []
        for column in columns:
            pages = self.column_metadata(column).pages
            if column + 1 < self.num_columns and column + 1 not in named and pages:
                encoding = unwrap_array_encoding(pages[0].encoding, self.path)
                if encoding.WhichOneof("array_encoding") == "list":
                    extra.append(column + 1)
        return extra

    def _read(self, schema: LanceSchema, mapping: dict[int, int], selection: np.ndarray | None = None) -> pa.Table:
        arrow_schema = schema.to_arrow()
        tops = schema.top_level()
        columns = sorted({mapping[i] for top in tops for i in schema.subtree_ids(top.id) if i in mapping})
        if any(not 0 <= c < self.num_columns for c in columns):
            raise CorruptFileError(self.path, f"column index out of range ({self.num_columns} columns)")
        rows = self.num_rows if selection is None else len(selection)
        arrays = []
        if self.version in V2_1_VERSIONS:
            self._entries_per_row = _entries_per_row(schema, mapping, arrow_schema) if selection is not None else {}
            buffers = self._load_pages(columns, selection)
            assembler21 = Assembler21(self, schema, mapping, buffers, selection)
            for top, arrow_field in zip(tops, arrow_schema):
                stored = storage_type(arrow_field.type)
                chunks = assembler21.field_chunks(top, stored, rows)
                arrays.append(_as_type(pa.chunked_array(chunks, type=stored), arrow_field.type))
            return pa.Table.from_arrays(arrays, schema=arrow_schema)
        extra = set(self._string_byte_columns(columns, mapping))
        columns = sorted({*columns, *extra})
        # 2.0: a top-level leaf decodes only the pages holding the rows; struct and list fields
        # (their columns' pages need not line up) are read whole and then taken
        nested = {mapping[i] for top, arrow_field in zip(tops, arrow_schema) if not _is_leaf20(arrow_field.type)
                  for i in schema.subtree_ids(top.id) if i in mapping}
        self._entries_per_row = {}
        whole = sorted(c for c in columns if c in nested or selection is None or c in extra or c + 1 in extra)
        buffers = self._load_pages(whole) if whole else {}
        partial = [c for c in columns if c not in whole]
        if partial:
            buffers.update(self._load_pages(partial, selection))
        assembler = _Assembler(self, schema, mapping, buffers, selection)
        for top, arrow_field in zip(tops, arrow_schema):
            stored = storage_type(arrow_field.type)
            chunks = assembler.field_chunks(top, stored, self.num_rows, top_level=True)
            arrays.append(_as_type(pa.chunked_array(chunks, type=stored), arrow_field.type))
        return pa.Table.from_arrays(arrays, schema=arrow_schema)


class _Assembler:
    """Builds Arrow arrays for fields from their columns' decoded pages."""

    def __init__(
        self,
        reader: LanceFileReader,
        schema: LanceSchema,
        mapping: dict[int, int],
        buffers: dict[tuple[int, int], list[pa.Buffer]],
        selection: np.ndarray | None = None,
    ) -> None:
        self.reader = reader
        self.schema = schema
        self.mapping = mapping
        self.buffers = buffers
        self.selection = selection

    def _pages(
        self, column: int, field: file_pb2.Field
    ) -> Iterator[tuple[file2_pb2.ColumnMetadata.Page, decode.Page, ArrayEncoding]]:
        """(page metadata, decode.Page, ArrayEncoding) of every page of ``column``."""
        path = self.reader.path
        for number, page in enumerate(self.reader.column_metadata(column).pages):
            where = f"column {column} ({field.name!r}) page {number}"
            encoding = unwrap_array_encoding(page.encoding, path)
            yield page, decode.Page(self.buffers[(column, number)], path, where), encoding

    def field_chunks(
        self, field: file_pb2.Field, dtype: pa.DataType, rows: int, *, top_level: bool = False
    ) -> list[pa.Array]:
        """The values of ``field`` (``rows`` of them) as a list of chunks; at top level only the
        selected rows (``self.selection``)."""
        column = self.mapping.get(field.id)
        if top_level and self.selection is not None:
            if column is None:
                return [pa.nulls(len(self.selection), dtype)]
            if _is_leaf20(dtype) and not self._binary_as_list(dtype, column, field):
                return self._selected_leaf(field, dtype, column, rows)
            chunks = self.field_chunks(field, dtype, rows)
            return [_concat(chunks, dtype).take(pa.array(self.selection))]
        if column is None:
            return [pa.nulls(rows, dtype)]
        stored = sum(page.length for page in self.reader.column_metadata(column).pages)
        if stored != rows:
            raise CorruptFileError(self.reader.path, f"field {field.name!r} has {stored} values, expected {rows}")
        if pa.types.is_struct(dtype):
            chunks = [self._struct(field, dtype, column)]
        elif pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
            chunks = [self._list(field, dtype, column)]
        elif self._binary_as_list(dtype, column, field):
            chunks = [self._list(field, dtype, column)]
        else:
            chunks = [self._leaf_page(encoding, page, meta.length, dtype)
                      for meta, page, encoding in self._pages(column, field)]
        if sum(len(c) for c in chunks) != rows:
            raise CorruptFileError(self.reader.path, f"field {field.name!r}: decoded length differs from the pages")
        return chunks if top_level else [_concat(chunks, dtype)]

    def _selected_leaf(self, field: file_pb2.Field, dtype: pa.DataType, column: int, rows: int) -> list[pa.Array]:
        """The selected rows of a top-level leaf: only the pages holding them are decoded."""
        metadata = self.reader.column_metadata(column)
        stored = sum(page.length for page in metadata.pages)
        if stored != rows:
            raise CorruptFileError(self.reader.path, f"field {field.name!r} has {stored} values, expected {rows}")
        chunks = []
        for number, select in page_selection(metadata, self.selection).items():
            meta = metadata.pages[number]
            encoding = unwrap_array_encoding(meta.encoding, self.reader.path)
            page = decode.Page(self.buffers[(column, number)], self.reader.path,
                               f"column {column} ({field.name!r}) page {number}")
            if decode.is_blob_page(encoding, dtype):  # only the selected values' bytes are fetched
                chunks.append(self._blobs(encoding, page, meta.length, dtype, select))
                continue
            chunk = decode.decode_array(encoding, page, meta.length, dtype)
            if len(chunk) != meta.length:
                raise page.corrupt("decoded length differs from the page")
            chunks.append(chunk if len(select) == meta.length else chunk.take(pa.array(select)))
        return chunks or [pa.array([], type=dtype)]

    def _leaf_page(self, encoding: ArrayEncoding, page: decode.Page, n: int, dtype: pa.DataType) -> pa.Array:
        if decode.is_blob_page(encoding, dtype):
            return self._blobs(encoding, page, n, dtype)
        return decode.decode_array(encoding, page, n, dtype)

    def _blobs(self, encoding: ArrayEncoding, page: decode.Page, n: int, dtype: pa.DataType,
               select: np.ndarray | None = None) -> pa.Array:
        """A page of a 2.0 blob column (``lance-encoding:blob``): its values' bytes, fetched from
        where the descriptions point in the file (null: position 1, size 0)."""
        position, size = decode.decode_blob_descriptions(encoding.packed_struct, page, n)
        if select is not None and len(select) != n:
            position, size = position[select], size[select]
        valid = (position != 1) | (size != 0)
        values, offsets = gather_blobs(self.reader, position, size)
        large = dtype in (pa.large_string(), pa.large_binary())
        if not large and len(offsets) and int(offsets[-1]) > 2**31 - 1:
            raise page.unsupported(f"{offsets[-1]} bytes of blobs in one page of a {dtype} column")
        validity = None if bool(valid.all()) else pa.py_buffer(np.packbits(valid, bitorder="little"))
        offsets = offsets if large else offsets.astype(np.int32)
        return pa.Array.from_buffers(dtype, len(size), [validity, pa.py_buffer(offsets), pa.py_buffer(values)])

    def _struct(self, field: file_pb2.Field, dtype: pa.StructType, column: int) -> pa.Array:
        pages = list(self._pages(column, field))
        if pages and all(encoding.WhichOneof("array_encoding") == "packed_struct" for _, _, encoding in pages):
            # a struct marked packed: its children's values side by side in the struct's own column
            return _concat([decode.decode_packed_struct(encoding.packed_struct, page, meta.length, dtype)
                            for meta, page, encoding in pages], dtype)
        rows = 0
        for meta, page, encoding in pages:
            if encoding.WhichOneof("array_encoding") != "struct":
                raise page.unsupported(f"struct encoding {encoding.WhichOneof('array_encoding')!r}")
            rows += meta.length
        children = [
            self.field_chunks(child, dtype.field(i).type, rows)[0]
            for i, child in enumerate(self.schema.children(field.id))
        ]
        return pa.Array.from_buffers(dtype, rows, [None], children=children)

    def _binary_as_list(self, dtype: pa.DataType, column: int, field: file_pb2.Field) -> bool:
        """Strings and binaries that early 2.0 writers (pylance 0.12, file version 0.3) stored as a
        ``list`` of bytes: an offsets column followed by a column of u8 items."""
        if dtype not in decode.BINARY_TYPES:
            return False
        pages = self.reader.column_metadata(column).pages
        return bool(pages) and unwrap_array_encoding(pages[0].encoding, self.reader.path).WhichOneof(
            "array_encoding") == "list"

    def _list(self, field: file_pb2.Field, dtype: pa.DataType, column: int) -> pa.Array:
        ends, masks, lengths = [], [], []
        base = 0
        for meta, page, encoding in self._pages(column, field):
            page_ends, nulls, items = decode.decode_list_page(encoding, page, meta.length)
            ends.append(page_ends + base)
            masks.append(nulls)
            lengths.append(meta.length)
            base += items
        if dtype in decode.BINARY_TYPES:  # bytes in the next column (see _binary_as_list)
            items = self._bytes(field, column + 1, base)
            large = dtype in (pa.large_string(), pa.large_binary())
        else:
            (child,) = self.schema.children(field.id)
            items = self.field_chunks(child, dtype.value_type, base)[0]
            large = pa.types.is_large_list(dtype)
        all_ends = np.concatenate(ends) if ends else np.zeros(0, dtype=np.int64)
        rows = len(all_ends)
        nulls = None
        if any(m is not None for m in masks):
            nulls = np.concatenate([np.zeros(n, bool) if m is None else m for m, n in zip(masks, lengths)])
        where = decode.Page([], self.reader.path, f"list field {field.name!r}")
        offsets = decode.arrow_offsets(all_ends, large, where)
        validity = decode.validity_from_nulls(nulls)
        if dtype in decode.BINARY_TYPES:
            return pa.Array.from_buffers(dtype, rows, [validity, offsets, items])
        return pa.Array.from_buffers(dtype, rows, [validity, offsets], children=[items])

    def _bytes(self, field: file_pb2.Field, column: int, count: int) -> pa.Buffer:
        """The u8 items column of a string stored as a list: ``count`` bytes."""
        if column >= self.reader.num_columns:
            raise CorruptFileError(self.reader.path, f"field {field.name!r}: no column of string bytes")
        pages = [decode.decode_array(encoding, page, meta.length, pa.uint8())
                 for meta, page, encoding in self._pages(column, field)]
        data = pa.concat_arrays(pages) if pages else pa.array([], pa.uint8())
        if len(data) != count or data.null_count:
            raise CorruptFileError(self.reader.path, f"field {field.name!r}: {len(data)} string bytes, expected {count}")
        return data.buffers()[1].slice(data.offset, count) if count else pa.py_buffer(b"")


def _as_type(column: pa.ChunkedArray, dtype: pa.DataType) -> pa.ChunkedArray:
    """A column decoded in its storage type as the field's type (extension types at any depth;
    JSONB as JSON text)."""
    if column.type == dtype:
        return column
    if jsonb.contains_json(dtype):
        return jsonb.from_storage(column, dtype)
    return column.cast(dtype)


def _is_leaf20(dtype: pa.DataType) -> bool:
    return not (pa.types.is_struct(dtype) or pa.types.is_list(dtype) or pa.types.is_large_list(dtype))


def _entries_per_row(schema: LanceSchema, mapping: Mapping[int, int], arrow_schema: pa.Schema) -> dict[int, int | None]:
    """Column -> page entries per row of its leaf (fixed-size lists of structs multiply them; None
    below a list, where pages count rows)."""
    out: dict[int, int | None] = {}

    def walk(field: file_pb2.Field, dtype: pa.DataType, per_row: int | None) -> None:
        column = mapping.get(field.id)
        if column is not None:
            out[column] = per_row
            return
        children = schema.children(field.id)
        if pa.types.is_list(dtype) or pa.types.is_large_list(dtype) or pa.types.is_map(dtype):
            inner, child_rows = dtype.field(0).type if pa.types.is_map(dtype) else dtype.value_type, None
        elif pa.types.is_fixed_size_list(dtype):
            inner, child_rows = dtype.value_type, None if per_row is None else per_row * dtype.list_size
        else:
            inner, child_rows = None, per_row
        for index, child in enumerate(children):
            walk(child, inner if inner is not None else dtype.field(index).type, child_rows)

    for top, arrow_field in zip(schema.top_level(), arrow_schema):
        walk(top, arrow_field.type, 1)
    return out


def _concat(chunks: list[pa.Array], dtype: pa.DataType) -> pa.Array:
    if len(chunks) == 1:
        return chunks[0]
    if not chunks:
        return pa.array([], type=dtype)
    if pa.types.is_dictionary(dtype):
        return pa.chunked_array(chunks, type=dtype).unify_dictionaries().combine_chunks()
    return pa.concat_arrays(chunks)

"""Assembling Arrow fields from the leaf columns of a 2.1+ data file.

In 2.1+ files only leaves have columns (a packed struct is a leaf, and so is a
fixed-size list of primitives); structs and lists exist only as rep/def
layers of their leaves. For a field, every leaf column below it is decoded
page by page into :class:`~airflow_lance.core.file.v21.structure.Level` data
for each node on its path plus the leaf values; pages are concatenated, and
the tree is rebuilt top-down: a struct's validity and a list's offsets come
from the first leaf below it (all leaves below a node carry the same
information), the children from their own leaves. A field with no column
reads as nulls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from airflow_lance.core._proto import file_pb2
from airflow_lance.core.errors import LanceError
from airflow_lance.core.file import blob_v2
from airflow_lance.core.file.blob_bytes import gather_blobs
from airflow_lance.core.file.v21 import pages as page_codec
from airflow_lance.core.file.v21.blocks import Fixed, Variable, bitmap, take, to_arrow
from airflow_lance.core.file.v21.structure import ITEM, LIST, Level, check_layers, unravel
from airflow_lance.core.file.v21.util import Ctx, exclusive_cumsum
from airflow_lance.core.schema import LanceSchema

if TYPE_CHECKING:
    from airflow_lance.core.file.reader import LanceFileReader

_INT32_MAX = 2**31 - 1
#: Mini-block pages with at most this many bytes of chunk data are decoded in groups.
GROUP_PAGE_BYTES = 1 << 20
#: Full reads group only pages this small (larger ones decode faster page by page, in cache).
FULL_GROUP_PAGE_BYTES = 1 << 18


@dataclass
class _Column:
    """A decoded leaf column: levels per path node (outermost first) and leaf arrays."""

    levels: list[Level]
    leaves: list[pa.Array]


def _is_list(dtype: pa.DataType) -> bool:
    """Lists, and maps (a list of (key, value) entries in the file)."""
    return pa.types.is_list(dtype) or pa.types.is_large_list(dtype) or pa.types.is_map(dtype)


def _item_type(dtype: pa.DataType) -> pa.DataType:
    """The items of a list or fixed-size list; a map's entries struct."""
    return dtype.field(0).type if pa.types.is_map(dtype) else dtype.value_type


class Assembler21:
    """Builds Arrow arrays for fields from their leaf columns' pages."""

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
        self.selection = selection  # sorted unique rows of the file to read (None: all)

    # ------------------------------------------------------------------ public

    def field_chunks(self, field: file_pb2.Field, dtype: pa.DataType, rows: int) -> list[pa.Array]:
        """The values of a top-level field (``rows`` of them) as chunks."""
        if blob_v2.is_blob_v2(field.metadata):  # one column of descriptions; the bytes are found through them
            column = self.mapping.get(field.id)
            if column is None:
                return [pa.nulls(rows, dtype)]
            path = [(field, blob_v2.DESCRIPTION)]
            if self._layers(field, column) == 2:  # pylance 4-7: the descriptions one struct level deeper
                path.insert(0, (field, pa.struct([pa.field("description", blob_v2.DESCRIPTION)])))
            decoded = self._decode_column(column, field, path, rows)
            descriptions = pa.concat_arrays(decoded.leaves) if decoded.leaves else pa.array([], blob_v2.DESCRIPTION)
            reader = self.reader
            return [blob_v2.resolve(descriptions, reader._read_range, reader.file_size, reader.path,
                                    reader.blob_sidecars, dtype)]
        column = self.mapping.get(field.id)
        if column is not None and not self.schema.children(field.id):
            decoded = self._decode_column(column, field, [(field, dtype)], rows)
            return decoded.leaves
        leaves: dict[int, _Column] = {}
        self._decode_leaves(field, dtype, [], leaves, rows)
        if not leaves:
            return [pa.nulls(rows, dtype)]
        array = self._build(field, dtype, 0, leaves)
        if len(array) != rows:
            raise self._ctx(field).corrupt(f"field has {len(array)} rows, expected {rows}")
        return [array]

    # ------------------------------------------------------------------ decoding leaves

    def _layers(self, field: file_pb2.Field, column: int) -> int:
        """The number of rep/def layers of a column's first page (0 without pages)."""
        pages = self.reader.column_metadata(column).pages
        if not pages:
            return 0
        layout = page_codec.parse_layout(self._ctx(field, column, 0), pages[0].encoding)
        body = getattr(layout, layout.WhichOneof("layout") or "", None)
        return len(body.layers) if body is not None and hasattr(body, "layers") else 0

    def _ctx(self, field: file_pb2.Field, column: int | None = None, page: int | None = None) -> Ctx:
        where = f"field {field.name!r}"
        if column is not None:
            where = f"column {column} ({field.name!r})" + (f" page {page}" if page is not None else "")
        return Ctx(self.reader.path, where)

    def _decode_leaves(self, field, dtype, path, out, rows) -> None:
        path = [*path, (field, dtype)]
        column = self.mapping.get(field.id)
        children = self.schema.children(field.id)
        if column is not None:
            out[field.id] = self._decode_column(column, field, path, rows)
            return
        for index, child in enumerate(children):
            child_type = _item_type(dtype) if (_is_list(dtype) or pa.types.is_fixed_size_list(dtype)) \
                else dtype.field(index).type
            self._decode_leaves(child, child_type, path, out, rows)

    def _decode_column(self, column: int, leaf: file_pb2.Field, path: list, rows: int) -> _Column:
        kinds = [LIST if _is_list(dtype) else ITEM for _, dtype in path]
        metadata = self.reader.column_metadata(column)
        leaf_type = path[-1][1]
        # a fixed-size list of structs multiplies its column's entries (pages count entries then)
        entries_per_row = 1
        for _, dtype in path[:-1]:
            if _is_list(dtype):
                entries_per_row = None
                break
            if pa.types.is_fixed_size_list(dtype):
                entries_per_row *= dtype.list_size
        stored = sum(page.length for page in metadata.pages)
        file_rows = self.reader.num_rows if self.selection is not None else rows
        if entries_per_row is not None and stored != file_rows * entries_per_row:
            raise self._ctx(leaf, column).corrupt(f"pages hold {stored} rows, the file has {file_rows}")
        selects = page_selection(metadata, self.selection, entries_per_row)
        per_page_levels: list[list[Level]] = []
        leaves: list[pa.Array] = []
        for numbers in self._page_groups(column, leaf, metadata, selects, leaf_type):
            ctx = self._ctx(leaf, column, numbers[0])
            layouts = [page_codec.parse_layout(self._ctx(leaf, column, n), metadata.pages[n].encoding)
                       for n in numbers]
            data = None
            if len(numbers) > 1:
                try:
                    data = page_codec.mini_block_pages(
                        ctx, [layout.mini_block_layout for layout in layouts],
                        [self.buffers[(column, n)] for n in numbers], [metadata.pages[n].length for n in numbers],
                        [None if selects is None else selects[n] for n in numbers])
                except page_codec.Ungroupable:
                    data = None
            if data is None:
                for n, layout in zip(numbers, layouts):
                    select = None if selects is None else selects[n]
                    page_ctx = self._ctx(leaf, column, n)
                    self._decode_one(page_ctx, page_codec.decode_page(
                        page_ctx, layout, self.buffers[(column, n)], metadata.pages[n].length, select),
                        kinds, leaf_type, metadata.pages[n].length if select is None else len(select),
                        per_page_levels, leaves)
                continue
            expected = sum(metadata.pages[n].length if selects is None else len(selects[n]) for n in numbers)
            self._decode_one(ctx, data, kinds, leaf_type, expected, per_page_levels, leaves)
        levels = _concat_levels(per_page_levels, len(path)) if per_page_levels else [
            Level(0, None, np.zeros(1, np.int64) if kind == LIST else None) for kind in kinds]
        return _Column(levels, leaves)

    def _page_groups(self, column, leaf, metadata, selects, leaf_type) -> list[list[int]]:
        """The pages to decode (those holding selected rows); mini-block pages with equal encodings
        grouped (decoded as one; for full reads only small pages, whose per-page work would
        dominate; not for Arrow dictionary columns, whose index type may not hold the
        concatenated dictionaries)."""
        numbers = range(len(metadata.pages)) if selects is None else sorted(selects)
        groups: list[list[int]] = []
        last_key = None
        for number in numbers:
            key = None
            sizes = metadata.pages[number].buffer_sizes
            # grouping copies the pages' chunk data into one buffer: row reads group pages up to 1 MiB,
            # full reads up to 256 KiB (larger pages decode faster page by page, with cache-sized arrays)
            if not pa.types.is_dictionary(leaf_type) and len(sizes) > 1 \
                    and sizes[1] <= (GROUP_PAGE_BYTES if selects is not None else FULL_GROUP_PAGE_BYTES):
                try:
                    key = page_codec.group_key(page_codec.parse_layout(self._ctx(leaf, column, number),
                                                                       metadata.pages[number].encoding))
                except LanceError:
                    key = None
            if key is not None and key == last_key and groups:
                groups[-1].append(number)
            else:
                groups.append([number])
            last_key = key
        return groups

    def _decode_one(self, ctx: Ctx, data: page_codec.PageData, kinds, leaf_type, expected: int,
                    per_page_levels: list, leaves: list) -> None:
        """Levels and leaf values of a decoded page (or group of pages)."""
        check_layers(ctx, data.layers, kinds)
        structure = unravel(ctx, data.rep, data.defs, data.layers, data.entries)
        top = structure.levels[0].length
        if top != expected:
            raise ctx.corrupt(f"page has {top} rows, its metadata says {expected}")
        leaves.append(self._leaf_array(ctx, data, structure.leaf_count, structure.leaf_valid, leaf_type))
        per_page_levels.append(structure.levels)

    def _leaf_array(self, ctx: Ctx, data: page_codec.PageData, count: int, valid, dtype: pa.DataType) -> pa.Array:
        if data.blobs is not None:
            return self._blob_array(ctx, data.blobs, valid, dtype)
        if pa.types.is_struct(dtype) and dtype.num_fields == 0:
            return pa.Array.from_buffers(dtype, count, [bitmap(valid)], children=[])
        if data.scalar is not None or (data.values is None and data.dictionary is None):
            if data.scalar is None or (valid is not None and not valid.any()):
                return pa.nulls(count, dtype)
            value = _scalar_for(ctx, data.scalar, dtype)
            return to_arrow(take(value, np.zeros(count, dtype=np.int64), ctx), dtype, valid, ctx)
        values = data.values
        if values.n != count:
            raise ctx.corrupt(f"{values.n} values for {count} visible entries")
        if data.dictionary is None:
            return to_arrow(values, dtype, valid, ctx)
        if not isinstance(values, Fixed) or values.bits not in (8, 16, 32, 64):
            raise ctx.corrupt("dictionary indices are not integers")
        if not pa.types.is_dictionary(dtype):
            return _dictionary_take(ctx, data.dictionary, values, count, valid, dtype)
        indices = values.data[: count * values.bits // 8].view(f"<u{values.bits // 8}").astype(np.int64)
        if valid is not None:
            indices = np.where(valid, indices, 0)
        if pa.types.is_dictionary(dtype):
            items = to_arrow(data.dictionary, dtype.value_type, None, ctx)
            if count and (int(indices.max()) >= len(items)):
                raise ctx.corrupt(f"dictionary index out of range ({len(items)} items)")
            index_array = pa.Array.from_buffers(dtype.index_type, count, [
                bitmap(valid), pa.py_buffer(indices.astype(dtype.index_type.to_pandas_dtype()))])
            return pa.DictionaryArray.from_arrays(index_array, items)
        return to_arrow(take(data.dictionary, indices, ctx), dtype, valid, ctx)

    def _blob_array(self, ctx: Ctx, blobs, valid, dtype: pa.DataType) -> pa.Array:
        """Fetch blob bytes (stored elsewhere in the file) with one read when they are close together."""
        position, size = blobs
        if dtype not in (pa.large_binary(), pa.binary(), pa.large_string(), pa.string()):
            raise ctx.corrupt(f"blob page for a {dtype} column")
        values, offsets = gather_blobs(self.reader, position, size)
        return to_arrow(Variable(offsets, values, len(size)), dtype, valid, ctx)

    # ------------------------------------------------------------------ rebuilding the tree

    def _build(self, field: file_pb2.Field, dtype: pa.DataType, depth: int, leaves: dict[int, _Column]) -> pa.Array:
        own = leaves.get(field.id)
        if own is not None:
            if not own.leaves:
                return pa.array([], type=dtype)
            return own.leaves[0] if len(own.leaves) == 1 else pa.concat_arrays(own.leaves)
        below = [leaves[i] for i in self.schema.subtree_ids(field.id) if i in leaves]
        level = below[0].levels[depth]
        ctx = self._ctx(field)
        for other in below[1:]:
            if other.levels[depth].length != level.length:
                raise ctx.corrupt("leaf columns disagree on the number of values")
        children = self.schema.children(field.id)
        if pa.types.is_struct(dtype):
            arrays = [self._child(child, dtype.field(i).type, depth + 1, leaves, level.length)
                      for i, child in enumerate(children)]
            return pa.Array.from_buffers(dtype, level.length, [bitmap(level.validity)], children=arrays)
        if _is_list(dtype):
            offsets = level.offsets
            items = self._child(children[0], _item_type(dtype), depth + 1, leaves, int(offsets[-1]))
            large = pa.types.is_large_list(dtype)
            if not large and offsets[-1] > _INT32_MAX:
                raise ctx.corrupt("32-bit list offsets overflow")
            buffer = pa.py_buffer(offsets.astype(np.int64 if large else np.int32))
            return pa.Array.from_buffers(dtype, level.length, [bitmap(level.validity), buffer], children=[items])
        if pa.types.is_fixed_size_list(dtype):
            dim = dtype.list_size
            if level.length % dim:
                raise ctx.corrupt(f"{level.length} entries for fixed-size lists of {dim}")
            items = self._child(children[0], dtype.value_type, depth + 1, leaves, level.length)
            validity = None if level.validity is None else level.validity[::dim]
            return pa.Array.from_buffers(dtype, level.length // dim, [bitmap(validity)], children=[items])
        raise ctx.corrupt(f"no column for leaf field of type {dtype}")

    def _child(self, field, dtype, depth, leaves, length) -> pa.Array:
        if not any(i in leaves for i in self.schema.subtree_ids(field.id)):
            return pa.nulls(length, dtype)
        array = self._build(field, dtype, depth, leaves)
        if len(array) != length:
            raise self._ctx(field).corrupt(f"{len(array)} values, the parent expects {length}")
        return array


def page_selection(metadata, selection: np.ndarray | None, entries_per_row: int | None = 1) -> dict[int, np.ndarray] | None:
    """Page number -> sorted positions in the page of the selected rows (pages without any left out);
    None without a selection. Pages of a column under fixed-size lists of structs count entries
    (``entries_per_row`` of them per row)."""
    if selection is None:
        return None
    if entries_per_row and entries_per_row > 1:
        selection = (selection[:, None] * entries_per_row + np.arange(entries_per_row)).reshape(-1)
    lengths = np.array([page.length for page in metadata.pages], dtype=np.int64)
    bounds = exclusive_cumsum(lengths)
    cuts = np.searchsorted(selection, bounds)
    return {number: selection[cuts[number]: cuts[number + 1]] - bounds[number]
            for number in np.flatnonzero(cuts[1:] > cuts[:-1]).tolist()}


def _scalar_for(ctx: Ctx, scalar, dtype: pa.DataType):
    """Adapt a stored scalar (inline bytes) to the leaf type (booleans are stored as a byte)."""
    value_type = dtype.value_type if pa.types.is_dictionary(dtype) else dtype
    if pa.types.is_boolean(value_type) and isinstance(scalar, Fixed) and scalar.bits == 8:
        return Fixed(np.packbits(scalar.data[:1] != 0, bitorder="little"), 1, 1)
    return scalar


def _concat_levels(pages: list[list[Level]], depth: int) -> list[Level]:
    """Concatenate the per-page levels of one column."""
    if len(pages) == 1:
        return pages[0]
    out = []
    for d in range(depth):
        parts = [p[d] for p in pages]
        length = sum(p.length for p in parts)
        validity = None
        if any(p.validity is not None for p in parts):
            validity = np.concatenate([np.ones(p.length, bool) if p.validity is None else p.validity for p in parts])
        offsets = None
        if parts[0].offsets is not None:
            shifts = exclusive_cumsum(np.array([p.offsets[-1] - p.offsets[0] for p in parts]))
            offsets = np.concatenate([p.offsets[:-1] - p.offsets[0] + s for p, s in zip(parts, shifts[:-1])]
                                     + [shifts[-1:]])
        out.append(Level(length, validity, offsets))
    return out


def _dictionary_take(ctx: Ctx, dictionary, values: Fixed, count: int, valid, dtype: pa.DataType) -> pa.Array:
    """Dictionary-encoded values as a plain array: one Arrow ``take`` of the dictionary (as an array of
    ``dtype``) by the stored indices in their stored width, null slots as null indices."""
    items = to_arrow(dictionary, dtype, None, ctx)
    index_type = {8: pa.uint8(), 16: pa.uint16(), 32: pa.uint32(), 64: pa.uint64()}[values.bits]
    indices = pa.Array.from_buffers(index_type, count, [bitmap(valid), pa.py_buffer(np.ascontiguousarray(values.data))])
    try:
        return items.take(indices)
    except (IndexError, pa.ArrowIndexError) as error:
        raise ctx.corrupt(f"dictionary index out of range ({len(items)} items)") from error


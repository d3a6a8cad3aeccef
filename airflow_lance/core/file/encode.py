"""Arrow chunks -> Lance 2.0 pages (format notes 6.3 / 6.4).

One *column kind* per Lance field decides how that column's values are
paged, sized and encoded:

=============  ==========================================================================
kind           page encoding
=============  ==========================================================================
``fixed``      ``Nullable{no_nulls|some_nulls|all_nulls}`` around ``Flat`` (bool: 1 bit,
               bit-packed) or ``FixedSizeList{items: Nullable{...}}`` (nested FSL too)
``binary``     ``Binary{indices: Nullable{no_nulls{Flat 64}}, bytes: Flat 8,
               null_adjustment = bytes + 1}``; u64 page-relative end offsets, a null row
               stores ``end + adjustment``
``list``       ``List{offsets: Nullable{no_nulls{Flat 64}}, null_offset_adjustment =
               items + 1, num_items}``; the items are the next column
``struct``     ``SimpleStruct``, no buffers, ``length`` = rows
``dictionary`` ``Dictionary{indices: Nullable{no_nulls{Flat key bits}}, items, N}``;
               0-based indices, nulls point at an appended null item
``null``       ``Nullable{all_nulls}``, no buffers
=============  ==========================================================================

A page buffer is a list of segments written back to back, so values of
several chunks (or of one sliced chunk) go to the file without being copied.
Everything here is vectorised; there is no per-row Python code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_lance.core._proto import encodings_v2_0_pb2 as enc
from airflow_lance.core.errors import UnsupportedFeatureError
from airflow_lance.core.file.v21.util import exclusive_cumsum, take_ranges

FIXED, BINARY, LIST, STRUCT, DICTIONARY, NULL = "fixed", "binary", "list", "struct", "dictionary", "null"
#: A struct whose field metadata says ``packed``: its fields' values side by side, one column.
PACKED = "packed"
#: Binary values stored out of line (``lance-encoding:blob``): the page holds (position, size) pairs.
BLOB = "blob"
_BINARY_TYPES = (pa.string(), pa.large_string(), pa.binary(), pa.large_binary())


@dataclass
class EncodedPage:
    """One page ready to be written: encoding, item count and buffers."""

    length: int
    encoding: enc.ArrayEncoding
    buffers: list[list[pa.Buffer]] = field(default_factory=list)

    def add(self, *segments: pa.Buffer) -> int:
        """Append a buffer made of ``segments``; returns its page buffer index."""
        self.buffers.append([s for s in segments if s.size])
        return len(self.buffers) - 1


def column_kind(dtype: pa.DataType, path: str) -> str:
    """The column kind of a Lance field with Arrow type ``dtype`` (writable in 2.0)."""
    if pa.types.is_null(dtype):
        return NULL
    if pa.types.is_struct(dtype):
        return STRUCT
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return LIST
    if pa.types.is_dictionary(dtype):
        if not (dtype.value_type in _BINARY_TYPES or _is_fixed(dtype.value_type)):
            raise UnsupportedFeatureError(f"field {path!r}: dictionary values of type {dtype.value_type}")
        return DICTIONARY
    if dtype in _BINARY_TYPES:
        return BINARY
    if _is_fixed(dtype):
        return FIXED
    raise UnsupportedFeatureError(f"field {path!r}: type {dtype} cannot be written to a 2.0 data file")


def _is_fixed(dtype: pa.DataType) -> bool:
    """Fixed-width values (bool included), or fixed-size lists of them."""
    if pa.types.is_fixed_size_list(dtype):
        return _is_fixed(dtype.value_type)
    return pa.types.is_primitive(dtype) or pa.types.is_fixed_size_binary(dtype) or pa.types.is_decimal(dtype)


def fixed_bits(dtype: pa.DataType) -> int:
    """Bits per row of a ``fixed`` column (FSL: dimension x item bits)."""
    if pa.types.is_fixed_size_list(dtype):
        return dtype.list_size * fixed_bits(dtype.value_type)
    if pa.types.is_fixed_size_binary(dtype):
        return dtype.byte_width * 8
    return dtype.bit_width


# ----------------------------------------------------------------------------- sizing


_LARGE_OFFSET_TYPES = (pa.large_string(), pa.large_binary())


def offsets_of(array: pa.Array) -> np.ndarray:
    """The ``len + 1`` offsets of a non-empty binary or list array (int32 or int64)."""
    width = 8 if array.type in _LARGE_OFFSET_TYPES or pa.types.is_large_list(array.type) else 4
    return np.frombuffer(array.buffers()[1], dtype=f"<i{width}", count=len(array) + 1, offset=array.offset * width)


def page_bytes(kind: str, array: pa.Array) -> int:
    """Approximate encoded size of ``array`` in a page of this kind."""
    n = len(array)
    if kind == FIXED:
        return (n * fixed_bits(array.type) + 7) // 8
    if kind in (BINARY, BLOB):
        offsets = offsets_of(array)
        return int(offsets[-1] - offsets[0]) + 8 * n
    if kind == LIST:
        return 8 * n
    if kind == DICTIONARY:
        return n * array.type.index_type.bit_width // 8
    if kind == PACKED:
        return n * packed_bytes(array.type)
    return 0


def packed_bytes(dtype: pa.StructType) -> int:
    """Bytes per row of a packed struct."""
    return sum(fixed_bits(f.type) for f in dtype) // 8


def rows_that_fit(kind: str, array: pa.Array, budget: int) -> int:
    """How many leading items of ``array`` fit in ``budget`` bytes (may be 0)."""
    if budget <= 0:
        return 0
    if kind in (BINARY, BLOB):
        # every row costs at least 8 bytes (its offset): only a bounded prefix can fit
        candidates = min(len(array), budget // 8 + 1)
        offsets = offsets_of(array)[: candidates + 1]
        cumulative = offsets[1:] - offsets[0] + 8 * np.arange(1, candidates + 1)
        return int(np.searchsorted(cumulative, budget, side="right"))
    if kind == FIXED:
        bits = fixed_bits(array.type)
    elif kind == LIST:
        bits = 64
    elif kind == DICTIONARY:
        bits = array.type.index_type.bit_width
    elif kind == PACKED:
        bits = 8 * packed_bytes(array.type)
    else:
        return len(array)
    return min(len(array), budget * 8 // bits)


# ----------------------------------------------------------------------------- helpers


def _flat(bits: int, index: int) -> enc.ArrayEncoding:
    return enc.ArrayEncoding(flat=enc.Flat(bits_per_value=bits, buffer=enc.Buffer(buffer_index=index)))


def _no_nulls(values: enc.ArrayEncoding) -> enc.ArrayEncoding:
    return enc.ArrayEncoding(nullable=enc.Nullable(no_nulls=enc.Nullable.NoNull(values=values)))


ALL_NULLS = enc.ArrayEncoding(nullable=enc.Nullable(all_nulls=enc.Nullable.AllNull()))


def _bit_buffer(chunks: list[pa.Array], n: int) -> pa.Buffer:
    """Values of boolean ``chunks`` as one LSB-first bitmap starting at bit 0."""
    first = chunks[0]
    if len(chunks) == 1 and first.offset % 8 == 0:
        return first.buffers()[1].slice(first.offset // 8, (n + 7) // 8)
    return pa.concat_arrays(chunks).buffers()[1].slice(0, (n + 7) // 8)


def _validity_buffer(chunks: list[pa.Array], n: int) -> pa.Buffer:
    """Validity of ``chunks`` (which contain nulls) as one bitmap starting at bit 0."""
    first = chunks[0]
    if len(chunks) == 1 and first.offset % 8 == 0 and first.buffers()[0] is not None:
        return first.buffers()[0].slice(first.offset // 8, (n + 7) // 8)
    return _bit_buffer([c.is_valid() for c in chunks], n)


def _null_mask(chunk: pa.Array) -> np.ndarray | None:
    """Boolean numpy mask of the null rows, ``None`` without nulls."""
    if chunk.null_count == 0:
        return None
    return chunk.is_null().to_numpy(zero_copy_only=False)


def _end_offsets(chunks: list[pa.Array]) -> tuple[np.ndarray, int, list[tuple[int, int]]]:
    """Page-relative end offsets (int64, writable, nulls not adjusted), total, per-chunk value ranges."""
    parts, ranges, base = [], [], 0
    for chunk in chunks:
        offsets = offsets_of(chunk)
        start, stop = int(offsets[0]), int(offsets[-1])
        part = offsets[1:].astype(np.int64)
        part += base - start
        parts.append(part)
        ranges.append((start, stop))
        base += stop - start
    ends = parts[0] if len(parts) == 1 else np.concatenate(parts)
    return ends, base, ranges


def _adjust_nulls(ends: np.ndarray, chunks: list[pa.Array], adjustment: int) -> None:
    """Add ``adjustment`` to the end offset of every null row (in place)."""
    if not any(c.null_count for c in chunks):
        return
    masks = [_null_mask(c) for c in chunks]
    mask = masks[0] if len(masks) == 1 else np.concatenate(
        [np.zeros(len(c), bool) if m is None else m for c, m in zip(chunks, masks)])
    ends[mask] += adjustment


# ----------------------------------------------------------------------------- encoders


def encode_page(kind: str, chunks: list[pa.Array], length: int) -> EncodedPage:
    """Encode ``chunks`` (``length`` items in total) as one page of ``kind``."""
    page = EncodedPage(length, ALL_NULLS)
    if kind == STRUCT:
        page.encoding = enc.ArrayEncoding(struct=enc.SimpleStruct())
    elif kind == NULL or not chunks:
        pass
    elif kind == FIXED:
        page.encoding = _encode_fixed(page, chunks, length)
    elif kind == BINARY:
        page.encoding = _encode_binary(page, chunks)
    elif kind == LIST:
        page.encoding = _encode_list(page, chunks)
    elif kind == DICTIONARY:
        page.encoding = _encode_dictionary(page, chunks, length)
    elif kind == PACKED:
        page.encoding = _encode_packed(page, chunks, length)
    return page


def encode_blob_page(chunks: list[pa.Array], n: int, write_buffer) -> EncodedPage:
    """A 2.0 blob page: the values' bytes go to the file first, in one buffer (``write_buffer``
    returns its position), the page holds each value's (position, size) as a packed struct of two
    u64 fields, as pylance writes them: an empty value is (0, 0), a null one (1, 0)."""
    page = EncodedPage(n, ALL_NULLS)
    lengths, parts = [], []
    for chunk in chunks:
        offsets = offsets_of(chunk).astype(np.int64)
        sizes = np.diff(offsets)
        nulls = _null_mask(chunk)
        if nulls is not None:
            sizes[nulls] = 0
        data = chunk.buffers()[2]
        source = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
        parts.append(take_ranges(source, offsets[:-1], sizes))
        lengths.append(sizes)
    size = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
    values = np.concatenate(parts) if parts else np.zeros(0, np.uint8)
    start = write_buffer([pa.py_buffer(values)])[0] if len(values) else 0
    position = np.where(size > 0, start + exclusive_cumsum(size)[:-1], 0)
    nulls = [_null_mask(chunk) for chunk in chunks]
    if any(mask is not None for mask in nulls):
        null = np.concatenate([np.zeros(len(c), bool) if m is None else m for c, m in zip(chunks, nulls)])
        position[null] = 1
    pairs = np.stack([position, size], axis=1).astype("<u8")
    index = page.add(pa.py_buffer(pairs.reshape(-1).view(np.uint8)))
    page.encoding = enc.ArrayEncoding(packed_struct=enc.PackedStruct(
        inner=[_no_nulls(_flat(64, index)), _no_nulls(_flat(64, index))], buffer=enc.Buffer(buffer_index=index)))
    return page


def check_packable(dtype: pa.StructType, path: str) -> None:
    """A 2.0 packed struct: fields of byte-aligned fixed width (pylance's ``PackedStruct``)."""
    for child in dtype:
        if pa.types.is_boolean(child.type) or pa.types.is_fixed_size_list(child.type) or not _is_fixed(child.type):
            raise UnsupportedFeatureError(f"field {path!r}: a packed struct field {child.name!r} of type "
                                          f"{child.type} cannot be written to a 2.0 data file")


def _encode_packed(page: EncodedPage, chunks: list[pa.Array], n: int) -> enc.ArrayEncoding:
    """Every row's field values side by side (no nulls: 2.0 structs have no validity, and a packed
    struct's fields hold none), each field described as a flat of its width over the same buffer."""
    dtype = chunks[0].type
    columns = []
    for index, child in enumerate(dtype):
        width = fixed_bits(child.type) // 8
        parts = []
        for chunk in chunks:
            values = chunk.field(index)
            if values.null_count:
                raise UnsupportedFeatureError(f"packed struct field {child.name!r} holds nulls, which pylance "
                                              "cannot store in a packed struct either")
            raw = np.frombuffer(values.buffers()[1], dtype=np.uint8, count=(values.offset + len(values)) * width)
            parts.append(raw[values.offset * width:].reshape(len(values), width))
        columns.append(np.concatenate(parts) if len(parts) > 1 else parts[0])
    index = page.add(pa.py_buffer(np.ascontiguousarray(np.concatenate(columns, axis=1)).reshape(-1)))
    return enc.ArrayEncoding(packed_struct=enc.PackedStruct(
        inner=[_no_nulls(_flat(fixed_bits(child.type), index)) for child in dtype],
        buffer=enc.Buffer(buffer_index=index)))


def _encode_fixed(page: EncodedPage, chunks: list[pa.Array], n: int) -> enc.ArrayEncoding:
    nulls = sum(c.null_count for c in chunks)
    if nulls == n:
        return ALL_NULLS
    if nulls == 0:
        return _no_nulls(_encode_values(page, chunks, n))
    validity = _flat(1, page.add(_validity_buffer(chunks, n)))
    values = _encode_values(page, chunks, n)
    return enc.ArrayEncoding(nullable=enc.Nullable(some_nulls=enc.Nullable.SomeNull(validity=validity, values=values)))


def _encode_values(page: EncodedPage, chunks: list[pa.Array], n: int) -> enc.ArrayEncoding:
    dtype = chunks[0].type
    if pa.types.is_boolean(dtype):
        return _flat(1, page.add(_bit_buffer(chunks, n)))
    if pa.types.is_fixed_size_list(dtype):
        dim = dtype.list_size
        items = [c.values.slice(c.offset * dim, len(c) * dim) for c in chunks]
        inner = _encode_fixed(page, items, n * dim)
        return enc.ArrayEncoding(fixed_size_list=enc.FixedSizeList(dimension=dim, items=inner))
    width = fixed_bits(dtype) // 8
    segments = [c.buffers()[1].slice(c.offset * width, len(c) * width) for c in chunks]
    return _flat(width * 8, page.add(*segments))


def _encode_binary(page: EncodedPage, chunks: list[pa.Array]) -> enc.ArrayEncoding:
    ends, total, ranges = _end_offsets(chunks)
    adjustment = total + 1
    _adjust_nulls(ends, chunks, adjustment)
    data = [c.buffers()[2].slice(start, stop - start) for c, (start, stop) in zip(chunks, ranges) if stop > start]
    offsets_index = page.add(pa.py_buffer(ends))
    bytes_index = page.add(*data)
    return enc.ArrayEncoding(binary=enc.Binary(
        indices=_no_nulls(_flat(64, offsets_index)),
        bytes=_flat(8, bytes_index),
        null_adjustment=adjustment,
    ))


def _encode_list(page: EncodedPage, chunks: list[pa.Array]) -> enc.ArrayEncoding:
    ends, total, _ = _end_offsets(chunks)
    adjustment = total + 1
    _adjust_nulls(ends, chunks, adjustment)
    return enc.ArrayEncoding(list=enc.List(
        offsets=_no_nulls(_flat(64, page.add(pa.py_buffer(ends)))),
        null_offset_adjustment=adjustment,
        num_items=total,
    ))


def list_items(chunk: pa.Array) -> pa.Array:
    """The item values referenced by a list array slice (null lists included)."""
    offsets = offsets_of(chunk)
    start, stop = int(offsets[0]), int(offsets[-1])
    return chunk.values.slice(start, stop - start)


def _encode_dictionary(page: EncodedPage, chunks: list[pa.Array], n: int) -> enc.ArrayEncoding:
    dtype = chunks[0].type
    dictionary = chunks[0].dictionary
    if len(chunks) > 1 and not all(c.dictionary.equals(dictionary) for c in chunks[1:]):
        chunks = pa.chunked_array(chunks, type=dtype).unify_dictionaries().chunks
        dictionary = chunks[0].dictionary
    indices = [c.indices for c in chunks]
    if any(c.null_count for c in chunks):
        null_index = len(dictionary)
        if null_index > _max_index(dtype.index_type):
            raise UnsupportedFeatureError(
                f"dictionary with {null_index} values and nulls does not fit index type {dtype.index_type}"
            )
        dictionary = pa.concat_arrays([dictionary, pa.nulls(1, dictionary.type)])
        indices = [pc.fill_null(i, pa.scalar(null_index, dtype.index_type)) if i.null_count else i for i in indices]
    index_encoding = _no_nulls(_encode_values(page, indices, n))
    value_kind = BINARY if dictionary.type in _BINARY_TYPES else FIXED
    items = (_encode_binary(page, [dictionary]) if value_kind == BINARY
             else _encode_fixed(page, [dictionary], len(dictionary)))
    return enc.ArrayEncoding(dictionary=enc.Dictionary(
        indices=index_encoding, items=items, num_dictionary_items=len(dictionary)
    ))


def _max_index(index_type: pa.DataType) -> int:
    bits = index_type.bit_width - (1 if pa.types.is_signed_integer(index_type) else 0)
    return (1 << bits) - 1

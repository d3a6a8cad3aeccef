"""Lance 2.0 page encodings -> Arrow arrays.

:func:`decode_array` turns one page of a leaf column into an Arrow array of a
given type; :func:`decode_list_page` decodes the offsets page of a list
column. Arrays are built directly over the page buffers (zero copy) except
where the format forces a conversion (end offsets -> Arrow offsets, bitmap
merges, decompression, dictionary lookups). All of it is vectorised.

Decoded: ``Nullable`` (no_nulls / some_nulls / all_nulls), ``Flat`` (any width,
optionally compressed with ``zstd`` (u64 size prefix) or ``lz4`` (u32 size
prefix, raw block), or scheme ``none``), ``FixedSizeList``, ``Binary``,
``Dictionary`` (Arrow dictionary columns: 0-based with a null item; other
string/binary columns: pylance's auto-dictionary, u8 1-based, 0 = null),
``Constant`` and ``FixedSizeBinary``; ``PackedStruct`` (structs marked packed: their
fixed-width children's values side by side per row, :func:`decode_packed_struct`; blob columns:
a (position, size) description per value, :func:`decode_blob_descriptions`). Anything else raises
``UnsupportedFeatureError``; inconsistent pages raise ``CorruptFileError``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_lance.core._proto import encodings_v2_0_pb2 as enc
from airflow_lance.core.errors import CorruptFileError, UnsupportedFeatureError

_LARGE_OFFSETS = (pa.large_string(), pa.large_binary())
BINARY_TYPES = (pa.string(), pa.binary(), *_LARGE_OFFSETS)
_BINARY_TYPES = BINARY_TYPES
_INT32_MAX = 2**31 - 1


@dataclass
class Page:
    """The buffers of one page plus context for error messages."""

    buffers: list[pa.Buffer]
    path: str
    where: str

    def corrupt(self, reason: str) -> CorruptFileError:
        """A ``CorruptFileError`` naming the file and the page."""
        return CorruptFileError(self.path, f"{self.where}: {reason}")

    def unsupported(self, what: str) -> UnsupportedFeatureError:
        """An ``UnsupportedFeatureError`` naming the file and the page."""
        return UnsupportedFeatureError(f"{self.path}: {self.where}: {what} is not supported")

    def buffer(self, ref: enc.Buffer) -> pa.Buffer:
        """The page buffer a ``Buffer`` message points to."""
        if ref.buffer_type != enc.Buffer.page:
            raise self.unsupported(f"buffer type {enc.Buffer.BufferType.Name(ref.buffer_type)}")
        if ref.buffer_index >= len(self.buffers):
            raise self.corrupt(f"buffer index {ref.buffer_index} out of range ({len(self.buffers)} buffers)")
        return self.buffers[ref.buffer_index]


def _kind(encoding: enc.ArrayEncoding) -> str | None:
    return encoding.WhichOneof("array_encoding")


# ----------------------------------------------------------------------------- flat buffers


def flat_buffer(flat: enc.Flat, page: Page) -> pa.Buffer:
    """The (decompressed) buffer of a ``Flat`` encoding."""
    raw = page.buffer(flat.buffer)
    scheme = flat.compression.scheme if flat.HasField("compression") else ""
    if scheme in ("", "none"):
        return raw
    if scheme == "zstd":
        prefix, codec = struct.Struct("<Q"), "zstd"
    elif scheme == "lz4":
        prefix, codec = struct.Struct("<I"), "lz4_raw"
    else:
        raise page.unsupported(f"compression scheme {scheme!r}")
    if raw.size < prefix.size:
        raise page.corrupt(f"{scheme} buffer too short")
    (size,) = prefix.unpack(raw.slice(0, prefix.size).to_pybytes())
    try:
        out = pa.Codec(codec).decompress(raw.slice(prefix.size), decompressed_size=size)
    except (OSError, MemoryError, pa.ArrowException) as exc:  # a corrupt size prefix can ask for petabytes
        raise page.corrupt(f"cannot decompress {scheme} buffer: {exc}") from exc
    return out


def _sized(buffer: pa.Buffer, nbytes: int, page: Page, what: str) -> pa.Buffer:
    if buffer.size < nbytes:
        raise page.corrupt(f"{what} buffer has {buffer.size} bytes, needs {nbytes}")
    return buffer


def decode_uints(encoding: enc.ArrayEncoding, page: Page, n: int) -> np.ndarray:
    """Unsigned integers without nulls (offsets, indices) as a numpy array."""
    kind = _kind(encoding)
    if kind == "nullable" and encoding.nullable.WhichOneof("nullability") == "no_nulls":
        return decode_uints(encoding.nullable.no_nulls.values, page, n)
    if kind == "flat":
        bits = encoding.flat.bits_per_value
        if bits not in (8, 16, 32, 64):
            raise page.corrupt(f"integer width of {bits} bits")
        buffer = _sized(flat_buffer(encoding.flat, page), n * bits // 8, page, "integer")
        return np.frombuffer(buffer, dtype=f"<u{bits // 8}", count=n)
    if kind == "constant":
        value = encoding.constant.value
        if len(value) not in (1, 2, 4, 8):
            raise page.corrupt(f"constant of {len(value)} bytes")
        return np.full(n, int.from_bytes(value, "little"), dtype=f"<u{len(value)}")
    raise page.unsupported(f"integer encoding {kind!r}")


# ----------------------------------------------------------------------------- arrays


def decode_array(encoding: enc.ArrayEncoding, page: Page, n: int, dtype: pa.DataType) -> pa.Array:
    """Decode ``n`` values of Arrow type ``dtype`` from a page."""
    kind = _kind(encoding)
    if kind == "nullable":
        return _decode_nullable(encoding.nullable, page, n, dtype)
    if pa.types.is_null(dtype):
        raise page.corrupt(f"null column with {kind!r} encoding")
    if kind == "flat":
        return _decode_flat(encoding.flat, page, n, dtype)
    if kind == "fixed_size_list":
        return _decode_fixed_size_list(encoding.fixed_size_list, page, n, dtype)
    if kind == "binary":
        return _decode_binary(encoding.binary, page, n, dtype)
    if kind == "dictionary":
        return _decode_dictionary(encoding.dictionary, page, n, dtype)
    if kind == "constant":
        return _decode_constant(encoding.constant, page, n, dtype)
    if kind == "fixed_size_binary":
        return _decode_fixed_size_binary(encoding.fixed_size_binary, page, n, dtype)
    raise page.unsupported(f"encoding {kind!r} for {dtype}")


def _decode_nullable(nullable: enc.Nullable, page: Page, n: int, dtype: pa.DataType) -> pa.Array:
    which = nullable.WhichOneof("nullability")
    if which == "all_nulls":
        return pa.nulls(n, dtype)
    if which == "no_nulls":
        return decode_array(nullable.no_nulls.values, page, n, dtype)
    if which != "some_nulls":
        raise page.corrupt("nullable encoding without a variant")
    validity = decode_bitmap(nullable.some_nulls.validity, page, n)
    values = decode_array(nullable.some_nulls.values, page, n, dtype)
    return with_validity(values, validity)


def decode_bitmap(encoding: enc.ArrayEncoding, page: Page, n: int) -> pa.Buffer:
    """A validity bitmap (``Flat`` with 1 bit per value)."""
    if _kind(encoding) != "flat" or encoding.flat.bits_per_value != 1:
        raise page.unsupported(f"validity encoding {_kind(encoding)!r}")
    return _sized(flat_buffer(encoding.flat, page), (n + 7) // 8, page, "validity")


def with_validity(values: pa.Array, validity: pa.Buffer) -> pa.Array:
    """``values`` with the given validity bitmap (combined with nulls it already has)."""
    n = len(values)
    if values.null_count:
        mask = pc.and_(pa.Array.from_buffers(pa.bool_(), n, [None, validity]), values.is_valid())
        validity = mask.buffers()[1]
    dtype = values.type
    if pa.types.is_dictionary(dtype):
        indices = with_validity(values.indices, validity)
        return pa.DictionaryArray.from_arrays(indices, values.dictionary)
    if pa.types.is_fixed_size_list(dtype):
        return pa.Array.from_buffers(dtype, n, [validity], children=[values.values], offset=values.offset)
    return pa.Array.from_buffers(dtype, n, [validity, *values.buffers()[1:]], offset=values.offset)


def _fixed_bits(dtype: pa.DataType) -> int | None:
    if pa.types.is_fixed_size_binary(dtype):
        return dtype.byte_width * 8
    if pa.types.is_boolean(dtype) or pa.types.is_primitive(dtype) or pa.types.is_decimal(dtype):
        return dtype.bit_width
    return None


def _decode_flat(flat: enc.Flat, page: Page, n: int, dtype: pa.DataType) -> pa.Array:
    bits = _fixed_bits(dtype)
    if bits is None:
        raise page.corrupt(f"flat encoding for a {dtype} column")
    if flat.bits_per_value != bits:
        raise page.corrupt(f"flat encoding of {flat.bits_per_value} bits for a {dtype} column")
    buffer = _sized(flat_buffer(flat, page), (n * bits + 7) // 8, page, "values")
    return pa.Array.from_buffers(dtype, n, [None, buffer])


def _decode_fixed_size_list(fsl: enc.FixedSizeList, page: Page, n: int, dtype: pa.DataType) -> pa.Array:
    if not pa.types.is_fixed_size_list(dtype) or dtype.list_size != fsl.dimension:
        raise page.corrupt(f"fixed_size_list of dimension {fsl.dimension} for a {dtype} column")
    items = decode_array(fsl.items, page, n * fsl.dimension, dtype.value_type)
    return pa.Array.from_buffers(dtype, n, [None], children=[items])


def clean_end_offsets(
    ends: np.ndarray, adjustment: int, limit: int, page: Page
) -> tuple[np.ndarray, np.ndarray | None]:
    """Undo the null adjustment of 2.0 end offsets: (int64 ends, null mask or None).

    A null row stores its end plus ``adjustment``. Validates that the cleaned
    ends are non-decreasing and within ``[0, limit]``.
    """
    raw = ends.astype(np.uint64, copy=False)
    nulls = None
    if adjustment and len(raw):
        mask = raw >= np.uint64(adjustment)
        if mask.any():
            nulls = mask
            raw = raw - mask.astype(np.uint64) * np.uint64(adjustment)
    out = raw.astype(np.int64)
    if len(out) and (out[0] < 0 or out[-1] > limit or (len(out) > 1 and bool(np.any(out[1:] < out[:-1])))):
        raise page.corrupt("offsets are not monotonic or exceed the data")
    return out, nulls


def validity_from_nulls(nulls: np.ndarray | None) -> pa.Buffer | None:
    """An Arrow validity bitmap from a numpy null mask."""
    if nulls is None:
        return None
    return pa.py_buffer(np.packbits(~nulls, bitorder="little"))


def arrow_offsets(ends: np.ndarray, large: bool, page: Page) -> pa.Buffer:
    """Arrow offsets (leading 0) from int64 end offsets."""
    if not large and len(ends) and ends[-1] > _INT32_MAX:
        raise page.corrupt("32-bit offsets overflow")
    out = np.empty(len(ends) + 1, dtype=np.int64 if large else np.int32)
    out[0] = 0
    out[1:] = ends
    return pa.py_buffer(out)


def _no_nulls(encoding: enc.ArrayEncoding) -> enc.ArrayEncoding:
    """The values of a ``Nullable`` ``no_nulls`` wrapper (pylance 0.15 wraps binary bytes in one)."""
    while _kind(encoding) == "nullable" and encoding.nullable.WhichOneof("nullability") == "no_nulls":
        encoding = encoding.nullable.no_nulls.values
    return encoding


def _decode_binary(binary: enc.Binary, page: Page, n: int, dtype: pa.DataType) -> pa.Array:
    if dtype not in _BINARY_TYPES:
        raise page.corrupt(f"binary encoding for a {dtype} column")
    data_encoding = _no_nulls(binary.bytes)
    if _kind(data_encoding) != "flat" or data_encoding.flat.bits_per_value != 8:
        raise page.unsupported(f"binary bytes encoding {_kind(data_encoding)!r}")
    data = flat_buffer(data_encoding.flat, page)
    ends, nulls = clean_end_offsets(decode_uints(binary.indices, page, n), binary.null_adjustment, data.size, page)
    offsets = arrow_offsets(ends, dtype in _LARGE_OFFSETS, page)
    return pa.Array.from_buffers(dtype, n, [validity_from_nulls(nulls), offsets, data])


def _decode_fixed_size_binary(fsb: enc.FixedSizeBinary, page: Page, n: int, dtype: pa.DataType) -> pa.Array:
    if dtype not in _BINARY_TYPES:
        raise page.corrupt(f"fixed_size_binary encoding for a {dtype} column")
    data_encoding = _no_nulls(fsb.bytes)
    if _kind(data_encoding) != "flat":
        raise page.unsupported(f"fixed_size_binary bytes encoding {_kind(data_encoding)!r}")
    data = _sized(flat_buffer(data_encoding.flat, page), n * fsb.byte_width, page, "fixed_size_binary")
    large = dtype in _LARGE_OFFSETS
    if not large and n * fsb.byte_width > _INT32_MAX:
        raise page.corrupt("32-bit offsets overflow")
    offsets = np.arange(n + 1, dtype=np.int64 if large else np.int32) * fsb.byte_width
    return pa.Array.from_buffers(dtype, n, [None, pa.py_buffer(offsets), data])


def _decode_constant(constant: enc.Constant, page: Page, n: int, dtype: pa.DataType) -> pa.Array:
    bits = _fixed_bits(dtype)
    if bits is None or bits % 8 or len(constant.value) != bits // 8:
        raise page.corrupt(f"constant of {len(constant.value)} bytes for a {dtype} column")
    values = np.tile(np.frombuffer(constant.value, dtype=np.uint8), n)
    return pa.Array.from_buffers(dtype, n, [None, pa.py_buffer(values)])


def _decode_dictionary(dictionary: enc.Dictionary, page: Page, n: int, dtype: pa.DataType) -> pa.Array:
    size = dictionary.num_dictionary_items
    if size > n + 1 + 8 * sum(b.size for b in page.buffers):
        raise page.corrupt(f"{size} dictionary items cannot be stored in this page")
    if pa.types.is_dictionary(dtype):
        items = decode_array(dictionary.items, page, size, dtype.value_type)
        indices = decode_array(dictionary.indices, page, n, dtype.index_type)
        return _arrow_dictionary(indices, items, dtype, page)
    if dtype not in _BINARY_TYPES:
        raise page.corrupt(f"dictionary encoding for a {dtype} column")
    # pylance's automatic dictionary for strings: 1-based indices, 0 = null.
    items = decode_array(dictionary.items, page, size, dtype)
    raw = decode_uints(dictionary.indices, page, n)
    if len(raw) and int(raw.max()) > size:
        raise page.corrupt(f"dictionary index out of range ({int(raw.max())} > {size})")
    positions = raw.astype(np.int32) - 1
    nulls = raw == 0
    take = pa.Array.from_buffers(pa.int32(), n, [validity_from_nulls(nulls if nulls.any() else None),
                                                 pa.py_buffer(positions)])
    return items.take(take)


def _arrow_dictionary(indices: pa.Array, items: pa.Array, dtype: pa.DataType, page: Page) -> pa.Array:
    """A dictionary array; rows pointing at null items become null rows.

    pylance writes nulls as an extra null item at the end; that item is dropped
    again so the array equals what was written.
    """
    if items.null_count:
        null_rows = items.is_null().take(indices.fill_null(0))
        indices = with_validity(indices, pc.invert(pc.or_(null_rows, indices.is_null())).buffers()[1])
        if items.null_count == 1 and not items[len(items) - 1].is_valid:
            items = items.slice(0, len(items) - 1)
    try:
        out = pa.DictionaryArray.from_arrays(indices, items, safe=True)
    except pa.ArrowException as exc:
        raise page.corrupt(f"bad dictionary indices: {exc}") from exc
    return out if out.type == dtype else out.cast(dtype)


def decode_list_page(encoding: enc.ArrayEncoding, page: Page, n: int) -> tuple[np.ndarray, np.ndarray | None, int]:
    """A list column page: (int64 item end offsets, null mask or None, items consumed)."""
    kind = _kind(encoding)
    if kind == "nullable" and encoding.nullable.WhichOneof("nullability") == "all_nulls":
        return np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool), 0
    if kind != "list":
        raise page.unsupported(f"list encoding {kind!r}")
    lst = encoding.list
    ends, nulls = clean_end_offsets(decode_uints(lst.offsets, page, n), lst.null_offset_adjustment,
                                    lst.num_items, page)
    return ends, nulls, lst.num_items


# ----------------------------------------------------------------------------- packed structs and blobs


def _packed_widths(packed: enc.PackedStruct, page: Page) -> list[int]:
    """Bytes per value of each field of a packed struct (flat, byte-aligned, without nulls)."""
    widths = []
    for inner in packed.inner:
        if _kind(inner) == "nullable" and inner.nullable.WhichOneof("nullability") == "no_nulls":
            inner = inner.nullable.no_nulls.values
        if _kind(inner) != "flat":
            raise page.unsupported(f"packed struct field encoding {_kind(inner)!r}")
        bits = inner.flat.bits_per_value
        if bits == 0 or bits % 8 or (inner.flat.HasField("compression") and inner.flat.compression.scheme
                                     not in ("", "none")):
            raise page.unsupported(f"packed struct field of {bits} bits (compression "
                                   f"{inner.flat.compression.scheme or 'none'!r})")
        widths.append(bits // 8)
    return widths


def _packed_rows(packed: enc.PackedStruct, page: Page, n: int) -> tuple[np.ndarray, list[int]]:
    """The page's ``n`` packed rows as an (n, row width) byte matrix, and the fields' widths."""
    widths = _packed_widths(packed, page)
    row = sum(widths)
    buffer = _sized(page.buffer(packed.buffer), n * row, page, "packed struct")
    return np.frombuffer(buffer, dtype=np.uint8, count=n * row).reshape(n, row), widths


def decode_packed_struct(packed: enc.PackedStruct, page: Page, n: int, dtype: pa.StructType) -> pa.Array:
    """A packed struct page (2.0 structs whose field metadata says ``packed``): for each row, every
    field's value in field order, ``n`` rows; 2.0 structs have no validity."""
    rows, widths = _packed_rows(packed, page, n)
    if len(widths) != dtype.num_fields:
        raise page.corrupt(f"packed struct of {len(widths)} fields for a struct of {dtype.num_fields}")
    children, start = [], 0
    for field, width in zip(dtype, widths):
        bits = _fixed_bits(field.type)
        if bits is None or bits != 8 * width:
            raise page.corrupt(f"packed struct field {field.name!r} of {8 * width} bits for a {field.type} value")
        values = np.ascontiguousarray(rows[:, start: start + width])
        children.append(pa.Array.from_buffers(field.type, n, [None, pa.py_buffer(values)]))
        start += width
    return pa.StructArray.from_arrays(children, fields=list(dtype))


def decode_blob_descriptions(packed: enc.PackedStruct, page: Page, n: int) -> tuple[np.ndarray, np.ndarray]:
    """A 2.0 blob column page: (file position, size) of each of its ``n`` values as u64 arrays;
    a null value is stored as position 1, size 0 (an empty one as 0, 0)."""
    rows, widths = _packed_rows(packed, page, n)
    if widths != [8, 8]:
        raise page.corrupt(f"blob descriptions of {widths} bytes (expected two u64 fields)")
    pairs = rows.view("<u8").reshape(n, 2)
    return pairs[:, 0].copy(), pairs[:, 1].copy()


def is_blob_page(encoding: enc.ArrayEncoding, dtype: pa.DataType) -> bool:
    """A 2.0 page of out-of-line binary values (``lance-encoding:blob``)."""
    return dtype in BINARY_TYPES and _kind(encoding) == "packed_struct"

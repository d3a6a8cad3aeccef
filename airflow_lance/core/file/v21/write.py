"""Encoding pages of 2.1/2.2 data files (the simple, fast subset pylance reads).

One leaf column page at a time: the writer hands over the Arrow data of a
field path (validity and offsets of every struct/list node, the leaf values)
for a run of whole rows; :func:`encode_page` turns it into rep/def levels
(``structure.levels``) and picks a layout:

==================  =======================================================
data                layout written
==================  =======================================================
no valid leaf value constant layout (all null), rep/def as raw u16 buffers
fixed width <= 256  mini-block; values ``flat`` (fixed-size lists:
bytes, booleans     ``fixed_size_list`` of flat items, with an item validity
                    buffer when items are null); levels out-of-line
                    bit-packed; chunks of a power of two values
strings/binary with mini-block, ``variable`` with 32-bit (64-bit for large
short values        types) chunk-relative offsets; 2.2: zstd of each chunk
                    (``general``) or FSST codes (``fsst``) when they shrink
dictionary arrays   mini-block with the page dictionary (``variable`` or
                    ``flat`` block) and flat indices
anything larger     full-zip: control word, u32 (u64 for large types) length + bytes or the fixed
                    value per entry; byte-packed repetition index
==================  =======================================================

Chunks are built without per-chunk Python loops: all headers, level blocks
and value slices of a page are gathered into one buffer with a single
``take_interleaved`` (one strided copy per segment kind when all chunks but
the last look alike, as for fixed-width values; else one ``take_ranges``).
The leaf values may come as the chunks the writer received: fixed-width
values and string bytes stay in their chunks and are copied from each
straight into the page's chunk layout (no concatenation first).
Levels are packed without per-value index arrays: chunks' levels are padded
with one gather (or not at all when only the last chunk needs padding), and
0/1 levels with few ones (list starts) are packed from the ones' positions.
2.1 limits chunk buffers to 16-bit sizes (chunks <= 32 KiB); 2.2
(``has_large_chunk``) has 32-bit chunk metadata and buffer sizes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import zstandard

from airflow_lance.core._proto import encodings_v2_1_pb2 as pb
from airflow_lance.core.arrays import sorted_unique
from airflow_lance.core.errors import UnsupportedFeatureError
from airflow_lance.core.file.v21 import bitpack, fsst_encode
from airflow_lance.core.file.v21.structure import (
    ITEM, LIST, NodeData, _visibility_table, layers_for, levels, levels_and_rows, max_rep, visible_threshold)
from airflow_lance.core.file.v21.util import exclusive_cumsum, take_interleaved, take_ranges

#: Values larger than this (bytes per value, on average) go to full-zip pages, as in pylance.
FULL_ZIP_THRESHOLD = 256
#: Target bytes of values per mini-block chunk (2.1 / 2.2) and the value cap per chunk.
CHUNK_BYTES = {(2, 1): 4096, (2, 2): 32768}
MAX_CHUNK_VALUES = 4096
_MAX_CHUNK_TOTAL = {(2, 1): 32 * 1024, (2, 2): 1 << 30}
_MAX_LEVELS = 65535
_PAD = 0xFE
_LARGE = (pa.large_string(), pa.large_binary())


@dataclass
class EncodedPage:
    """A page ready to be written: rows, layout and buffers (each a list of segments)."""

    length: int
    layout: pb.PageLayout
    buffers: list[list[pa.Buffer]] = field(default_factory=list)


# ----------------------------------------------------------------------------- leaf values


@dataclass
class _Leaf:
    """Leaf values of the visible entries, in the form the layouts need."""

    kind: str                       # "fixed" | "bool" | "variable" | "fsl" | "dict" | "null"
    n: int
    bits: int = 0                   # fixed: bits per value (fsl: item bits)
    data: np.ndarray | None = None  # fixed: bytes (bool: LSB bits); variable: bytes
    offsets: np.ndarray | None = None
    dim: int = 0
    item_valid: np.ndarray | None = None
    dims: list[int] = field(default_factory=list)          # fsl: items per value of each nested layer
    layer_valid: list = field(default_factory=list)        # fsl: validity of each layer's items (or None)
    dictionary: pa.Array | None = None
    large: bool = False
    packable: bool = False          # integer-like fixed values: bit-packing may pay off
    pieces: list[np.ndarray] | None = None  # fixed/variable: ``data`` in parts (data None until joined)
    symbol_table: bytes | None = None  # variable: ``data`` holds FSST codes of this (stored) table
    packed: list[tuple[str, int]] | None = None  # a packed struct: ("fixed", bits) / ("variable", length bits)

    def joined(self) -> np.ndarray:
        """``data``, concatenating the ``pieces`` first if the values came in several."""
        if self.data is None and self.pieces is not None:
            self.data = np.concatenate(self.pieces) if self.pieces else np.zeros(0, np.uint8)
        return self.data


def fixed_width(dtype: pa.DataType) -> int | None:
    """Bytes per value of a byte-aligned fixed-width type (None otherwise, booleans included)."""
    if pa.types.is_fixed_size_binary(dtype):
        return dtype.byte_width
    if pa.types.is_boolean(dtype):
        return None
    if pa.types.is_primitive(dtype) or pa.types.is_decimal(dtype):
        return dtype.bit_width // 8
    return None


def _bool_bits(array: pa.Array) -> np.ndarray:
    return np.asarray(array.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)


def _fixed_pieces(values: pa.ChunkedArray) -> _Leaf | None:
    """All of several chunks of fixed-width values that are not worth bit-packing, left in their
    chunks (the mini-block layout copies each straight into its chunks), else None."""
    dtype = values.type
    width = fixed_width(dtype)
    if not width or pa.types.is_null(dtype) or pa.types.is_dictionary(dtype) or _packable(dtype, width):
        return None
    pieces = [_leaf(chunk, None).data for chunk in values.chunks]
    return _Leaf("fixed", len(values), bits=width * 8, pieces=pieces)


def _fsl_pieces(values: pa.ChunkedArray) -> _Leaf | None:
    """Several chunks of fixed-size lists of fixed-width items with no null items: the items'
    bytes left in their chunks (a full-zip page without levels writes them as they are)."""
    if not pa.types.is_fixed_size_list(values.type):
        return None
    leaves = [_leaf(chunk, None) for chunk in values.chunks]
    first = leaves[0]
    if first.bits == 1 or any(valid is not None for leaf in leaves for valid in leaf.layer_valid):
        return None
    return _Leaf("fsl", len(values), bits=first.bits, dim=first.dim, dims=first.dims,
                 layer_valid=[None] * len(first.dims), pieces=[leaf.data for leaf in leaves])


def _variable_pieces(values: pa.ChunkedArray) -> _Leaf | None:
    """All of several chunks of strings/binary: one offsets array (written straight from the chunks'
    offsets), the bytes left in their chunks."""
    if values.type not in (pa.string(), pa.binary(), *_LARGE):
        return None
    large = values.type in _LARGE
    width = 8 if large else 4
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    pieces = []
    at = size = 0
    for chunk in values.chunks:
        count = len(chunk)
        if not count:
            continue
        raw = np.frombuffer(chunk.buffers()[1], dtype=f"<i{width}", count=count + 1, offset=chunk.offset * width)
        start, end = int(raw[0]), int(raw[-1])
        np.add(raw[1:], np.int64(size - start), out=offsets[at + 1: at + count + 1])
        data = chunk.buffers()[2]
        pieces.append(np.frombuffer(data, dtype=np.uint8)[start:end] if end > start else np.zeros(0, np.uint8))
        at, size = at + count, size + end - start
    return _Leaf("variable", len(values), offsets=offsets, large=large, pieces=pieces)


def _packable(dtype: pa.DataType, width: int) -> bool:
    """Integer-like values of 1, 2, 4 or 8 bytes (bit-packing may pay off)."""
    return (pa.types.is_integer(dtype) or pa.types.is_temporal(dtype)) and width in (1, 2, 4, 8)


def _leaf(values: pa.Array | pa.ChunkedArray, slots: np.ndarray | None) -> _Leaf:
    """Leaf values at ``slots`` (None: all of ``values`` in order; -1: a null placeholder)."""
    identity = slots is None
    if isinstance(values, pa.ChunkedArray):
        pieces = (_fixed_pieces(values) or _variable_pieces(values) or _fsl_pieces(values)) \
            if identity and values.num_chunks > 1 else None
        if pieces is not None:
            return pieces
        values = values.chunk(0) if values.num_chunks == 1 else pa.concat_arrays(values.chunks)
    dtype = values.type
    n = len(values) if identity else len(slots)
    take = None if identity else np.where(slots >= 0, slots, 0)
    if pa.types.is_null(dtype):
        return _Leaf("null", n)
    if pa.types.is_struct(dtype):
        return _packed_leaf(values, take, slots, n)
    if pa.types.is_dictionary(dtype):
        indices = values.indices.fill_null(0)
        index = np.asarray(indices.to_numpy(zero_copy_only=False)).astype(np.int64)
        if take is not None:
            index = index[take]
        bits = dtype.index_type.bit_width
        data = index.astype(f"<u{bits // 8}").view(np.uint8)
        return _Leaf("dict", n, bits=bits, data=data, dictionary=values.dictionary, packable=True)
    if pa.types.is_boolean(dtype):
        bits = _bool_bits(values)
        if take is not None:
            bits = bits[take] & (slots >= 0)
        return _Leaf("bool", n, bits=1, data=np.packbits(bits, bitorder="little"))
    width = fixed_width(dtype)
    if width is not None:
        raw = np.frombuffer(values.buffers()[1], dtype=np.uint8, count=(values.offset + len(values)) * width,
                            ) if len(values) else np.zeros(0, np.uint8)
        rows = raw[values.offset * width:].reshape(len(values), width) if width else raw.reshape(len(values), 0)
        if take is not None:
            rows = rows[take]
            if (slots < 0).any():
                rows = rows.copy()
                rows[slots < 0] = 0
        return _Leaf("fixed", n, bits=width * 8, data=np.ascontiguousarray(rows).reshape(-1),
                     packable=_packable(dtype, width))
    if pa.types.is_fixed_size_list(dtype):
        dims, valids = [], []
        current, current_type = values, dtype
        while pa.types.is_fixed_size_list(current_type):
            d = current_type.list_size
            child = current.values.slice(current.offset * d, len(current) * d)
            dims.append(d)
            valids.append(np.asarray(child.is_valid().to_numpy(zero_copy_only=False)) if child.null_count else None)
            current, current_type = child, current_type.value_type
        dim = int(np.prod(dims))
        cumulative = np.cumprod(dims)
        if take is not None:
            valids = [None if v is None else v.reshape(len(values), int(c))[take].reshape(-1)
                      for v, c in zip(valids, cumulative)]
        if pa.types.is_boolean(current_type):  # bit-packed items
            bits = _bool_bits(current).reshape(len(values), dim)
            if take is not None:
                bits = bits[take]
            data, item_bits = np.packbits(bits.reshape(-1), bitorder="little"), 1
        else:
            item_width = fixed_width(current_type)
            if item_width is None:
                raise UnsupportedFeatureError(f"fixed-size lists of {current_type} in 2.1+ files")
            rows = _leaf(current, None).data.reshape(len(values), dim * item_width)
            if take is not None:
                rows = rows[take]
            data, item_bits = np.ascontiguousarray(rows).reshape(-1), item_width * 8
        return _Leaf("fsl", n, bits=item_bits, data=data, dim=dim,
                     item_valid=valids[0] if len(dims) == 1 else None, dims=dims, layer_valid=valids)
    if dtype in (pa.string(), pa.binary(), *_LARGE):
        large = dtype in _LARGE
        width = 8 if large else 4
        offsets = np.frombuffer(values.buffers()[1], dtype=f"<i{width}", count=len(values) + 1,
                                offset=values.offset * width).astype(np.int64)
        data_buffer = values.buffers()[2]
        data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None and data_buffer.size \
            else np.zeros(0, np.uint8)
        if take is None:
            base = int(offsets[0])
            return _Leaf("variable", n, data=data[base: int(offsets[-1])], offsets=offsets - base, large=large)
        lengths = (offsets[1:] - offsets[:-1])[take]
        lengths[slots < 0] = 0
        new_data = take_ranges(data, offsets[:-1][take], lengths)
        return _Leaf("variable", n, data=new_data, offsets=exclusive_cumsum(lengths), large=large)
    raise UnsupportedFeatureError(f"type {dtype} cannot be written to a 2.1+ data file")


def _packed_leaf(values: pa.StructArray, take: np.ndarray | None, slots: np.ndarray | None, n: int) -> _Leaf:
    """A packed struct (``lance-encoding:packed``) as one leaf, as pylance 14 stores it: fixed-width
    fields only, their values side by side per row (a fixed leaf, ``packed_struct`` in mini-blocks);
    with a string/binary field (2.2 only), each row's fields in order, a variable one as its u32
    (u64: large types) length and bytes, a null row without bytes (``variable_packed_struct`` in a
    full-zip page). Its fields cannot hold nulls, as in pylance."""
    count = len(values)
    row_valid = np.ones(count, dtype=bool) if not values.null_count else \
        np.asarray(values.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    spec: list[tuple[str, int]] = []
    sources: list[np.ndarray] = []
    starts: list[np.ndarray] = []
    lengths: list[np.ndarray] = []
    for index, field in enumerate(values.type):
        child = values.field(index)
        if child.null_count and bool(np.any(row_valid & ~np.asarray(
                child.is_valid().to_numpy(zero_copy_only=False), dtype=bool))):
            raise UnsupportedFeatureError(f"packed struct field {field.name!r} holds nulls, which pylance cannot "
                                          "store in a packed struct either")
        width = fixed_width(field.type)
        if width:
            spec.append(("fixed", width * 8))
            sources.append(_leaf(child, None).data)
            starts.append(np.arange(count, dtype=np.int64) * width)
            lengths.append(np.full(count, width, dtype=np.int64))
        elif field.type in (pa.string(), pa.binary(), *_LARGE):
            leaf = _leaf(child, None)
            length_width = 8 if leaf.large else 4
            sizes = np.diff(leaf.offsets)
            spec.append(("variable", length_width * 8))
            sources += [sizes.astype(f"<u{length_width}").view(np.uint8), leaf.joined()]
            starts += [np.arange(count, dtype=np.int64) * length_width, leaf.offsets[:-1]]
            lengths += [np.full(count, length_width, dtype=np.int64), sizes]
        else:
            raise UnsupportedFeatureError(f"packed struct field {field.name!r} of type {field.type}")
    if take is not None:
        row_valid = row_valid[take] & (slots >= 0)
        starts = [column[take] for column in starts]
        lengths = [column[take] for column in lengths]
    if all(kind == "fixed" for kind, _ in spec):
        width = sum(bits for _, bits in spec) // 8
        if width > FULL_ZIP_THRESHOLD:
            raise UnsupportedFeatureError(f"a packed struct of {width} bytes per value (pylance packs at most "
                                          f"{FULL_ZIP_THRESHOLD})")
        data = take_interleaved(sources, [s + b for s, b in zip(starts, _bases(sources))], lengths)
        if take is not None and bool(np.any(slots < 0)):
            data = data.reshape(n, width).copy()
            data[slots < 0] = 0
        return _Leaf("fixed", n, bits=8 * width, data=data.reshape(-1), packed=spec)
    lengths = [np.where(row_valid, column, 0) for column in lengths]
    data = take_interleaved(sources, [s + b for s, b in zip(starts, _bases(sources))], lengths)
    return _Leaf("variable", n, data=data, offsets=exclusive_cumsum(sum(lengths)), packed=spec)


def _bases(sources: list[np.ndarray]) -> np.ndarray:
    """Where each source starts in their concatenation."""
    return exclusive_cumsum(np.array([len(source) for source in sources], dtype=np.int64))[:-1]


def _packed_encoding(leaf: _Leaf, values: pb.CompressiveEncoding | None = None) -> pb.CompressiveEncoding:
    """The value compression of a packed struct leaf (``values``: the fixed leaf's own)."""
    if leaf.kind == "fixed":
        return pb.CompressiveEncoding(packed_struct=pb.PackedStruct(
            bits_per_value=[bits for _, bits in leaf.packed], values=values))
    fields = []
    for kind, bits in leaf.packed:
        if kind == "fixed":
            fields.append(pb.VariablePackedStruct.FieldEncoding(value=_flat(bits), bits_per_value=bits))
        else:
            fields.append(pb.VariablePackedStruct.FieldEncoding(
                value=pb.CompressiveEncoding(variable=pb.Variable(offsets=_flat(bits))), bits_per_length=bits))
    return pb.CompressiveEncoding(variable_packed_struct=pb.VariablePackedStruct(fields=fields))


# ----------------------------------------------------------------------------- page encoding


def encode_page(nodes: list[NodeData], values: pa.Array | pa.ChunkedArray, rows: int,
                version: tuple[int, int], compression: str | None = None) -> EncodedPage:
    """Encode one page of a leaf column (nodes outermost first, ``values`` the leaf's slots, in one
    array or several chunks: fixed-width values are then copied from each chunk into place).

    ``compression``: the field's ``lance-encoding:compression`` (None: ``STRING_COMPRESSION``);
    it decides the compression of string chunks in 2.2 files (``"zstd"``, ``"lz4"``: general
    compression of each chunk; ``"fsst"``: FSST codes, see ``fsst_encode``; ``"none"``: none).
    """
    layers = layers_for(nodes)
    rep, defs, slots, row_starts = levels_and_rows(nodes, layers)
    if pa.types.is_struct(values.type) and values.type.num_fields == 0:
        # pylance writes (and only reads) an empty struct leaf as a nullable item; without any
        # levels it reads as valid
        if layers[0] == pb.REPDEF_ALL_VALID_ITEM:
            layers[0] = pb.REPDEF_NULLABLE_ITEM
            rep, defs, slots = levels(nodes, layers)
            if rep is None and defs is not None and not defs.any():
                defs = None
        return _constant_page(layers, rep, defs, rows)
    if slots is None:
        visible_mask = None
        leaf = _leaf(values, None)
    else:
        # visibility falls as the level rises
        visible_mask = None if defs is None else defs <= visible_threshold(layers)
        if _identity(slots, visible_mask, len(values)):
            leaf = _leaf(values, None)
        else:
            leaf = _leaf(values, slots if visible_mask is None else slots[visible_mask])
    has_valid = defs is None or bool(np.any(defs == 0))
    if leaf.kind == "null" or not has_valid or leaf.n == 0:
        return _constant_page(layers, rep, defs, rows)
    if leaf.kind == "variable" and leaf.packed is None:
        leaf = _maybe_dictionary(leaf)
    layout, buffers = _choose(layers, rep, defs, visible_mask, leaf, version, row_starts, compression)
    return EncodedPage(rows, layout, buffers)


def encode_blob_page(nodes: list[NodeData], values: pa.Array | pa.ChunkedArray, rows: int,
                     version: tuple[int, int], write_buffer) -> EncodedPage:
    """A 2.1 blob page (``lance-encoding:blob``), as pylance writes it: the values' bytes go to the
    file first, in one buffer (``write_buffer`` returns its position); the page is a blob layout of
    the field's layers around a mini-block page of (position, size) pairs, u64 each, without levels:
    an empty value is (0, 0), a null one (its definition level << 16, 0)."""
    if any(node.kind == LIST for node in nodes):
        raise UnsupportedFeatureError("blob values inside lists")
    layers = layers_for(nodes)
    _, defs, _, _ = levels_and_rows(nodes, layers)
    leaf = _leaf(values, None)
    sizes = np.diff(leaf.offsets)
    if defs is not None:
        sizes[defs > 0] = 0
    data = take_ranges(leaf.joined(), leaf.offsets[:-1], sizes)
    start = write_buffer([pa.py_buffer(data)])[0] if len(data) else 0
    position = np.where(sizes > 0, start + exclusive_cumsum(sizes)[:-1], 0)
    if defs is not None:
        position = np.where(defs > 0, defs.astype(np.int64) << 16, position)
    descriptions = pa.StructArray.from_arrays(
        [pa.array(position.astype(np.uint64)), pa.array(sizes.astype(np.uint64))], names=["position", "size"])
    inner = encode_page([NodeData(ITEM, len(descriptions), None)], descriptions, len(descriptions), version)
    layout = pb.PageLayout(blob_layout=pb.BlobLayout(inner_layout=inner.layout, layers=layers))
    return EncodedPage(rows, layout, inner.buffers)


def _identity(slots: np.ndarray, visible: np.ndarray | None, count: int) -> bool:
    """Whether the leaf slots of the visible entries are ``0 .. count - 1`` in order.

    Leaf slots (-1 aside) rise strictly along the entries, so that is
    ``count`` visible entries without a placeholder (-1), found without
    gathering the visible slots.
    """
    if visible is None:
        return len(slots) == count and not (count and int(slots.min()) < 0)
    return int(np.count_nonzero(visible)) == count and not bool(np.any(visible & (slots < 0)))


#: 2.2 string pages with at least this many bytes of values get zstd-compressed chunks (level
#: ``GENERAL_LEVEL``) if a sample of their chunks shrinks below ``GENERAL_MAX_RATIO`` of its size.
GENERAL_MIN_BYTES = 32 * 1024
GENERAL_LEVEL = 1
GENERAL_MAX_RATIO = 0.9
#: Compression of string chunks in 2.2 files when the field does not say
#: (``lance-encoding:compression``): "zstd", "lz4", "fsst" or "none".
STRING_COMPRESSION = "zstd"
_SCHEMES = {"zstd": pb.COMPRESSION_ALGORITHM_ZSTD, "lz4": pb.COMPRESSION_ALGORITHM_LZ4}

#: FSST (``lance-encoding:compression`` ``fsst``) needs a string of at least this many bytes in the
#: page, as in pylance.
FSST_MIN_LONGEST = 5

#: Strings/binary are dictionary-encoded when at most this share of a page's values are distinct.
DICTIONARY_RATIO = 0.5
_DICTIONARY_SAMPLE = 4096


def _maybe_dictionary(leaf: _Leaf) -> _Leaf:
    """A dictionary leaf (page dictionary + u32 indices) for low-cardinality strings, else ``leaf``.

    A sample of the first values decides cheaply whether hashing the whole
    page is worth it (pylance uses a cardinality estimate with the same
    threshold of half the values). When the sample holds every value of the
    page, its distinct values in order of appearance are the page dictionary
    and a lookup in them (cheaper than hashing anew) gives the indices.
    """
    if leaf.n < 256:
        return leaf
    sample = min(leaf.n, _DICTIONARY_SAMPLE)
    distinct = pc.unique(_binary_array(leaf, sample))
    if len(distinct) > DICTIONARY_RATIO * sample:
        return leaf
    array = _binary_array(leaf, leaf.n)
    dictionary, found = distinct, pc.index_in(array, value_set=distinct)
    if found.null_count:  # values the sample has not seen
        encoded = pc.dictionary_encode(array)
        dictionary, found = encoded.dictionary, encoded.indices
    if len(dictionary) > DICTIONARY_RATIO * leaf.n:
        return leaf
    indices = np.asarray(found.to_numpy(zero_copy_only=False))
    indices = (indices.view("<u4") if indices.dtype == np.dtype("<i4") else indices.astype("<u4")).view(np.uint8)
    dictionary = dictionary if leaf.large else dictionary.cast(pa.binary())
    return _Leaf("dict", leaf.n, bits=32, data=indices, dictionary=dictionary, packable=True)


def _binary_array(leaf: _Leaf, count: int) -> pa.LargeBinaryArray:
    """The first ``count`` values of a variable leaf as an Arrow array (no copy unless they span pieces)."""
    size = int(leaf.offsets[count])
    data = leaf.pieces[0] if leaf.data is None and leaf.pieces and len(leaf.pieces[0]) >= size else leaf.joined()
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), count, [
        None, pa.py_buffer(leaf.offsets[: count + 1]), pa.py_buffer(data[:size])])


def _constant_page(layers, rep, defs, rows) -> EncodedPage:
    layout = pb.PageLayout(constant_layout=pb.ConstantLayout(layers=layers))
    buffers: list[list[pa.Buffer]] = []
    simple_null = layers == [pb.REPDEF_NULLABLE_ITEM] and defs is not None and bool(np.all(defs == 1))
    if (rep is not None or defs is not None) and not simple_null:
        buffers = [[pa.py_buffer(rep)] if rep is not None else [],
                   [pa.py_buffer(defs)] if defs is not None else []]
    return EncodedPage(rows, layout, buffers)


def _value_bytes(leaf: _Leaf) -> tuple[int, int]:
    """(average, maximum) bytes per value."""
    if leaf.kind == "variable":
        lengths = np.diff(leaf.offsets)
        return int(lengths.sum()) // max(leaf.n, 1), int(lengths.max()) if leaf.n else 0
    if leaf.kind == "fsl":
        width = leaf.dim * leaf.bits // 8
        return width, width
    if leaf.kind == "bool":
        return 0, 0
    return leaf.bits // 8, leaf.bits // 8


def _choose(layers, rep, defs, visible_mask, leaf: _Leaf, version, rows=None, compression=None):
    if leaf.packed is not None and leaf.kind == "variable":  # pylance: always full-zip, 2.2 only
        if version < (2, 2):
            raise UnsupportedFeatureError("a packed struct with a string or binary field in a 2.1 file (pylance "
                                          "writes those from 2.2 on)")
        return _full_zip(layers, rep, defs, visible_mask, leaf)
    average, largest = _value_bytes(leaf)
    bit_items = leaf.kind == "fsl" and leaf.bits == 1
    if leaf.kind in ("bool", "dict") or bit_items or (
            average <= FULL_ZIP_THRESHOLD and largest <= CHUNK_BYTES[version] * 4):
        scheme = STRING_COMPRESSION if compression is None else compression
        packed = _fsst_leaf(leaf) if leaf.kind == "variable" and version >= (2, 2) and scheme == "fsst" \
            and largest >= FSST_MIN_LONGEST else None
        encoded = _mini_block(layers, rep, defs, visible_mask, packed or leaf, version, rows, compression)
        if encoded is None and packed is not None:
            encoded = _mini_block(layers, rep, defs, visible_mask, leaf, version, rows, "none")
        if encoded is not None:
            return encoded
    if leaf.kind in ("bool", "dict") or bit_items:
        raise UnsupportedFeatureError("a row with more than 65535 nested entries of booleans/dictionary values")
    return _full_zip(layers, rep, defs, visible_mask, leaf)


# ----------------------------------------------------------------------------- mini-block


def _chunk_counts(leaf: _Leaf, version) -> tuple[int, np.ndarray] | None:
    """Values per chunk (a power of two, the same for every chunk but the last)."""
    target = CHUNK_BYTES[version]
    if leaf.kind in ("fixed", "fsl", "dict", "bool"):
        per_value = max(leaf.bits * max(leaf.dim, 1) // 8, 1)
        if leaf.kind == "fsl":
            per_value += sum((int(c) + 7) // 8 for c, v in zip(np.cumprod(leaf.dims), leaf.layer_valid)
                             if v is not None)
        k = 8 if leaf.kind in ("bool", "fsl") else 1
        while k * 2 <= MAX_CHUNK_VALUES and k * 2 * per_value <= target:
            k *= 2
        if (leaf.kind != "bool" and k * per_value > _MAX_CHUNK_TOTAL[version] // 2) or \
                (version == (2, 1) and k * per_value > 65535):
            return None
    else:
        width = 8 if leaf.large else 4
        ends = leaf.offsets
        k = MAX_CHUNK_VALUES
        while True:
            starts = np.arange(0, leaf.n, k)
            stops = np.minimum(starts + k, leaf.n)
            sizes = ends[stops] - ends[starts] + (stops - starts + 1) * width
            if int(sizes.max()) <= target or k == 1:
                break
            k //= 2
        if int(sizes.max()) > min(_MAX_CHUNK_TOTAL[version] // 2, 65535 if version == (2, 1) else 1 << 30):
            return None
    counts = np.full((leaf.n + k - 1) // k, k, dtype=np.int64)
    counts[-1] = leaf.n - k * (len(counts) - 1)
    return k, counts


def _block_widths(leaf: _Leaf) -> np.ndarray:
    """Bits needed by each block of 1024 values (the last block padded with zeros)."""
    dtype = np.dtype(f"<u{leaf.bits // 8}")
    values = leaf.data[: leaf.n * (leaf.bits // 8)].view(dtype)
    blocks = -(-leaf.n // bitpack.BLOCK)
    maxima = np.zeros(blocks, dtype=dtype)
    full = leaf.n // bitpack.BLOCK
    if full:
        maxima[:full] = values[: full * bitpack.BLOCK].reshape(full, bitpack.BLOCK).max(axis=1)
    if leaf.n % bitpack.BLOCK:
        maxima[full] = values[full * bitpack.BLOCK:].max()
    thresholds = (np.uint64(1) << np.arange(leaf.bits, dtype=np.uint64)).astype(dtype)
    return np.searchsorted(thresholds, maxima, side="right").astype(np.int64)


#: Blocks of more distinct widths than this are packed in one pass (:func:`bitpack.pack_blocks`).
_PACK_GROUPS = 2


def _bitpacked_chunks(leaf: _Leaf, widths: np.ndarray, add):
    """Inline bit-packing: one chunk per 1024 values, ``[width][FastLanes words]`` each."""
    bits = leaf.bits
    dtype = np.dtype(f"<u{bits // 8}")
    blocks = len(widths)
    padded = np.zeros(blocks * bitpack.BLOCK, dtype=dtype)
    padded[: leaf.n] = leaf.data[: leaf.n * (bits // 8)].view(dtype)
    matrix = padded.reshape(blocks, bitpack.BLOCK)
    block_bytes = widths * (bitpack.BLOCK // 8)
    groups = sorted_unique(widths).tolist()  # at most bits + 1
    if len(groups) > _PACK_GROUPS:  # e.g. rising ids: all blocks in one pass, in block order
        packed_all = bitpack.pack_blocks(matrix, widths, bits).view(np.uint8)
        packed_start = exclusive_cumsum(block_bytes)[:-1]
    else:
        packed_start = np.zeros(blocks, dtype=np.int64)
        pieces = []
        base = 0
        for width in groups:
            sel = np.flatnonzero(widths == width)
            packed = bitpack.pack(matrix[sel], width, bits).view(np.uint8).reshape(len(sel), -1)
            pieces.append(packed.reshape(-1))
            packed_start[sel] = base + np.arange(len(sel)) * packed.shape[1]
            base += packed.size
        packed_all = np.concatenate(pieces)
    word = bits // 8
    words_start = add(widths.astype(dtype).view(np.uint8))
    packed_base = add(packed_all)
    sizes = word + block_bytes
    encoding = pb.CompressiveEncoding(inline_bitpacking=pb.InlineBitpacking(uncompressed_bits_per_value=bits))
    # each chunk: its width word, then its packed block (gathered once, with the chunk headers)
    return encoding, [(sizes, [(words_start + np.arange(blocks) * word, np.full(blocks, word)),
                               (packed_base + packed_start, block_bytes)])]


def _mini_block(layers, rep, defs, visible_mask, leaf: _Leaf, version, rows=None, compression=None):
    """Mini-block layout of a page, or None if it does not fit (``rows``: first entry of every row)."""
    packing = None
    if leaf.packable and leaf.n >= bitpack.BLOCK:
        widths = _block_widths(leaf)
        packed_bytes = int((widths * (bitpack.BLOCK // 8) + leaf.bits // 8).sum())
        if packed_bytes < 0.9 * leaf.n * leaf.bits // 8:
            packing = widths
    if packing is not None:
        counts = np.full(len(packing), bitpack.BLOCK, dtype=np.int64)
        counts[-1] = leaf.n - bitpack.BLOCK * (len(counts) - 1)
        k = bitpack.BLOCK
    else:
        chunking = _chunk_counts(leaf, version)
        if chunking is None:
            return None
        k, counts = chunking
    chunks = len(counts)
    large = version >= (2, 2)
    # level ranges per chunk: a chunk ends right after its last visible entry
    level_counts = None
    if rep is not None or defs is not None:
        entries = len(rep if rep is not None else defs)
        last_visible = np.minimum(exclusive_cumsum(counts)[1:], leaf.n) - 1
        ends = (np.flatnonzero(visible_mask)[last_visible] if visible_mask is not None else last_visible) + 1
        ends[-1] = entries
        level_counts = np.diff(np.concatenate(([0], ends)))
        if int(level_counts.max()) > _MAX_LEVELS:
            return None
    segments_src: list[np.ndarray] = []
    source_base = [0]

    def add(array: np.ndarray) -> int:
        segments_src.append(array)
        start = source_base[0]
        source_base[0] += len(array)
        return start

    rep_enc = def_enc = None
    rep_part = def_part = None
    top = row_starts = None
    if rep is not None:
        top = max_rep(layers)  # the first entry starts a row
        if int(rep[0]) != top:
            top, rows = max(int(rep.max()), 1), None
        row_starts = rows if rows is not None else np.flatnonzero(rep == top)
        # a single list layer: the row starts are the only ones
        rep_enc, rep_part = _pack_levels(rep, level_counts, add, ones=row_starts if top == 1 else None)
    if defs is not None:
        def_enc, def_part = _pack_levels(defs, level_counts, add)
    if packing is not None:
        value_enc, value_parts = _bitpacked_chunks(leaf, packing, add)
    else:
        value_enc, value_parts = _chunk_values(leaf, counts, k, add, version, compression)
    zeros = add(np.full(8, _PAD, dtype=np.uint8))
    size_width = 4 if large else 2
    nbuf = len(value_parts)
    header_len = 2 + 2 * (rep is not None) + 2 * (defs is not None) + size_width * nbuf
    header = np.zeros((chunks, header_len), dtype=np.uint8)
    header[:, 0:2] = (level_counts if level_counts is not None else np.zeros(chunks, np.int64)).astype(
        "<u2").view(np.uint8).reshape(chunks, 2)
    at = 2
    parts = []
    for part in (rep_part, def_part):
        if part is not None:
            header[:, at: at + 2] = part[0].astype("<u2").view(np.uint8).reshape(chunks, 2)
            at += 2
            parts.append(part)
    for part in value_parts:
        if version == (2, 1) and int(part[0].max()) > 65535:
            return None
        header[:, at: at + size_width] = part[0].astype(f"<u{size_width}").view(np.uint8).reshape(chunks, size_width)
        at += size_width
        parts.append(part)
    header_start = add(header.reshape(-1))
    # segments per chunk: header, pad, then (buffer, pad) for each buffer
    seg_starts = [header_start + np.arange(chunks) * header_len, np.full(chunks, zeros)]
    seg_lengths = [np.full(chunks, header_len), np.full(chunks, -header_len % 8)]
    chunk_bytes = np.full(chunks, header_len + (-header_len % 8), dtype=np.int64)
    for sizes, pieces in parts:
        for starts, lengths in pieces:
            seg_starts.append(starts)
            seg_lengths.append(lengths)
        seg_starts.append(np.full(chunks, zeros))
        seg_lengths.append(-sizes % 8)
        chunk_bytes += sizes + (-sizes % 8)
    if int(chunk_bytes.max()) > _MAX_CHUNK_TOTAL[version]:
        return None
    data = take_interleaved(segments_src, seg_starts, seg_lengths)
    logs = np.full(chunks, int(k).bit_length() - 1, dtype=np.int64)
    logs[-1] = 0
    if chunks > 1 and k == 1:
        return None  # a non-last chunk needs log2(values) > 0
    meta = ((chunk_bytes // 8 - 1) << 4) | logs
    meta_buffer = meta.astype("<u4" if large else "<u2")
    buffers = [[pa.py_buffer(meta_buffer)], [pa.py_buffer(data)]]
    if leaf.kind == "dict":
        buffers.append([pa.py_buffer(_dictionary_block(leaf.dictionary))])
    if leaf.packed is not None:
        value_enc = _packed_encoding(leaf, value_enc)
    mini = pb.MiniBlockLayout(value_compression=value_enc, layers=layers, num_buffers=nbuf,
                              num_items=leaf.n, has_large_chunk=large)
    if rep_enc is not None:
        mini.rep_compression.CopyFrom(rep_enc)
        mini.repetition_index_depth = 1
        buffers.append([pa.py_buffer(_repetition_index(rep, level_counts, top, row_starts))])
    if def_enc is not None:
        mini.def_compression.CopyFrom(def_enc)
    if leaf.kind == "dict":
        mini.dictionary.CopyFrom(_dictionary_encoding(leaf.dictionary))
        mini.num_dictionary_items = len(leaf.dictionary)
    return pb.PageLayout(mini_block_layout=mini), buffers


def _pack_levels(levels_: np.ndarray, counts: np.ndarray, add, ones: np.ndarray | None = None):
    """Out-of-line bit-packed levels per chunk: (encoding, (starts, sizes) in the source).

    ``ones``: when given, the levels are 0/1 and these are the positions of the ones.
    """
    width = 1 if ones is not None else max(bitpack.bits_needed(int(levels_.max())), 1)
    block = bitpack.BLOCK
    full, tail = counts // block, counts % block
    words = 64 * width  # u16 words per packed block
    raw_tail = (tail > 0) & (tail == words)  # a packed tail would look like a raw one: store it raw
    packed_blocks = full + ((tail > 0) & ~raw_tail)
    first_block = exclusive_cumsum(packed_blocks)[:-1]
    level_start = exclusive_cumsum(counts)[:-1]
    raw_counts = np.where(raw_tail, tail, 0)
    packed_values = counts - raw_counts
    packed = _packed_ones(levels_, level_start, packed_values, packed_blocks, ones) if width == 1 else None
    if packed is None:
        matrix = _level_blocks(levels_, level_start, packed_values, packed_blocks)
        packed = bitpack.pack(matrix, width, 16)
    packed = packed.view(np.uint8).reshape(-1)
    block_bytes = words * 2
    chunk_packed = packed_blocks * block_bytes
    chunk_raw = raw_counts * 2
    if not raw_tail.any():
        merged = packed  # chunks' packed blocks are already back to back
    elif not raw_tail[:-1].any():
        merged = np.concatenate([packed, levels_[len(levels_) - int(raw_counts[-1]):].view(np.uint8)])
    else:
        raw = take_ranges(levels_.view(np.uint8), (level_start + packed_values) * 2, chunk_raw)
        # each chunk: its packed blocks then its raw tail -> two ranges; merge into one contiguous copy
        merged = take_ranges(np.concatenate([packed, raw]),
                             np.stack([first_block * block_bytes, len(packed) + exclusive_cumsum(chunk_raw)[:-1]],
                                      axis=1).reshape(-1),
                             np.stack([chunk_packed, chunk_raw], axis=1).reshape(-1))
    start = add(merged)
    sizes = chunk_packed + chunk_raw
    encoding = pb.CompressiveEncoding(out_of_line_bitpacking=pb.OutOfLineBitpacking(
        uncompressed_bits_per_value=16, values=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=width))))
    return encoding, _part(start + exclusive_cumsum(sizes)[:-1], sizes)


#: 0/1 levels with at most this share of ones are packed from the positions of the ones.
_SPARSE_ONES = 1 / 16


def _packed_ones(levels_: np.ndarray, level_start: np.ndarray, packed_values: np.ndarray,
                 packed_blocks: np.ndarray, ones: np.ndarray | None) -> np.ndarray | None:
    """Packed blocks of 0/1 levels built from the ones (list starts are rare), if the chunks' packed
    levels are back to back with padding only at the end (see :func:`_level_blocks`), else None."""
    if not _contiguous(level_start, packed_values, packed_blocks):
        return None
    total = int(packed_values.sum())  # the chunks' levels start at 0: a raw tail can only end the page
    if ones is None:
        ones = np.flatnonzero(levels_[:total] != 0)  # (nonzero of booleans is much faster)
    else:
        ones = ones[: np.searchsorted(ones, total)]
    if len(ones) > _SPARSE_ONES * max(total, 1):
        return None
    return bitpack.pack_ones(ones, int(packed_blocks.sum()), 16)


def _contiguous(level_start: np.ndarray, packed_values: np.ndarray, packed_blocks: np.ndarray) -> bool:
    """No chunk but the last pads its packed levels, and no raw tail lies between chunks."""
    padding = packed_blocks * bitpack.BLOCK - packed_values
    return not padding[:-1].any() and (len(level_start) < 2 or bool(np.all(
        level_start[1:] == level_start[:-1] + packed_values[:-1])))


def _level_blocks(levels_: np.ndarray, level_start: np.ndarray, packed_values: np.ndarray,
                  packed_blocks: np.ndarray) -> np.ndarray:
    """``(blocks, 1024)`` u16 matrix: each chunk's packed levels, its last block padded with zeros.

    When no chunk but the last needs padding (and no raw tail sits between
    chunks) this is the levels themselves, padded once at the end.
    """
    block = bitpack.BLOCK
    nblocks = int(packed_blocks.sum())
    padding = packed_blocks * block - packed_values
    total = int(packed_values.sum())
    if _contiguous(level_start, packed_values, packed_blocks):
        matrix = np.zeros(nblocks * block, dtype=np.uint16)
        begin = int(level_start[0]) if len(level_start) else 0
        matrix[:total] = levels_[begin: begin + total]
        return matrix.reshape(nblocks, block)
    source = np.concatenate([levels_.astype(np.uint16, copy=False), np.zeros(block, dtype=np.uint16)])
    starts = np.stack([level_start, np.full(len(level_start), len(levels_))], axis=1).reshape(-1)
    lengths = np.stack([packed_values, padding], axis=1).reshape(-1)
    return take_ranges(source, starts, lengths).reshape(nblocks, block)


def _flat(bits: int) -> pb.CompressiveEncoding:
    return pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=bits))


def _chunk_values(leaf: _Leaf, counts: np.ndarray, k: int, add, version=(2, 1), compression=None):
    """Value buffers of every chunk: (encoding, [(starts, sizes) per buffer])."""
    first = exclusive_cumsum(counts)[:-1]
    scheme = STRING_COMPRESSION if compression is None else compression
    if leaf.kind == "variable" and leaf.symbol_table is not None:
        encoding, parts = _variable_chunks(leaf, first, counts, add)
        return pb.CompressiveEncoding(fsst=pb.Fsst(values=encoding, symbol_table=leaf.symbol_table)), parts
    if leaf.kind == "variable" and version >= (2, 2) and scheme in _SCHEMES and \
            int(leaf.offsets[-1]) >= GENERAL_MIN_BYTES:
        return _general_variable(leaf, first, counts, add, scheme)
    if leaf.kind == "variable":
        return _variable_chunks(leaf, first, counts, add)
    if leaf.kind in ("fixed", "dict"):
        width = leaf.bits // 8
        start = _add_data(leaf, add)
        return _flat(leaf.bits), [_part(start + first * width, counts * width)]
    if leaf.kind == "bool":
        start = add(leaf.data)
        return _flat(1), [_part(start + first // 8, (counts + 7) // 8)]
    if leaf.kind == "fsl":
        row_bits = leaf.dim * leaf.bits  # chunks hold a multiple of 8 rows: byte-aligned starts
        parts = []
        for cumulative, valid in zip(np.cumprod(leaf.dims), leaf.layer_valid):
            if valid is not None:  # validity of this layer's items, outer layers first
                start = add(np.packbits(valid, bitorder="little"))
                parts.append(_part(start + first * int(cumulative) // 8, (counts * int(cumulative) + 7) // 8))
        start = _add_data(leaf, add)
        parts.append(_part(start + first * row_bits // 8, (counts * row_bits + 7) // 8))
        return _fsl_encoding(leaf), parts
    raise AssertionError(leaf.kind)


def _variable_chunks(leaf: _Leaf, first: np.ndarray, counts: np.ndarray, add):
    """Chunk buffers of strings/binary: per chunk (n + 1) offsets relative to the chunk buffer, then the bytes."""
    width = 8 if leaf.large else 4
    offsets = leaf.offsets
    chunk_data = offsets[first + counts] - offsets[first]
    header = (counts + 1) * width
    local_start = add(_chunk_offsets(offsets, first, counts, header, np.dtype(f"<u{width}")).view(np.uint8))
    data_start = _add_data(leaf, add)
    pad_start = add(np.full(8, 72, dtype=np.uint8))
    # one buffer per chunk: its offsets, its bytes, padding to the offset width (gathered once)
    pad = -(header + chunk_data) % width
    sizes = header + chunk_data + pad
    encoding = pb.CompressiveEncoding(variable=pb.Variable(offsets=_flat(8 * width)))
    return encoding, [(sizes, [(local_start + exclusive_cumsum(header)[:-1], header),
                               (data_start + offsets[first], chunk_data),
                               (np.full(len(counts), pad_start), pad)])]


def _general_variable(leaf: _Leaf, first: np.ndarray, counts: np.ndarray, add, scheme: str = "zstd"):
    """String chunks compressed with zstd (``general`` around ``variable``) when that pays.

    pylance chooses FSST for such pages (and this wrapping when a field asks
    for ``lance-encoding:compression``); zstd of each chunk buffer is as
    small or smaller and, done by the codec in C, much cheaper than an FSST
    parse in numpy. The chunk buffers are gathered once, a sample of them is
    compressed first, and the page stays uncompressed unless it shrinks the
    sample below ``GENERAL_MAX_RATIO`` (random bytes, UUIDs in binary).
    """
    sources: list[np.ndarray] = []
    base = [0]

    def add_local(array: np.ndarray) -> int:
        sources.append(array)
        start = base[0]
        base[0] += len(array)
        return start

    encoding, parts = _variable_chunks(leaf, first, counts, add_local)
    sizes, pieces = parts[0]
    raw = take_interleaved(sources, [starts for starts, _ in pieces], [lengths for _, lengths in pieces])
    compressed = compress_chunks(raw, sizes, GENERAL_MAX_RATIO, scheme)
    if compressed is None:
        start = add(raw)
        return encoding, [_part(start + exclusive_cumsum(sizes)[:-1], sizes)]
    data, packed_sizes = compressed
    start = add(data)
    general = pb.CompressiveEncoding(general=pb.General(
        compression=pb.BufferCompression(scheme=_SCHEMES[scheme], level=GENERAL_LEVEL)
        if scheme == "zstd" else pb.BufferCompression(scheme=_SCHEMES[scheme]), values=encoding))
    return general, [_part(start + exclusive_cumsum(packed_sizes)[:-1], packed_sizes)]


#: Chunks compressed first to decide whether a page's chunks are worth compressing.
_GENERAL_SAMPLE_CHUNKS = 4


def compress_chunks(raw: np.ndarray, sizes: np.ndarray, max_ratio: float, scheme: str = "zstd",
                    level: int = GENERAL_LEVEL) -> tuple[np.ndarray, np.ndarray] | None:
    """Each chunk of ``raw`` (chunk sizes ``sizes``, back to back) in Lance's buffer format (zstd:
    ``u64`` size, then a zstd frame; lz4: ``u32`` size, then a raw lz4 block): (bytes, chunk
    sizes), or None when a sample of the first chunks does not shrink below ``max_ratio`` of its
    size (or the whole does not shrink)."""
    prefix = 8 if scheme == "zstd" else 4
    bounds = exclusive_cumsum(sizes)
    sample = min(_GENERAL_SAMPLE_CHUNKS, len(sizes))
    frames = _compressed(raw, bounds, 0, sample, scheme, level)
    if sum(len(frame) + prefix for frame in frames) > max_ratio * int(bounds[sample]):
        return None
    frames += _compressed(raw, bounds, sample, len(sizes), scheme, level)
    frame_sizes = np.fromiter((len(frame) for frame in frames), dtype=np.int64, count=len(frames))
    if int(frame_sizes.sum()) + prefix * len(frames) >= len(raw):
        return None
    # each chunk: its uncompressed size, then its frame (one join, no per-chunk copies)
    heads = np.asarray(sizes, dtype=f"<u{prefix}").view(np.uint8).reshape(len(frames), prefix)
    parts: list = [None] * (2 * len(frames))
    parts[0::2] = [memoryview(head) for head in heads]
    parts[1::2] = frames
    return np.frombuffer(b"".join(parts), dtype=np.uint8), frame_sizes + prefix


def _compressed(raw: np.ndarray, bounds: np.ndarray, first: int, end: int, scheme: str, level: int) -> list:
    """The compressed frames of chunks ``first`` to ``end`` (exclusive) of ``raw`` (buffer objects)."""
    if first >= end:
        return []
    if scheme == "zstd":
        compressor = zstandard.ZstdCompressor(level=level)
        if "multi_compress_to_buffer" in zstandard.backend_features:  # not on the cffi backend (PyPy)
            segments = np.empty((end - first, 2), dtype="<u8")
            segments[:, 0] = bounds[first:end]
            segments[:, 1] = np.diff(bounds[first: end + 1])
            # one call into the codec for all the chunks, without the GIL (pages are encoded on
            # several threads at once, see ``core.file.writer``)
            collection = compressor.multi_compress_to_buffer(
                zstandard.BufferWithSegments(raw, segments.tobytes()), threads=1)
            return [collection[index] for index in range(len(collection))]
        compress = compressor.compress
    else:
        codec = pa.Codec("lz4_raw")

        def compress(data: memoryview) -> pa.Buffer:
            return codec.compress(data, asbytes=False)
    view = memoryview(raw)
    starts, stops = bounds[first:end].tolist(), bounds[first + 1: end + 1].tolist()
    return [compress(view[start:stop]) for start, stop in zip(starts, stops)]


def _fsst_leaf(leaf: _Leaf) -> _Leaf | None:
    """The leaf's strings as FSST codes (table trained on a sample of them), or None when the page
    is too small or the codes do not shrink the sample's bytes below ``GENERAL_MAX_RATIO``."""
    size = int(leaf.offsets[-1])
    if size < GENERAL_MIN_BYTES:
        return None
    data = leaf.joined()
    table = fsst_encode.train(data, leaf.offsets)
    head = min(leaf.n, max(int(leaf.n * fsst_encode.SAMPLE_BYTES / size), 1))
    codes, offsets = fsst_encode.compress(table, data, leaf.offsets[: head + 1])
    if int(offsets[-1]) > GENERAL_MAX_RATIO * int(leaf.offsets[head]):
        return None
    if head < leaf.n:
        rest, rest_offsets = fsst_encode.compress(table, data, leaf.offsets[head:])
        codes = np.concatenate([codes, rest])
        offsets = np.concatenate([offsets, int(offsets[-1]) + rest_offsets[1:]])
    if int(offsets[-1]) >= size:
        return None
    return _Leaf("variable", leaf.n, data=codes, offsets=offsets, large=leaf.large, symbol_table=table.export())


def _add_data(leaf: _Leaf, add) -> int:
    """Add the leaf's bytes to the gather's sources (its pieces back to back); where they start."""
    if leaf.data is not None or not leaf.pieces:
        return add(leaf.joined())
    return [add(piece) for piece in leaf.pieces][0]


def _part(starts: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    """A chunk buffer that is one range per chunk: (sizes, [(starts, sizes)])."""
    return sizes, [(starts, sizes)]


def _chunk_offsets(offsets: np.ndarray, first: np.ndarray, counts: np.ndarray, header: np.ndarray,
                   dtype: np.dtype) -> np.ndarray:
    """Every chunk's ``counts + 1`` value offsets, relative to the chunk buffer (after its ``header``).

    All chunks but the last hold the same number of values, so their
    offsets are rows of one strided view of ``offsets``: one subtraction.
    """
    chunks = len(counts)
    k = int(counts[0])
    out = np.empty(int(counts.sum()) + chunks, dtype=dtype)
    body = chunks - 1
    if body and not (bool(np.all(counts[:-1] == k)) and bool(np.all(first[:-1] == np.arange(body) * k))):
        # not evenly chunked (``_chunk_counts`` never does this): index every offset
        chunk = np.repeat(np.arange(chunks), counts + 1)
        index = np.arange(len(out), dtype=np.int64) + np.repeat(first - exclusive_cumsum(counts + 1)[:-1], counts + 1)
        out[:] = offsets[index] - (offsets[first] - header)[chunk]
        return out
    if body:
        rows = np.lib.stride_tricks.sliding_window_view(offsets[: body * k + 1], k + 1)[::k]
        shift = (offsets[first[:-1]] - header[:-1])[:, None]
        np.subtract(rows, shift, out=out[: body * (k + 1)].reshape(body, k + 1), casting="unsafe")
    begin = int(first[-1])
    out[body * (k + 1):] = offsets[begin: begin + int(counts[-1]) + 1] - (offsets[begin] - header[-1])
    return out


def _fsl_encoding(leaf: _Leaf) -> pb.CompressiveEncoding:
    encoding = _flat(leaf.bits)
    for dim, valid in reversed(list(zip(leaf.dims, leaf.layer_valid))):
        encoding = pb.CompressiveEncoding(fixed_size_list=pb.FixedSizeList(
            items_per_value=dim, values=encoding, has_validity=valid is not None))
    return encoding


def _repetition_index(rep: np.ndarray, level_counts: np.ndarray, top: int,
                      positions: np.ndarray | None = None) -> np.ndarray:
    """Per chunk (rows finished in it, leftover entries), as pylance computes it (``positions``: row starts)."""
    chunks = len(level_counts)
    starts = exclusive_cumsum(level_counts)
    if positions is None:
        positions = np.flatnonzero(rep == top)
    seen = np.searchsorted(positions, starts, side="left")  # row starts before each chunk boundary
    first_is_top = (rep[starts[:-1]] == top).astype(np.int64)
    rows = seen[1:] - seen[:-1] - first_is_top
    last_top = seen[1:] - 1
    last_pos = np.where(last_top >= 0, positions[np.maximum(last_top, 0)], -1)
    has_top = last_pos >= starts[:-1]
    leftovers = np.where(has_top, starts[1:] - last_pos, level_counts)
    leftovers[-1] = 0
    # a chunk starting with a new row completes the previous chunk's leftovers
    begins_row = np.zeros(chunks, dtype=bool)
    begins_row[1:] = first_is_top[1:] == 1
    fix = np.flatnonzero(begins_row) - 1
    fix = fix[leftovers[fix] != 0]
    rows[fix] += 1
    leftovers[fix] = 0
    rows[-1] += 1
    return np.stack([rows, leftovers], axis=1).astype("<u8").reshape(-1)


def _dictionary_block(dictionary: pa.Array) -> np.ndarray:
    """A page dictionary as a block: variable (``[u32 32][u32 start][offsets][bytes]``) or flat."""
    dtype = dictionary.type
    if dtype in (pa.string(), pa.binary(), *_LARGE):
        leaf = _leaf(dictionary, None)
        if dtype in _LARGE:  # readers expect the offset width of the column's type
            header = np.array([64, 0, 16 + 8 * len(leaf.offsets), 0], dtype="<u4")
            offsets = leaf.offsets.astype("<u8")
        else:
            header = np.array([32, 8 + 4 * len(leaf.offsets)], dtype="<u4")
            offsets = leaf.offsets.astype("<u4")
        return np.concatenate([header.view(np.uint8), offsets.view(np.uint8), leaf.data])
    leaf = _leaf(dictionary, None)
    if leaf.kind != "fixed":
        raise UnsupportedFeatureError(f"dictionary values of type {dtype} in 2.1+ files")
    return leaf.data


def _dictionary_encoding(dictionary: pa.Array) -> pb.CompressiveEncoding:
    if dictionary.type in (pa.string(), pa.binary(), *_LARGE):
        bits = 64 if dictionary.type in _LARGE else 32
        return pb.CompressiveEncoding(variable=pb.Variable(offsets=_flat(bits)))
    return _flat(_leaf(dictionary, None).bits)


# ----------------------------------------------------------------------------- full-zip


def _full_zip(layers, rep, defs, visible_mask, leaf: _Leaf):
    entries = len(rep) if rep is not None else len(defs) if defs is not None else leaf.n
    max_rep_level = sum(layer in (pb.REPDEF_ALL_VALID_LIST, pb.REPDEF_NULLABLE_LIST, pb.REPDEF_EMPTYABLE_LIST,
                                  pb.REPDEF_NULL_AND_EMPTY_LIST) for layer in layers)
    max_def_level = int(_visibility_table(layers).shape[0] - 1)
    bits_rep = bitpack.bits_needed(max_rep_level) if rep is not None else 0
    bits_def = bitpack.bits_needed(max_def_level) if defs is not None else 0
    total_bits = bits_rep + bits_def
    word = 0 if total_bits == 0 else 1 if total_bits <= 8 else 2 if total_bits <= 16 else 4
    control = np.zeros(entries, dtype=np.int64)
    if rep is not None:
        control |= rep.astype(np.int64) << bits_def
    if defs is not None:
        control |= defs.astype(np.int64)
    control_bytes = control.astype(f"<u{word}").view(np.uint8) if word else np.zeros(0, np.uint8)
    visible = np.ones(entries, dtype=bool) if visible_mask is None else visible_mask
    valid = visible if defs is None else defs == 0
    layout = pb.FullZipLayout(bits_rep=bits_rep, bits_def=bits_def, num_items=entries,
                              num_visible_items=leaf.n, layers=layers)
    # per entry: [control word][length (variable, valid)][value (visible)]
    value_len = np.zeros(entries, dtype=np.int64)
    value_src = np.zeros(entries, dtype=np.int64)
    prefix_len = np.full(entries, word, dtype=np.int64)
    if leaf.kind == "variable":
        # lengths as wide as the type's offsets: pylance refuses 32-bit lengths for large types
        length_bytes = 8 if leaf.large else 4
        if leaf.packed is not None:  # rows of a packed struct: u32 row lengths, as pylance writes them
            length_bytes = 4
            if int(np.diff(leaf.offsets).max(initial=0)) >= 1 << 32:
                raise UnsupportedFeatureError("a packed struct row of 4 GiB or more")
        layout.bits_per_offset = 8 * length_bytes
        layout.value_compression.CopyFrom(_packed_encoding(leaf) if leaf.packed is not None else
                                          pb.CompressiveEncoding(variable=pb.Variable(offsets=_flat(8 * length_bytes))))
        lengths = np.diff(leaf.offsets)
        vis_index = np.flatnonzero(visible)
        value_len[vis_index] = np.where(valid[vis_index], lengths, 0)
        value_src[vis_index] = leaf.offsets[:-1]
        has_len = visible & valid
        prefix_len[has_len] += length_bytes
        prefix = np.zeros((entries, word + length_bytes), dtype=np.uint8)
        if word:
            prefix[:, :word] = control_bytes.reshape(entries, word)
        prefix[:, word:] = value_len.astype(f"<u{length_bytes}").view(np.uint8).reshape(entries, length_bytes)
        data = leaf.joined()
    else:
        width = leaf.bits * max(leaf.dim, 1) // 8
        prefixes = []
        if leaf.kind == "fsl":
            encoding = _fsl_encoding(leaf)
            prefixes = [np.packbits(valid.reshape(leaf.n, int(count)), axis=1, bitorder="little")
                        for count, valid in zip(np.cumprod(leaf.dims), leaf.layer_valid) if valid is not None]
        elif leaf.kind == "fixed":
            encoding = _flat(leaf.bits)
        else:
            raise UnsupportedFeatureError(f"{leaf.kind} values in a full-zip page")
        layout.bits_per_value = (width + sum(p.shape[1] for p in prefixes)) * 8
        layout.value_compression.CopyFrom(encoding)
        if rep is None and (defs is None or bool(visible.all())) and not word and not prefixes:
            # the values as they are (left in the chunks they came in: no copy)
            pieces = leaf.pieces if leaf.data is None and leaf.pieces else [leaf.data]
            return pb.PageLayout(full_zip_layout=layout), [[pa.py_buffer(piece) for piece in pieces]]
        data = leaf.joined()
        if prefixes:
            data = np.concatenate([*prefixes, data.reshape(leaf.n, width)], axis=1).reshape(-1)
            width += sum(p.shape[1] for p in prefixes)
        if rep is None and (defs is None or bool(visible.all())):
            # a regular stride: control word + value per entry
            matrix = np.concatenate([control_bytes.reshape(entries, word), data.reshape(entries, width)], axis=1)
            return pb.PageLayout(full_zip_layout=layout), [[pa.py_buffer(matrix.reshape(-1))]]
        vis_index = np.flatnonzero(visible)
        value_len[vis_index] = width
        value_src[vis_index] = np.arange(leaf.n) * width
        prefix = control_bytes.reshape(entries, word) if word else np.zeros((entries, 0), np.uint8)
    prefix_width = prefix.shape[1]
    source = np.concatenate([prefix.reshape(-1), data])
    starts = np.stack([np.arange(entries) * prefix_width, prefix.size + value_src], axis=1).reshape(-1)
    lengths = np.stack([prefix_len, value_len], axis=1).reshape(-1)
    zipped = take_ranges(source, starts, lengths)
    entry_size = prefix_len + value_len
    entry_start = exclusive_cumsum(entry_size)
    if rep is not None:
        top = int(max_rep_level)
        row_starts = entry_start[:-1][rep == top]
    else:
        row_starts = entry_start[:-1]
    index = np.concatenate([row_starts, entry_start[-1:]])
    maximum = int(index[-1]) if len(index) else 0
    index_width = 1 if maximum < 1 << 8 else 2 if maximum < 1 << 16 else 4 if maximum < 1 << 32 else 8
    return pb.PageLayout(full_zip_layout=layout), [[pa.py_buffer(zipped)],
                                                   [pa.py_buffer(index.astype(f"<u{index_width}"))]]


def check_writable(dtype: pa.DataType, name: str) -> None:
    """Raise ``UnsupportedFeatureError`` unless a leaf of this type can be written to 2.1+ files."""
    if pa.types.is_dictionary(dtype):
        value = dtype.value_type
        if value in (pa.string(), pa.binary(), *_LARGE) or fixed_width(value) is not None:
            return
    elif pa.types.is_fixed_size_list(dtype):
        inner = dtype.value_type
        while pa.types.is_fixed_size_list(inner):
            inner = inner.value_type
        if fixed_width(inner) is not None or pa.types.is_boolean(inner):
            return
    elif (pa.types.is_null(dtype) or pa.types.is_boolean(dtype) or fixed_width(dtype) is not None
          or dtype in (pa.string(), pa.binary(), *_LARGE) or (pa.types.is_struct(dtype) and dtype.num_fields == 0)):
        return
    raise UnsupportedFeatureError(f"field {name!r}: type {dtype} cannot be written to a 2.1+ data file")

"""Decoded value blocks (the 2.1+ analogue of Lance's ``DataBlock``) and their Arrow form.

A compressive encoding decodes into one of these; the structural layer then
turns the leaf block into an Arrow array of the field's type:

* :class:`Fixed`: ``n`` values of ``bits`` bits (bytes back to back, or LSB-first
  bits for ``bits == 1``);
* :class:`Variable`: ``n`` values, ``offsets`` (int64, ``n + 1``) into ``data``;
* :class:`Fsl`: fixed-size lists of ``dim`` items with optional item validity;
* :class:`Struct`: packed struct children.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import numpy as np
import pyarrow as pa

from airflow_lance.core.file.v21.util import Ctx

_LARGE = (pa.large_string(), pa.large_binary())
_VARIABLE = (pa.string(), pa.binary(), *_LARGE)
_INT32_MAX = 2**31 - 1


@dataclass
class Fixed:
    data: np.ndarray
    bits: int
    n: int


@dataclass
class Variable:
    offsets: np.ndarray
    data: np.ndarray
    n: int


@dataclass
class Fsl:
    dim: int
    validity: np.ndarray | None
    child: Block
    n: int


@dataclass
class Struct:
    children: list[Block]
    n: int


Block = Union[Fixed, Variable, Fsl, Struct]


def fixed_bits(dtype: pa.DataType) -> int | None:
    """Bits per value of a fixed-width Arrow type (None otherwise)."""
    if pa.types.is_fixed_size_binary(dtype):
        return dtype.byte_width * 8
    if pa.types.is_boolean(dtype) or pa.types.is_primitive(dtype) or pa.types.is_decimal(dtype):
        return dtype.bit_width
    return None


def bitmap(valid: np.ndarray | None) -> pa.Buffer | None:
    """Arrow validity bitmap of a boolean numpy mask (None when all valid)."""
    if valid is None or bool(valid.all()):
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def take(block: Block, index: np.ndarray, ctx: Ctx) -> Block:
    """Rows ``index`` of a block (dictionary lookups)."""
    if len(index) and (int(index.min()) < 0 or int(index.max()) >= block.n):
        raise ctx.corrupt(f"dictionary index out of range ({block.n} items)")
    if isinstance(block, Fixed):
        if block.bits % 8:
            bits = np.unpackbits(block.data, bitorder="little", count=block.n)
            return Fixed(np.packbits(bits[index], bitorder="little"), block.bits, len(index))
        width = block.bits // 8
        rows = block.data[: block.n * width].reshape(block.n, width)
        return Fixed(rows[index].reshape(-1), block.bits, len(index))
    if isinstance(block, Variable):
        array = pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), block.n, [None, pa.py_buffer(block.offsets - block.offsets[0]),
                                          pa.py_buffer(block.data[block.offsets[0]: block.offsets[-1]])])
        taken = array.take(pa.array(index))
        offsets = np.frombuffer(taken.buffers()[1], dtype=np.int64, count=len(index) + 1)
        data = taken.buffers()[2]
        return Variable(offsets.copy(), np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8),
                        len(index))
    if isinstance(block, Fsl):
        item_index = (index[:, None] * block.dim + np.arange(block.dim)).reshape(-1)
        validity = None if block.validity is None else block.validity[item_index]
        return Fsl(block.dim, validity, take(block.child, item_index, ctx), len(index))
    return Struct([take(child, index, ctx) for child in block.children], len(index))


def to_arrow(block: Block, dtype: pa.DataType, valid: np.ndarray | None, ctx: Ctx) -> pa.Array:
    """The block as an Arrow array of ``dtype`` with row validity ``valid`` (None: all valid)."""
    n = block.n
    validity = bitmap(valid)
    if pa.types.is_dictionary(dtype):
        values = to_arrow(block, dtype.value_type, valid, ctx)
        return values.dictionary_encode().cast(dtype) if len(values) else pa.array([], dtype)
    if pa.types.is_null(dtype):
        return pa.nulls(n)
    if isinstance(block, Fixed) and block.bits == 0:  # a constant without a value: no bytes stored
        # Its values are null, as pylance reads them. Vectors of all-null items are stored so (pylance 12+:
        # the items, under the vectors' validity; pylance 1.0.4-9.0.1: the vectors), and where those gave
        # the vectors a validity, pylance reads the valid ones as vectors of null items.
        if valid is None:
            return pa.nulls(n, dtype)
        if pa.types.is_fixed_size_list(dtype):
            items = pa.nulls(n * dtype.list_size, dtype.value_type)
            return pa.Array.from_buffers(dtype, n, [validity], children=[items])
        if not valid[:n].any():
            return pa.nulls(n, dtype)
    if isinstance(block, Fixed) and block.bits == 8 and pa.types.is_boolean(dtype):
        # a byte per boolean: pylance 7.1.0's full-zip pages of sparse lists of structs of booleans
        ctx.check(len(block.data) >= n, "value buffer too short")
        packed = np.packbits(np.asarray(block.data[:n]) != 0, bitorder="little")
        return pa.Array.from_buffers(dtype, n, [validity, pa.py_buffer(packed)])
    if isinstance(block, Fixed):
        bits = fixed_bits(dtype)
        if bits is None or bits != block.bits:
            raise ctx.corrupt(f"{block.bits}-bit values for a {dtype} column")
        if len(block.data) * 8 < n * bits:
            raise ctx.corrupt("value buffer too short")
        return pa.Array.from_buffers(dtype, n, [validity, pa.py_buffer(block.data)])
    if isinstance(block, Variable):
        if dtype not in _VARIABLE:
            raise ctx.corrupt(f"variable-width values for a {dtype} column")
        offsets = block.offsets
        if len(offsets) != n + 1:
            raise ctx.corrupt("offsets do not match the value count")
        if n and (offsets[0] < 0 or offsets[-1] > len(block.data) or bool(np.any(offsets[1:] < offsets[:-1]))):
            raise ctx.corrupt("offsets are not monotonic or exceed the data")
        if n and offsets[0]:
            offsets = offsets - offsets[0]
            data = block.data[block.offsets[0]: block.offsets[-1]]
        else:
            data = block.data
        if dtype in _LARGE:
            out_offsets = offsets.astype(np.int64, copy=False)
        else:
            if n and offsets[-1] > _INT32_MAX:
                raise ctx.corrupt("32-bit offsets overflow")
            out_offsets = offsets.astype(np.int32)
        return pa.Array.from_buffers(dtype, n, [validity, pa.py_buffer(out_offsets), pa.py_buffer(data)])
    if isinstance(block, Fsl):
        if not pa.types.is_fixed_size_list(dtype) or dtype.list_size != block.dim:
            raise ctx.corrupt(f"fixed-size lists of {block.dim} for a {dtype} column")
        child = to_arrow(block.child, dtype.value_type, block.validity, ctx)
        return pa.Array.from_buffers(dtype, n, [validity], children=[child])
    if isinstance(block, Struct):
        if not pa.types.is_struct(dtype) or dtype.num_fields != len(block.children):
            raise ctx.corrupt(f"packed struct of {len(block.children)} fields for a {dtype} column")
        children = [to_arrow(child, dtype.field(i).type, None, ctx) for i, child in enumerate(block.children)]
        return pa.Array.from_buffers(dtype, n, [validity], children=children)
    raise ctx.corrupt("unknown value block")

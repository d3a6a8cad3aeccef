"""JSON columns: ``arrow.json`` values as pylance stores them, JSONB (``lance.json``).

pylance 14 stores a JSON value in the binary JSONB format of Databend's ``jsonb`` crate, in a
``large_binary`` column with the field metadata ``ARROW:extension:name = lance.json``, and reads
it back as canonical JSON text: objects' keys sorted and unique (a duplicate is an error), no
whitespace. The format, big-endian throughout:

* a container: a u32 header (``0x80000000`` array, ``0x40000000`` object, ``0x20000000`` a lone
  scalar, or-ed with the number of entries), one u32 entry per element (an object's keys first,
  then its values), then the elements' bytes in that order;
* an entry: its type in bits 28-30 (null 0, string 1, number 2, false 3, true 4, container 5)
  and the length of its bytes in the low 28 bits;
* a number: a tag byte, then the value in as few bytes as hold it: zero ``0x00``; integers
  ``0x40`` (signed: 1, 2, 4 or 8 bytes) and ``0x50`` (unsigned); doubles ``0x60`` (8 bytes);
  NaN ``0x10``, +inf ``0x20``, -inf ``0x30``; decimals ``0x70`` (value, scale).

Text is parsed with the standard library: integers that fit 64 bits are integers (unsigned if not
negative), anything else a double, as the ``jsonb`` parser does. Columns are converted where they cross
the file boundary: written value by value (a JSON document is a tree), read as whole columns
(:mod:`.jsonb_text`; :func:`decode_value` is its oracle in the tests).
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pyarrow as pa

from airflow_lance.core.errors import CorruptFileError, InvalidInputError
from airflow_lance.core.jsonb_text import (  # the format's constants, defined once
    _ARRAY,
    _CONTAINER,
    _ENTRY_LEN,
    _ENTRY_TYPE,
    _FALSE,
    _HEADER_LEN,
    _HEADER_TYPE,
    _NULL,
    _NUMBER,
    _OBJECT,
    _SCALAR,
    _STRING,
    _TRUE,
    DOUBLE_NOTATION,
    decode_column,
)

_U32 = struct.Struct(">I")
_INT_WIDTHS = ((1, "b"), (2, "h"), (4, "i"), (8, "q"))
_UINT_WIDTHS = ((1, "B"), (2, "H"), (4, "I"), (8, "Q"))


class _Duplicate(ValueError):
    pass


# ---------------------------------------------------------------------------------------- encoding


def _number(value: float) -> bytes:
    if isinstance(value, int):
        if value == 0:
            return b"\x00"
        if -(1 << 63) <= value < 0:
            for width, code in _INT_WIDTHS:
                if -(1 << (8 * width - 1)) <= value:
                    return b"\x40" + struct.pack(">" + code, value)
        if 0 < value < (1 << 64):
            for width, code in _UINT_WIDTHS:
                if value < (1 << (8 * width)):
                    return b"\x50" + struct.pack(">" + code, value)
        value = float(value)  # beyond 64 bits: a double, as the jsonb parser reads it
    if math.isnan(value):
        return b"\x10"
    if math.isinf(value):
        return b"\x20" if value > 0 else b"\x30"
    return b"\x60" + struct.pack(">d", value)


def _entry(value: Any) -> tuple[int, bytes]:
    """(entry type, bytes) of one element."""
    if value is None:
        return _NULL, b""
    if value is True:
        return _TRUE, b""
    if value is False:
        return _FALSE, b""
    if isinstance(value, str):
        return _STRING, value.encode()
    if isinstance(value, (int, float)):
        return _NUMBER, _number(value)
    return _CONTAINER, _container(value)


def _container(value: list | dict) -> bytes:
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: k.encode())
        parts = [(_STRING, k.encode()) for k in keys] + [_entry(value[k]) for k in keys]
        header = _OBJECT | len(keys)
    else:
        parts = [_entry(v) for v in value]
        header = _ARRAY | len(parts)
    return _U32.pack(header) + b"".join(_U32.pack(t | len(b)) for t, b in parts) + b"".join(b for _, b in parts)


def _unique(pairs: list[tuple[str, Any]]) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _Duplicate(next(k for i, (k, _) in enumerate(pairs) if k in dict(pairs[:i])))
    return out


def encode_value(text: str) -> bytes:
    """JSONB of one JSON text; InvalidInputError if it is not JSON or an object repeats a key."""
    try:
        value = json.loads(text, object_pairs_hook=_unique)
    except _Duplicate as exc:
        raise InvalidInputError(f"JSON value has a duplicate object key {exc.args[0]!r}: {text[:200]!r}") from None
    except ValueError as exc:
        raise InvalidInputError(f"not a JSON value ({exc}): {text[:200]!r}") from None
    if isinstance(value, (list, dict)):
        return _container(value)
    kind, data = _entry(value)
    return _U32.pack(_SCALAR) + _U32.pack(kind | len(data)) + data


# ---------------------------------------------------------------------------------------- decoding


#: ``jsonb_text.DOUBLE_NOTATION`` for Python's ``re`` (RE2's `\1` is its `\g<1>`)
_DOUBLE_NOTATION = tuple((re.compile(pattern), re.sub(r"\\(\d)", r"\\g<\1>", replacement))
                         for pattern, replacement in DOUBLE_NOTATION)


def _float_text(value: float) -> str:
    """pylance's text of a double (``jsonb_text.DOUBLE_NOTATION``)."""
    if math.isnan(value) or math.isinf(value):
        raise CorruptFileError("", f"JSONB holds {value}, which JSON text cannot")
    text = repr(value)
    for pattern, replacement in _DOUBLE_NOTATION:
        text = pattern.sub(replacement, text)
    return text


def _read_number(data: bytes) -> str:
    tag, body = data[0], data[1:]
    if tag == 0x00:
        return "0"
    if tag in (0x40, 0x50):
        codes = dict(_INT_WIDTHS if tag == 0x40 else _UINT_WIDTHS)
        if len(body) not in codes:
            raise ValueError(f"integer of {len(body)} bytes")
        return str(struct.unpack(">" + codes[len(body)], body)[0])
    if tag == 0x60 and len(body) == 8:
        return _float_text(struct.unpack(">d", body)[0])
    if tag in (0x10, 0x20, 0x30):
        return _float_text({0x10: math.nan, 0x20: math.inf, 0x30: -math.inf}[tag])
    if tag == 0x70 and len(body) in (9, 17, 18, 33, 34):
        size = {9: 8, 17: 16, 18: 16, 33: 32, 34: 32}[len(body)]
        scale = body[-1]
        return str(Decimal(int.from_bytes(body[:size], "big", signed=True)).scaleb(-scale))
    raise ValueError(f"number tag {tag:#x} of {len(body)} bytes")


def _read_element(kind: int, data: bytes) -> str:
    if kind == _NULL:
        return "null"
    if kind == _TRUE:
        return "true"
    if kind == _FALSE:
        return "false"
    if kind == _STRING:
        return json.dumps(data.decode(), ensure_ascii=False)
    if kind == _NUMBER:
        return _read_number(data)
    if kind == _CONTAINER:
        return _read_container(data)
    raise ValueError(f"entry type {kind >> 28} (a Databend extension value)")


def _read_container(data: bytes) -> str:
    (header,) = _U32.unpack_from(data, 0)
    kind, count = header & _HEADER_TYPE, header & _HEADER_LEN
    entries = count * 2 if kind == _OBJECT else count
    if kind == _SCALAR:
        entries = 1
    offset = 4 + 4 * entries
    elements = []
    for i in range(entries):
        (entry,) = _U32.unpack_from(data, 4 + 4 * i)
        length = entry & _ENTRY_LEN
        if offset + length > len(data):
            raise ValueError("element past the end")
        elements.append((entry & _ENTRY_TYPE, data[offset:offset + length]))
        offset += length
    if kind == _SCALAR:
        return _read_element(*elements[0])
    if kind == _ARRAY:
        return "[" + ",".join(_read_element(*e) for e in elements) + "]"
    if kind == _OBJECT:
        keys = [_read_element(*e) for e in elements[:count]]
        return "{" + ",".join(f"{k}:{_read_element(*v)}" for k, v in zip(keys, elements[count:])) + "}"
    raise ValueError(f"container header {header:#x}")


def decode_value(data: bytes, where: str = "") -> str:
    """The canonical JSON text of one JSONB value; CorruptFileError if it is malformed."""
    try:
        return _read_container(data)
    except (ValueError, struct.error, IndexError, UnicodeDecodeError) as exc:
        raise CorruptFileError(where, f"malformed JSONB value: {exc}") from None


# ---------------------------------------------------------------------------------------- columns


def is_json(dtype: pa.DataType) -> bool:
    return isinstance(dtype, pa.BaseExtensionType) and dtype.extension_name == "arrow.json"


def _children(array: pa.Array) -> list[pa.Array]:
    """A struct array's children, sliced as the array is (``field(i)`` is not)."""
    return array.flatten()


def _list_values(array: pa.Array) -> tuple[pa.Array, pa.Array | None]:
    """(the items of a list array's rows, its offsets from 0; None for fixed-size lists)."""
    if pa.types.is_fixed_size_list(array.type):
        return array.flatten(), None
    first, last = array.offsets[0].as_py(), array.offsets[-1].as_py()
    return array.values.slice(first, last - first), pa.compute.subtract(array.offsets, array.offsets[0])


def _rebuild(array: pa.Array, dtype: pa.DataType, leaf: Callable[[pa.Array, pa.DataType], pa.Array],
             stored: bool) -> pa.Array:
    """``array`` (of ``dtype``'s stored types if not ``stored``... see callers) with every JSON leaf
    converted by ``leaf``: to text (``stored`` False: the result is of ``dtype``) or to JSONB
    (``stored`` True: the result is of the stored type)."""
    if is_json(dtype):
        return leaf(array, dtype)
    storage = dtype.storage_type if isinstance(dtype, pa.BaseExtensionType) else dtype
    values = array.storage if isinstance(array, pa.ExtensionArray) else array
    if not contains_json(storage):
        out = values
    elif pa.types.is_map(storage):
        first, last = values.offsets[0].as_py(), values.offsets[-1].as_py()
        keys = _rebuild(values.keys.slice(first, last - first), storage.key_type, leaf, stored)
        items = _rebuild(values.items.slice(first, last - first), storage.item_type, leaf, stored)
        out = pa.MapArray.from_arrays(pa.compute.subtract(values.offsets, values.offsets[0]), keys, items,
                                      type=pa.map_(storage.key_field.with_type(keys.type),
                                                   storage.item_field.with_type(items.type)),
                                      mask=values.is_null())
    elif pa.types.is_struct(storage):
        children = [_rebuild(c, f.type, leaf, stored) for c, f in zip(_children(values), storage)]
        fields = [pa.field(f.name, c.type, f.nullable, f.metadata) for c, f in zip(children, storage)]
        out = pa.StructArray.from_arrays(children, fields=fields, mask=values.is_null())
    else:
        items, offsets = _list_values(values)
        item = _rebuild(items, storage.value_type, leaf, stored)
        field = storage.value_field.with_type(item.type)
        mask = values.is_null()
        if offsets is None:
            out = pa.FixedSizeListArray.from_arrays(item, type=pa.list_(field, storage.list_size), mask=mask)
        elif pa.types.is_large_list(storage):
            out = pa.LargeListArray.from_arrays(offsets, item, type=pa.large_list(field), mask=mask)
        else:
            out = pa.ListArray.from_arrays(offsets, item, type=pa.list_(field), mask=mask)
    if not stored and isinstance(dtype, pa.BaseExtensionType):
        return pa.ExtensionArray.from_storage(dtype, out)
    return out


def contains_json(dtype: pa.DataType) -> bool:
    if is_json(dtype):
        return True
    storage = dtype.storage_type if isinstance(dtype, pa.BaseExtensionType) else dtype
    if pa.types.is_struct(storage):
        return any(contains_json(f.type) for f in storage)
    if pa.types.is_map(storage):
        return contains_json(storage.key_type) or contains_json(storage.item_type)
    if pa.types.is_list(storage) or pa.types.is_large_list(storage) or pa.types.is_fixed_size_list(storage):
        return contains_json(storage.value_type)
    return False


def _decode_leaf(array: pa.Array, target: pa.DataType) -> pa.Array:
    values = array.storage if isinstance(array, pa.ExtensionArray) else array
    if not (pa.types.is_large_binary(values.type) or pa.types.is_binary(values.type)):
        raise CorruptFileError("", f"a JSON column stored as {values.type}, not JSONB bytes")
    texts = decode_column(values)
    return pa.ExtensionArray.from_storage(target, texts.cast(target.storage_type))


def _encode_leaf(array: pa.Array, target: pa.DataType) -> pa.Array:
    values = array.storage if isinstance(array, pa.ExtensionArray) else array
    return pa.array([None if v is None else encode_value(v) for v in values.cast(pa.string()).to_pylist()],
                    pa.large_binary())


def from_storage(column: pa.ChunkedArray | pa.Array, dtype: pa.DataType) -> pa.ChunkedArray | pa.Array:
    """A column read in its stored types as ``dtype``: JSONB bytes become JSON text at any depth."""
    if not contains_json(dtype):
        return column
    if isinstance(column, pa.ChunkedArray):
        return pa.chunked_array([_rebuild(c, dtype, _decode_leaf, False) for c in column.chunks], type=dtype)
    return _rebuild(column, dtype, _decode_leaf, False)


def to_storage(column: pa.ChunkedArray | pa.Array, stored: pa.DataType, dtype: pa.DataType
               ) -> pa.ChunkedArray | pa.Array:
    """A column of ``dtype`` as its stored type ``stored``: JSON text becomes JSONB at any depth
    (InvalidInputError for a value that is not JSON)."""
    if not contains_json(dtype):
        return column
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    out = [_rebuild(c, dtype, _encode_leaf, True) for c in chunks]
    out = [c if c.type == stored else c.cast(stored) for c in out]
    return pa.chunked_array(out, type=stored) if isinstance(column, pa.ChunkedArray) else out[0]


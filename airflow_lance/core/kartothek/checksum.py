"""Order-independent column checksums, computed with numpy over Arrow buffers.

Every row of a column gets a 64-bit hash of its value (:func:`row_hashes`);
a column's checksum over a set of rows is the sum of those hashes modulo
2**64, so it does not depend on row order, on how rows are split into
batches, files or fragments, and can be accumulated while streaming. Nulls
hash to a constant. Variable-size values (strings, binaries, lists) hash every
byte or element together with its position inside the value; structs combine
their fields' hashes by position. Floats hash their bits with NaNs made equal.

Hashes are deterministic across processes (no Python ``hash``).
"""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_U64 = np.uint64
_MASK = (1 << 64) - 1
NULL_HASH = _U64(0x9E3779B97F4A7C15)
_K1 = _U64(0xBF58476D1CE4E5B9)
_K2 = _U64(0x94D049BB133111EB)
_POSITION = _U64(0xD6E8FEB86659FD93)
_LENGTH = _U64(0xA0761D6478BD642F)
_FIELD = _U64(0xE7037ED1A0B428DB)
_SEED = _U64(0x8EBC6AF09C88C6E3)
_CANONICAL_NAN = {2: 0x7E00, 4: 0x7FC00000, 8: 0x7FF8000000000000}


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, elementwise on uint64 (wrapping arithmetic)."""
    x = x ^ (x >> _U64(30))
    x = x * _K1
    x = x ^ (x >> _U64(27))
    x = x * _K2
    return x ^ (x >> _U64(31))


def _segment_sums(contributions: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Sum of ``contributions[starts[i]:ends[i]]`` for each i (mod 2**64)."""
    prefix = np.zeros(len(contributions) + 1, dtype=_U64)
    np.cumsum(contributions, dtype=_U64, out=prefix[1:])
    return prefix[ends] - prefix[starts]


def _positions(lengths: np.ndarray, total: int) -> np.ndarray:
    """Position of each element inside its value, for values of ``lengths`` laid end to end."""
    starts = np.cumsum(lengths) - lengths
    return np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)


def _variable(offsets: np.ndarray, element_hashes: np.ndarray, base: int) -> np.ndarray:
    """Hashes of variable-size values whose elements (from index ``base``) hash to ``element_hashes``."""
    starts = (offsets[:-1] - base).astype(np.int64)
    ends = (offsets[1:] - base).astype(np.int64)
    lengths = ends - starts
    positions = _positions(lengths, len(element_hashes)).astype(_U64)
    contributions = _mix(element_hashes + positions * _POSITION)
    return _mix(_segment_sums(contributions, starts, ends) + _mix(lengths.astype(_U64) * _LENGTH + _SEED))


def _offsets(array: pa.Array, large: bool) -> np.ndarray:
    buffer = array.buffers()[1]
    dtype = np.int64 if large else np.int32
    return np.frombuffer(buffer, dtype=dtype)[array.offset: array.offset + len(array) + 1].astype(np.int64)


def _fixed_width(array: pa.Array) -> np.ndarray:
    width = array.type.byte_width
    n = len(array)
    data = np.frombuffer(array.buffers()[1], dtype=np.uint8)[array.offset * width: (array.offset + n) * width]
    words_per_value = (width + 7) // 8
    padded = np.zeros((n, words_per_value * 8), dtype=np.uint8)
    padded[:, :width] = data.reshape(n, width)
    words = padded.view(_U64)
    if pa.types.is_floating(array.type) and n:
        nan = pc.is_nan(array).fill_null(False).to_numpy(zero_copy_only=False)
        words[nan, 0] = _U64(_CANONICAL_NAN[width])
    hashes = _mix(words[:, 0] + _U64(width))
    for index in range(1, words_per_value):
        hashes = _mix(hashes ^ words[:, index])
    return hashes


def _binary(array: pa.Array, large: bool) -> np.ndarray:
    offsets = _offsets(array, large)
    start, end = int(offsets[0]), int(offsets[-1])
    buffer = array.buffers()[2]
    data = np.frombuffer(buffer, dtype=np.uint8)[start:end] if buffer is not None and end > start else \
        np.zeros(0, dtype=np.uint8)
    return _variable(offsets, data.astype(_U64), start)


def _python_fallback(array: pa.Array) -> np.ndarray:
    digests = [hashlib.blake2b(repr(value).encode(), digest_size=8).digest() for value in array.to_pylist()]
    return np.frombuffer(b"".join(digests), dtype=_U64).copy() if digests else np.zeros(0, dtype=_U64)


def _hash_array(array: pa.Array) -> np.ndarray:
    kind = array.type
    n = len(array)
    if pa.types.is_null(kind):
        return np.full(n, NULL_HASH, dtype=_U64)
    if pa.types.is_dictionary(kind):
        return _hash_array(array.dictionary_decode())
    if isinstance(array, pa.ExtensionArray):
        return _hash_array(array.storage)
    if pa.types.is_string_view(kind) or pa.types.is_binary_view(kind):
        target = pa.large_string() if pa.types.is_string_view(kind) else pa.large_binary()
        return _hash_array(array.cast(target))
    if pa.types.is_boolean(kind):
        hashes = _mix(array.fill_null(False).to_numpy(zero_copy_only=False).astype(_U64) + _U64(1))
    elif pa.types.is_string(kind) or pa.types.is_binary(kind):
        hashes = _binary(array, large=False)
    elif pa.types.is_large_string(kind) or pa.types.is_large_binary(kind):
        hashes = _binary(array, large=True)
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_map(kind):
        offsets = _offsets(array, large=pa.types.is_large_list(kind))
        start, end = int(offsets[0]), int(offsets[-1])
        hashes = _variable(offsets, _hash_array(array.values.slice(start, end - start)), start)
    elif pa.types.is_fixed_size_list(kind):
        size = kind.list_size
        offsets = (np.arange(n + 1, dtype=np.int64) + array.offset) * size
        values = array.values.slice(array.offset * size, n * size)
        hashes = _variable(offsets, _hash_array(values), array.offset * size)
    elif pa.types.is_struct(kind):
        hashes = np.zeros(n, dtype=_U64)
        for position, child in enumerate(array.flatten()):
            hashes = hashes + _mix(_hash_array(child) + _U64(((position + 1) * int(_FIELD)) & _MASK))
        hashes = _mix(hashes)
    elif kind.bit_width and kind.bit_width % 8 == 0 and len(array.buffers()) == 2:
        hashes = _fixed_width(array)
    else:
        hashes = _python_fallback(array)
    if array.null_count:
        valid = array.is_valid().to_numpy(zero_copy_only=False)
        hashes = np.where(valid, hashes, NULL_HASH)
    return hashes


def row_hashes(data: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A uint64 hash per row of ``data``."""
    if isinstance(data, pa.ChunkedArray):
        parts = [_hash_array(chunk) for chunk in data.chunks]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=_U64)
    return _hash_array(data)


def checksum(data: pa.Array | pa.ChunkedArray) -> int:
    """The column checksum of ``data``: sum of its row hashes mod 2**64."""
    return int(row_hashes(data).sum(dtype=_U64))

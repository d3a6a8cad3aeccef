"""FastLanes bit-packing of blocks of 1024 unsigned integers, vectorised over blocks.

Lance packs 1024 values of a ``T``-bit type (8/16/32/64) into ``1024 * W / T``
words of ``T`` bits. The words form ``LANES = 1024 / T`` interleaved lanes:
word ``w`` of lane ``l`` sits at ``packed[w * LANES + l]``. Lane ``l`` holds
``T`` values ("rows"), value ``r`` taking bits ``[r*W, r*W + W)`` of the lane's
little-endian bit stream, and it is the input element number
``ORDER[r // 8] * 16 + (r % 8) * 128 + l`` (``ORDER = 0, 4, 2, 6, 1, 5, 3, 7``).

Both directions take a 2-D array of many blocks and loop over the ``T`` rows
only (at most 64 numpy operations per call, each over every block at once).

Block formats built on it:

* inline bit-packing (mini-block chunks, dictionaries): per 1024 values one
  ``T``-bit word holding ``W``, then the packed words; a short last block is
  padded to 1024 values;
* out-of-line bit-packing (rep/def levels): ``W`` is in the encoding; full
  blocks back to back, then the tail either packed (padded) or as raw ``T``-bit
  values, told apart by the buffer length.
"""

from __future__ import annotations

import numpy as np

BLOCK = 1024
ORDER = (0, 4, 2, 6, 1, 5, 3, 7)


def _row_base(row: int) -> int:
    return ORDER[row // 8] * 16 + (row % 8) * 128


def unpack(packed: np.ndarray, width: int, bits: int) -> np.ndarray:
    """``(k, 1024 * width / bits)`` words -> ``(k, 1024)`` values (dtype of ``bits``)."""
    dtype = np.dtype(f"<u{bits // 8}")
    lanes = BLOCK // bits
    packed = packed.reshape(len(packed), width * lanes)
    out = np.empty((len(packed), BLOCK), dtype=dtype)
    if width == 0:
        out[:] = 0
        return out
    if width == bits:
        for row in range(bits):
            base = _row_base(row)
            out[:, base: base + lanes] = packed[:, row * lanes: (row + 1) * lanes]
        return out
    mask = dtype.type((1 << width) - 1)
    for row in range(bits):
        word, shift = divmod(row * width, bits)
        value = packed[:, word * lanes: (word + 1) * lanes] >> dtype.type(shift)
        if shift + width > bits:
            value |= packed[:, (word + 1) * lanes: (word + 2) * lanes] << dtype.type(bits - shift)
        base = _row_base(row)
        out[:, base: base + lanes] = value & mask
    return out


def pack(values: np.ndarray, width: int, bits: int) -> np.ndarray:
    """``(k, 1024)`` values -> ``(k, 1024 * width / bits)`` words (values must fit ``width``)."""
    dtype = np.dtype(f"<u{bits // 8}")
    lanes = BLOCK // bits
    values = values.reshape(len(values), BLOCK).astype(dtype, copy=False)
    out = np.zeros((len(values), width * lanes), dtype=dtype)
    if width == 0:
        return out
    mask = dtype.type((1 << width) - 1) if width < bits else dtype.type(np.iinfo(dtype).max)
    for row in range(bits):
        base = _row_base(row)
        source = values[:, base: base + lanes] & mask
        word, shift = divmod(row * width, bits)
        out[:, word * lanes: (word + 1) * lanes] |= source << dtype.type(shift)
        if shift + width > bits:
            out[:, (word + 1) * lanes: (word + 2) * lanes] |= source >> dtype.type(bits - shift)
    return out


def bits_needed(max_value: int) -> int:
    """Bits needed to store ``max_value`` (0 for 0)."""
    return int(max_value).bit_length()

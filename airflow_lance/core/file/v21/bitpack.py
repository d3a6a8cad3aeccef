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

from types import ModuleType

import numpy as np

from airflow_lance.core.file.v21 import kernels

BLOCK = 1024
ORDER = (0, 4, 2, 6, 1, 5, 3, 7)


def _row_base(row: int) -> int:
    return ORDER[row // 8] * 16 + (row % 8) * 128


def unpack(packed: np.ndarray, width: int, bits: int) -> np.ndarray:
    """``(k, 1024 * width / bits)`` words -> ``(k, 1024)`` values (dtype of ``bits``)."""
    dtype = np.dtype(f"<u{bits // 8}")
    lanes = BLOCK // bits
    packed = packed.reshape(len(packed), width * lanes)
    if width == 0:
        return np.zeros((len(packed), BLOCK), dtype=dtype)
    compiled = _compiled_loops(len(packed), bits)
    if compiled is not None:
        return _unpack_compiled(compiled, np.ascontiguousarray(packed).reshape(-1),
                                np.arange(len(packed), dtype=np.int64) * (width * lanes), np.full(len(packed), width),
                                bits)
    out = np.empty((len(packed), BLOCK), dtype=dtype)
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


def unpack_blocks(words: np.ndarray, starts: np.ndarray, widths: np.ndarray, bits: int) -> np.ndarray | None:
    """Blocks of any widths straight out of a buffer of ``bits``-bit words (block ``b``: word
    ``starts[b]`` on, ``widths[b]`` bits wide) -> ``(k, 1024)`` values, with the compiled loops; ``None``
    where they do not serve (then :func:`unpack` per width). Blocks must be in bounds.

    Compiled: 2-3x numpy's speed on 64-bit words, equal on 32-bit; numpy's lane slices are long
    enough for 8/16-bit words (64-128 values) to be the faster of the two there."""
    compiled = _compiled_loops(len(starts), bits)
    return None if compiled is None else _unpack_compiled(compiled, words, starts, widths, bits)


def _compiled_loops(blocks: int, bits: int) -> ModuleType | None:
    """The compiled loops for ``blocks`` blocks of ``bits``-bit words, or None (numpy unpacks)."""
    return kernels.compiled(blocks * BLOCK) if bits >= 32 else None


def _unpack_compiled(compiled: ModuleType, words: np.ndarray, starts: np.ndarray, widths: np.ndarray,
                     bits: int) -> np.ndarray:
    out = np.empty((len(starts), BLOCK), dtype=np.dtype(f"<u{bits // 8}"))
    compiled.unpack_blocks(words, np.asarray(starts, dtype=np.int64), np.asarray(widths, dtype=np.int64), bits,
                           _row_bases(bits), out)
    return out


_ROW_BASES: dict[int, np.ndarray] = {}


def _row_bases(bits: int) -> np.ndarray:
    """Where every row's lanes start in a block (element numbers)."""
    if bits not in _ROW_BASES:
        _ROW_BASES[bits] = np.array([_row_base(row) for row in range(bits)], dtype=np.int64)
    return _ROW_BASES[bits]


_LANE_AND_ROW: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def _lane_and_row(bits: int) -> tuple[np.ndarray, np.ndarray]:
    """For every element of a block: its lane and its row."""
    if bits not in _LANE_AND_ROW:
        lanes = BLOCK // bits
        lane = np.empty(BLOCK, dtype=np.int64)
        row = np.empty(BLOCK, dtype=np.int64)
        for r in range(bits):
            base = _row_base(r)
            lane[base: base + lanes] = np.arange(lanes)
            row[base: base + lanes] = r
        _LANE_AND_ROW[bits] = (lane, row)
    return _LANE_AND_ROW[bits]


def unpack_at(words: np.ndarray, block_start: np.ndarray, element: np.ndarray, width: np.ndarray,
              bits: int) -> np.ndarray:
    """Single values out of packed blocks without unpacking the blocks.

    ``words``: ``T``-bit words; per wanted value the word index where its block's
    packed words start, its element number in the block (0..1023) and the
    block's width. Returns the values (dtype of ``bits``). Indices must be in range.
    """
    dtype = np.dtype(f"<u{bits // 8}")
    lanes = BLOCK // bits
    lane_of, row_of = _lane_and_row(bits)
    lane, row = lane_of[element], row_of[element]
    width = np.asarray(width, dtype=np.int64)
    bit = row * width
    word, shift = bit // bits, bit % bits
    at = block_start + word * lanes + lane
    wide = words.astype(np.uint64, copy=False) if bits < 64 else words
    value = wide[np.minimum(at, len(words) - 1)] >> shift.astype(np.uint64)
    spill = shift + width > bits
    if bool(spill.any()):
        nxt = wide[np.minimum(at[spill] + lanes, len(words) - 1)]
        value[spill] |= nxt << (bits - shift[spill]).astype(np.uint64)
    full = width >= 64
    mask = np.where(full, np.uint64(0xFFFFFFFFFFFFFFFF),
                    (np.uint64(1) << np.minimum(width, 63).astype(np.uint64)) - np.uint64(1))
    value &= mask
    value[width == 0] = 0
    return value.astype(dtype)


def pack(values: np.ndarray, width: int, bits: int) -> np.ndarray:
    """``(k, 1024)`` values -> ``(k, 1024 * width / bits)`` words (values must fit ``width``).

    Values are not masked (callers derive ``width`` from the values); the
    shifted rows go through one scratch array, OR-ed into place.
    """
    dtype = np.dtype(f"<u{bits // 8}")
    lanes = BLOCK // bits
    values = values.reshape(len(values), BLOCK).astype(dtype, copy=False)
    out = np.zeros((len(values), width * lanes), dtype=dtype)
    if width == 0:
        return out
    shifted = np.empty((len(values), lanes), dtype=dtype)
    for row in range(bits):
        base = _row_base(row)
        source = values[:, base: base + lanes]
        word, shift = divmod(row * width, bits)
        target = out[:, word * lanes: (word + 1) * lanes]
        if shift:
            np.left_shift(source, dtype.type(shift), out=shifted)
            np.bitwise_or(target, shifted, out=target)
        else:
            np.bitwise_or(target, source, out=target)
        if shift + width > bits:
            spill = out[:, (word + 1) * lanes: (word + 2) * lanes]
            np.right_shift(source, dtype.type(bits - shift), out=shifted)
            np.bitwise_or(spill, shifted, out=spill)
    return out


def pack_blocks(values: np.ndarray, widths: np.ndarray, bits: int) -> np.ndarray:
    """:func:`pack` of every block at its own width: ``(k, 1024)`` values -> the blocks' packed words
    back to back (block ``b`` takes ``1024 * widths[b] / bits`` words).

    One pass over the ``T`` rows for all blocks: each row lands in one word
    (and possibly spills into the next) per block, at a per-block word and
    shift, so mixed widths cost no more numpy operations than a single one.
    """
    dtype = np.dtype(f"<u{bits // 8}")
    lanes = BLOCK // bits
    blocks = len(values)
    values = values.reshape(blocks, BLOCK).astype(dtype, copy=False)
    width = np.asarray(widths, dtype=np.int64)
    most = int(width.max()) if blocks else 0
    if most == 0:
        return np.zeros(0, dtype=dtype)
    out = np.zeros((blocks, most, lanes), dtype=dtype)
    every = np.arange(blocks)
    for row in range(bits):
        base = _row_base(row)
        source = values[:, base: base + lanes]
        word, shift = np.divmod(row * width, bits)
        word = np.minimum(word, most - 1)  # width-0 blocks (all zeros) stay in range
        out[every, word] |= source << shift.astype(dtype)[:, None]
        spill = np.flatnonzero(shift + width > bits)
        if len(spill):
            out[spill, word[spill] + 1] |= source[spill] >> (bits - shift[spill]).astype(dtype)[:, None]
    keep = np.arange(most)[None, :] < width[:, None]
    return out[keep].reshape(-1)


def pack_ones(positions: np.ndarray, blocks: int, bits: int) -> np.ndarray:
    """:func:`pack` at width 1 of ``blocks`` blocks that are 1 at ``positions`` (flat, distinct), else 0.

    Builds the words from the set bits alone (one word per lane, bit ``r``
    for the lane's row ``r``) without materialising the values; the bits of
    a word are summed exactly in float64, hence ``bits <= 32``.
    """
    if bits > 32:
        raise ValueError("pack_ones supports 8, 16 and 32-bit words")
    lanes = BLOCK // bits
    lane, weight = _lane_and_weight(bits)
    element = positions % BLOCK
    word = (positions // BLOCK) * lanes + lane[element]
    packed = np.bincount(word, weights=weight[element], minlength=blocks * lanes)
    return packed.astype(np.dtype(f"<u{bits // 8}")).reshape(blocks, lanes)


def _lane_and_weight(bits: int) -> tuple[np.ndarray, np.ndarray]:
    """For every element of a block: its lane and the bit of its row (``2 ** row``) at width 1."""
    lane, row = _lane_and_row(bits)
    return lane, np.ldexp(1.0, row)


def bits_needed(max_value: int) -> int:
    """Bits needed to store ``max_value`` (0 for 0)."""
    return int(max_value).bit_length()

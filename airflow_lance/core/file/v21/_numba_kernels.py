"""Compiled (numba) loops of the 2.1+ decoder; imported only through :mod:`kernels`.

Callers validate sizes and table bounds before calling (the loops do not
check array bounds); every loop releases the GIL, so fragments decoded on
several threads run in parallel. Machine code is cached next to this file
(numba's ``cache=True``) after the first compilation.
"""

from __future__ import annotations

import numba
import numpy as np

_JIT = {"nogil": True, "cache": True, "boundscheck": False}
_ESCAPE = 255


@numba.njit(**_JIT)
def fsst_total(codes, lengths):  # pragma: no cover - compiled
    """Bytes the codes expand to, for codes without escapes (the caller checks them)."""
    total = 0
    for i in range(len(codes)):
        total += lengths[codes[i]]
    return total


@numba.njit(**_JIT)
def fsst_total_escaped(codes, lengths, count):  # pragma: no cover - compiled
    """:func:`fsst_total` for codes with escapes (255: the next byte is a literal), and a status:
    0 ok, 1 a code outside the symbol table, 2 the data ends with an escape."""
    n = len(codes)
    total = 0
    i = 0
    while i < n:
        c = codes[i]
        if c == _ESCAPE:
            if i + 1 >= n:
                return total, 2
            total += 1
            i += 2
        else:
            if c >= count:
                return total, 1
            total += lengths[c]
            i += 1
    return total, 0


@numba.njit(**_JIT)
def fsst_expand(codes, offsets, symbols, bits, out, bounds):  # pragma: no cover - compiled
    """Write the expansion of ``codes`` into ``out`` (uint64 words holding the bytes little-endian,
    sized by :func:`fsst_total`) and the output offset of every code position in ``offsets``
    (sorted) into ``bounds``; a position inside an escape pair counts the pair as before it.

    ``symbols``: the 256 symbols as uint64 with the bytes past their length zeroed; ``bits``: 8 x
    their lengths. The expansion accumulates in a register and is stored 64 bits at a time."""
    acc = np.uint64(0)
    fill = np.uint64(0)
    word = 0
    i = 0
    n = len(codes)
    m = len(offsets)
    for s in range(m + 1):
        stop = offsets[s] if s < m else n
        while i < stop:
            c = codes[i]
            if c == _ESCAPE:
                value = np.uint64(codes[i + 1])
                width = np.uint64(8)
                i += 2
            else:
                value = symbols[c]
                width = bits[c]
                i += 1
            acc |= value << fill  # fill < 64
            fill += width
            if fill >= np.uint64(64):
                out[word] = acc
                word += 1
                fill -= np.uint64(64)
                acc = value >> (width - fill) if fill > np.uint64(0) else np.uint64(0)
        if s < m:
            bounds[s] = word * 8 + np.int64(fill >> np.uint64(3))
    if fill > np.uint64(0):
        out[word] = acc


@numba.njit(**_JIT)
def unpack_blocks(words, starts, widths, bits, row_base, out):  # pragma: no cover - compiled
    """FastLanes blocks out of ``words`` (``T``-bit words; block ``b`` starts at word ``starts[b]``
    and is ``widths[b]`` bits wide, 0..T) into ``out[b]`` (1024 values); blocks must be in bounds."""
    lanes = 1024 // bits
    for block in range(len(starts)):
        width = widths[block]
        o = out[block]
        if width == 0:
            o[:] = 0
            continue
        if width == 64:
            mask = np.uint64(0xFFFFFFFFFFFFFFFF)
        else:
            mask = (np.uint64(1) << np.uint64(width)) - np.uint64(1)
        first = starts[block]
        for row in range(bits):
            bit = row * width
            word = bit // bits
            shift = np.uint64(bit - word * bits)
            base = row_base[row]
            low = first + word * lanes
            if bit - word * bits + width > bits:
                high = low + lanes
                up = np.uint64(bits) - shift
                for lane in range(lanes):
                    value = (np.uint64(words[low + lane]) >> shift) | (np.uint64(words[high + lane]) << up)
                    o[base + lane] = value & mask
            else:
                for lane in range(lanes):
                    o[base + lane] = (np.uint64(words[low + lane]) >> shift) & mask


@numba.njit(**_JIT)
def copy_ranges(source, starts, lengths, out):  # pragma: no cover - compiled
    """``source[s:s+l]`` for every (s, l), back to back into ``out``; ranges must be in bounds."""
    at = 0
    for r in range(len(starts)):
        start = starts[r]
        length = lengths[r]
        out[at: at + length] = source[start: start + length]
        at += length

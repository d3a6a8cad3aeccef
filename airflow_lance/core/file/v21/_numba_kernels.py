"""Compiled (numba) loops of the 2.1+ decoder; imported only through :mod:`kernels`.

Callers validate sizes and table bounds before calling (the loops do not
check array bounds); every loop releases the GIL, so fragments decoded on
several threads run in parallel. Machine code is cached next to this file
(numba's ``cache=True``) after the first compilation.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

_JIT = {"nogil": True, "cache": True, "boundscheck": False}
_ESCAPE = 255


@intrinsic
def _store_u64(typingctx, array, offset, value):  # pragma: no cover - compiled
    """Store ``value`` (8 bytes, little-endian) at byte ``offset`` of a uint8 array, unaligned."""

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        target = builder.bitcast(builder.gep(data, [args[1]]), ir.IntType(64).as_pointer())
        builder.store(args[2], target, align=1)
        return context.get_dummy_value()

    return types.void(array, types.int64, types.uint64), codegen


@numba.njit(**_JIT)
def fsst_total_ranges(codes, begins, ends, lengths):  # pragma: no cover - compiled
    """Bytes the codes ``codes[begins[r]:ends[r]]`` expand to if none is an escape, and the
    highest code (an escape or a code outside the table: see :func:`fsst_total_ranges_escaped`),
    from a histogram of the codes."""
    counts = np.zeros(256, np.int64)
    for r in range(len(begins)):
        for i in range(begins[r], ends[r]):
            counts[codes[i]] += 1
    total = 0
    highest = 0
    for c in range(256):
        if counts[c]:
            total += counts[c] * lengths[c]
            highest = c
    return total, highest


@numba.njit(**_JIT)
def fsst_total_ranges_escaped(codes, begins, ends, lengths, count):  # pragma: no cover - compiled
    """:func:`fsst_total_ranges` for strings with escapes (255: the next byte is a literal), and a
    status: 0 ok, 1 a code outside the symbol table, 2 a string ends with an escape."""
    total = 0
    for s in range(len(begins)):
        i = begins[s]
        end = ends[s]
        while i < end:
            c = codes[i]
            if c == _ESCAPE:
                if i + 1 >= end:
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
def fsst_expand_ranges(codes, begins, ends, symbols, lengths, out, bounds):  # pragma: no cover - compiled
    """Write the expansion of the strings ``codes[begins[s]:ends[s]]`` (checked by the total
    functions) into ``out`` (uint8, 8 bytes longer than the total) and every string's output offset
    and the total into ``bounds``.

    Every symbol (``symbols``: the 256 symbols as uint64) is stored as a whole 8-byte word and the
    output advances by its length: the next symbol overwrites the bytes past it, no branch on the
    length."""
    pos = 0
    for s in range(len(begins)):
        bounds[s] = pos
        i = begins[s]
        end = ends[s]
        while i < end:
            c = codes[i]
            if c == _ESCAPE:
                out[pos] = codes[i + 1]
                pos += 1
                i += 2
            else:
                _store_u64(out, pos, symbols[c])
                pos += lengths[c]
                i += 1
    bounds[len(begins)] = pos


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



@numba.njit(**_JIT)
def scatter_ranges(source, starts, lengths, out, destinations):  # pragma: no cover - compiled
    """``source[s:s+l]`` into ``out[d:d+l]`` for every (s, l, d); ranges must be in bounds."""
    for r in range(len(starts)):
        start = starts[r]
        length = lengths[r]
        to = destinations[r]
        out[to: to + length] = source[start: start + length]

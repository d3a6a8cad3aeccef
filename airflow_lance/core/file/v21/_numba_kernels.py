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


# -- JSONB to JSON text (see airflow_lance.core.jsonb_text) -----------------------------------------

_JSONB_DEPTH = 256  # deeper documents take the numpy path
_U8 = np.uint64(8)
_U10 = np.uint64(10)


@numba.njit(**_JIT)
def _be_u64(data, at, width):  # pragma: no cover - compiled
    value = np.uint64(0)
    for k in range(width):
        value = (value << _U8) | np.uint64(data[at + k])
    return value


@numba.njit(**_JIT)
def _put_digits(out, at, magnitude, write):  # pragma: no cover - compiled
    """Decimal digits of a uint64 at ``out[at:]`` (when ``write``); returns how many."""
    count = 1
    rest = magnitude
    while rest >= _U10:
        rest = rest // _U10
        count += 1
    if write:
        rest = magnitude
        for k in range(count - 1, -1, -1):
            out[at + k] = np.uint8(48 + np.int64(rest % _U10))
            rest = rest // _U10
    return count


@numba.njit(**_JIT)
def jsonb_text(data, starts, ends, escape_len, escape_char, hexdigits, write, out, out_starts, lengths,
               double_at, double_row, double_text, double_offsets):  # pragma: no cover - compiled
    """Canonical JSON text of the JSONB values ``data[starts[r]:ends[r]]``, two passes.

    Without ``write``: ``lengths[r]`` gets each text's length without its doubles, whose byte
    positions and rows go to ``double_at``/``double_row``. With ``write``: the texts go to
    ``out[out_starts[r]:]``, the doubles' texts taken in the same order from ``double_text``
    (``double_offsets``). Returns (status, doubles seen): status 0, or 1 when a value is malformed,
    holds a decimal or nests deeper than the stack (the caller then takes the numpy path, which
    names the cause).
    """
    f_type = np.empty(_JSONB_DEPTH, dtype=np.int64)
    f_count = np.empty(_JSONB_DEPTH, dtype=np.int64)
    f_next = np.empty(_JSONB_DEPTH, dtype=np.int64)
    f_entries = np.empty(_JSONB_DEPTH, dtype=np.int64)
    f_key = np.empty(_JSONB_DEPTH, dtype=np.int64)
    f_value = np.empty(_JSONB_DEPTH, dtype=np.int64)
    f_end = np.empty(_JSONB_DEPTH, dtype=np.int64)
    doubles = 0
    size = len(data)
    for r in range(len(starts)):
        pos = out_starts[r] if write else 0
        kind = 0x50000000  # the row: a container spanning the value
        begin = starts[r]
        length = ends[r] - starts[r]
        depth = 0
        while True:
            if kind == 0x50000000:  # open a container
                if length < 4 or depth == _JSONB_DEPTH:
                    return 1, doubles
                header = np.int64(_be_u64(data, begin, 4))
                ctype = header & 0xE0000000
                count = header & 0x1FFFFFFF
                if ctype == 0x40000000:
                    entries = 2 * count
                elif ctype == 0x80000000:
                    entries = count
                elif ctype == 0x20000000:
                    entries = 1
                else:
                    return 1, doubles
                head = 4 + 4 * entries
                if head > length:
                    return 1, doubles
                f_type[depth] = ctype
                f_count[depth] = count
                f_next[depth] = 0
                f_entries[depth] = begin + 4
                f_key[depth] = begin + head
                f_end[depth] = begin + length
                keys = 0
                if ctype == 0x40000000:
                    for i in range(count):
                        keys += np.int64(_be_u64(data, begin + 4 + 4 * i, 4)) & 0x0FFFFFFF
                f_value[depth] = begin + head + keys
                depth += 1
                if ctype != 0x20000000:
                    if write:
                        out[pos] = 123 if ctype == 0x40000000 else 91
                    pos += 1
            else:  # a leaf
                if kind == 0x00000000:  # null
                    if write:
                        out[pos], out[pos + 1], out[pos + 2], out[pos + 3] = 110, 117, 108, 108
                    pos += 4
                elif kind == 0x40000000:  # true
                    if write:
                        out[pos], out[pos + 1], out[pos + 2], out[pos + 3] = 116, 114, 117, 101
                    pos += 4
                elif kind == 0x30000000:  # false
                    if write:
                        out[pos], out[pos + 1], out[pos + 2], out[pos + 3], out[pos + 4] = 102, 97, 108, 115, 101
                    pos += 5
                elif kind == 0x10000000:  # string
                    if write:
                        out[pos] = 34
                        at = pos + 1
                        for k in range(begin, begin + length):
                            byte = data[k]
                            extra = escape_len[byte]
                            if extra == 1:
                                out[at] = byte
                            elif extra == 2:
                                out[at] = 92
                                out[at + 1] = escape_char[byte]
                            else:
                                out[at] = 92
                                out[at + 1] = 117
                                out[at + 2] = 48
                                out[at + 3] = 48
                                out[at + 4] = hexdigits[byte >> 4]
                                out[at + 5] = hexdigits[byte & 15]
                            at += extra
                        out[at] = 34
                        pos = at + 1
                    else:
                        total = 2
                        for k in range(begin, begin + length):
                            total += escape_len[data[k]]
                        pos += total
                elif kind == 0x20000000:  # number
                    if length < 1:
                        return 1, doubles
                    tag = data[begin]
                    body = length - 1
                    if tag == 0x00:
                        if write:
                            out[pos] = 48
                        pos += 1
                    elif (tag == 0x40 or tag == 0x50) and (body == 1 or body == 2 or body == 4 or body == 8):
                        raw = _be_u64(data, begin + 1, body)
                        negative = tag == 0x40 and (raw >> np.uint64(8 * body - 1)) == np.uint64(1)
                        if negative:
                            if body == 8:
                                magnitude = (~raw) + np.uint64(1)
                            else:
                                magnitude = (np.uint64(1) << np.uint64(8 * body)) - raw
                            if write:
                                out[pos] = 45
                            pos += 1
                        else:
                            magnitude = raw
                        pos += _put_digits(out, pos, magnitude, write)
                    elif tag == 0x60 and body == 8:
                        bits = _be_u64(data, begin + 1, 8)
                        if (bits >> np.uint64(52)) & np.uint64(0x7FF) == np.uint64(0x7FF):
                            return 1, doubles  # NaN or an infinity
                        if write:
                            text_start = double_offsets[doubles]
                            text_end = double_offsets[doubles + 1]
                            out[pos: pos + text_end - text_start] = double_text[text_start: text_end]
                            pos += text_end - text_start
                        else:
                            double_at[doubles] = begin + 1
                            double_row[doubles] = r
                        doubles += 1
                    else:
                        return 1, doubles  # decimals and malformed numbers
                else:
                    return 1, doubles
            # the next element, closing finished containers
            kind = -1
            while depth > 0:
                top = depth - 1
                ctype = f_type[top]
                count = f_count[top]
                total = 2 * count if ctype == 0x40000000 else (count if ctype == 0x80000000 else 1)
                index = f_next[top]
                if index == total:
                    if ctype != 0x20000000:
                        if write:
                            out[pos] = 125 if ctype == 0x40000000 else 93
                        pos += 1
                    depth -= 1
                    continue
                if index > 0 and ctype != 0x20000000:
                    if write:
                        out[pos] = 58 if (ctype == 0x40000000 and index % 2 == 1) else 44
                    pos += 1
                if ctype == 0x40000000:
                    entry_index = index // 2 if index % 2 == 0 else count + index // 2
                    from_keys = index % 2 == 0
                else:
                    entry_index = index
                    from_keys = True
                entry = np.int64(_be_u64(data, f_entries[top] + 4 * entry_index, 4))
                length = entry & 0x0FFFFFFF
                kind = entry & 0x70000000
                begin = f_key[top] if from_keys else f_value[top]
                if begin + length > f_end[top] or begin + length > size:
                    return 1, doubles
                if from_keys:
                    f_key[top] = begin + length
                else:
                    f_value[top] = begin + length
                f_next[top] = index + 1
                break
            if kind == -1:
                break
        lengths[r] = pos - out_starts[r] if write else pos
    return 0, doubles

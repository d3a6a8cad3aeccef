"""FSST string decompression (and the "stored" symbol table for writing), vectorised.

The symbol table Lance stores in ``Fsst.symbol_table`` is 2312 bytes: a
little-endian ``u64`` header (``n_symbols`` in bits 0-7, the "compressed"
switch in bit 24, ``"FSST"`` in bits 32-63), ``n`` symbols of 8 bytes (first
byte lowest), ``n`` symbol lengths (1..8), zero padding. With the switch off
the data is stored uncompressed. Compressed data is a byte stream of codes:
code ``c < 255`` expands to symbol ``c``; code 255 is an escape and the next
byte is a literal.

Decoding works on the concatenated codes of all strings at once: escapes are
found with a run-parity computation over the 0xFF bytes (the first 0xFF of a
run always starts a code, so even positions in a run are escapes), then every
pair of codes is looked up in a table of all pairs with pyarrow's ``take``.
"""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa

from airflow_lance.core.file.v21 import kernels
from airflow_lance.core.file.v21.util import Ctx, as_u8, exclusive_cumsum, take_ranges

TABLE_SIZE = 8 + 256 * 8 + 256
#: Fewer codes than this are expanded one unit at a time (building the pair table costs more).
_SMALL = 1 << 16
#: Pair tables of recently decoded symbol tables (a page's table serves all its reads).
_PAIR_TABLES: dict[tuple[bytes, int, bool], pa.Array] = {}
_PAIR_LOCK = threading.Lock()
_MAGIC = 0x46535354
_ESCAPE = 255
_NONE = np.zeros(0, dtype=np.int64)


def stored_table() -> bytes:
    """A symbol table with the compression switch off (data stored as is)."""
    header = (_MAGIC << 32).to_bytes(8, "little")
    return header + bytes(TABLE_SIZE - 8)


def _pair_table(unit_bytes: np.ndarray, unit_len: np.ndarray, large: bool) -> pa.Array:
    """Binary values for every pair of units (first ``a``, second ``b``) at ``a + U * b``, then single units."""
    units = len(unit_len)
    a = np.tile(np.arange(units), units)
    b = np.repeat(np.arange(units), units)
    first, second = unit_len[a], unit_len[b]
    matrix = np.zeros((units * units, 16), dtype=np.uint8)
    matrix[:, :8] = unit_bytes[a]
    rows = np.arange(units * units)
    for k in range(8):
        matrix[rows, first + k] = unit_bytes[b, k]
    lengths = np.concatenate([first + second, unit_len])
    keep_pairs = np.arange(16)[None, :] < (first + second)[:, None]
    keep_single = np.arange(8)[None, :] < unit_len[:, None]
    data = np.concatenate([matrix[keep_pairs], unit_bytes[keep_single]])
    offsets = exclusive_cumsum(lengths)
    dtype = pa.large_binary() if large else pa.binary()
    offsets_buffer = pa.py_buffer(offsets if large else offsets.astype(np.int32))
    return pa.Array.from_buffers(dtype, len(lengths), [None, offsets_buffer, pa.py_buffer(data)])


def _decode_compiled(ctx: Ctx, compiled, symbols: np.ndarray, lengths: np.ndarray, codes: np.ndarray,
                     offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`decode` with the compiled loops: the codes before, between and after the offsets as
    strings (an escape pair cannot span an offset)."""
    offsets = np.asarray(offsets, dtype=np.int64)
    edges = np.concatenate([[0], offsets, [len(codes)]])
    data, bounds = _expand(ctx, compiled, symbols, lengths, np.ascontiguousarray(codes), edges[:-1], edges[1:])
    return data, bounds[1:-1]


def _expand(ctx: Ctx, compiled, symbols: np.ndarray, lengths: np.ndarray, codes: np.ndarray, begins: np.ndarray,
            ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The strings ``codes[begins[i]:ends[i]]`` (in bounds, sorted) expanded by the compiled loops ->
    (bytes, offsets from 0): one pass sizes the output and checks the codes, a second writes it, a
    symbol per 8-byte store."""
    count = len(lengths)
    unit_len = np.zeros(256, dtype=np.int64)
    unit_len[:count] = lengths
    unit_bytes = np.zeros((256, 8), dtype=np.uint8)
    unit_bytes[:count] = symbols
    # the strings' codes as runs of adjacent strings (a chunk's strings are back to back)
    breaks = np.flatnonzero(begins[1:] != ends[:-1]) + 1
    run_begins = begins[np.concatenate([[0], breaks])] if len(begins) else begins
    run_ends = ends[np.concatenate([breaks - 1, [len(ends) - 1]])] if len(ends) else ends
    total, highest = compiled.fsst_total_ranges(codes, run_begins, run_ends, unit_len)
    if highest == _ESCAPE:
        total, status = compiled.fsst_total_ranges_escaped(codes, begins, ends, unit_len, count)
        ctx.check(status != 1, "FSST code outside the symbol table")
        ctx.check(status != 2, "FSST data ends with an escape")
    else:
        ctx.check(highest < count or len(begins) == 0, "FSST code outside the symbol table")
    out = np.empty(total + 8, dtype=np.uint8)  # the last symbol's 8-byte store runs past the end
    bounds = np.empty(len(begins) + 1, dtype=np.int64)
    compiled.fsst_expand_ranges(codes, begins, ends, unit_bytes.view("<u8").reshape(256), unit_len, out, bounds)
    return out[:total], bounds


def decode_ranges(ctx: Ctx, table: bytes, src: np.ndarray, begins: np.ndarray,
                  ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decompress the strings whose codes are ``src[begins[i]:ends[i]]`` (in place in a page, not
    copied first when the compiled loops serve) -> (bytes, int64 offsets from 0)."""
    begins = np.asarray(begins, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    ctx.check(len(begins) == 0 or (int(begins.min()) >= 0 and int(ends.max()) <= len(src)
                                   and bool(np.all(begins <= ends))), "FSST strings outside their page")
    ctx.check(len(table) >= 8, "FSST symbol table too short")
    header = int.from_bytes(table[:8], "little")
    ctx.check(header >> 32 == _MAGIC, "bad FSST symbol table magic")
    compiled = kernels.compiled(int((ends - begins).sum())) if (header >> 24) & 1 else None
    if compiled is None:  # copy the codes together, then decode them
        codes = take_ranges(src, begins, ends - begins)
        data, offsets = decode(ctx, table, codes, exclusive_cumsum(ends - begins))
        return data, offsets - offsets[0]
    symbols, lengths = _symbols(ctx, table, header)
    return _expand(ctx, compiled, symbols, lengths, as_u8(src), begins, ends)


def _symbols(ctx: Ctx, table: bytes, header: int) -> tuple[np.ndarray, np.ndarray]:
    """The symbol table's symbols ``(count, 8)`` and lengths (int64), checked."""
    count = header & 0xFF
    ctx.check(count < 256 and len(table) >= 8 + 9 * count, "FSST symbol table truncated")
    symbols = np.frombuffer(table, dtype=np.uint8, count=8 * count, offset=8).reshape(count, 8)
    lengths = np.frombuffer(table, dtype=np.uint8, count=count, offset=8 + 8 * count).astype(np.int64)
    ctx.check(bool(np.all((lengths >= 1) & (lengths <= 8))), "bad FSST symbol length")
    return symbols, lengths


def decode(ctx: Ctx, table: bytes, codes: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decompress strings: (codes, int64 offsets) -> (bytes, int64 offsets).

    Codes are first turned into *units* (a symbol, or 256 + byte for an
    escaped literal); pairs of units are looked up in a table of all unit
    pairs with pyarrow's ``take`` of binary values, which writes the
    concatenated output in one C++ call (two units per element halves its
    per-element cost). String boundaries are then located from the pair
    offsets and the length of an odd trailing unit.
    """
    ctx.check(len(table) >= 8, "FSST symbol table too short")
    header = int.from_bytes(table[:8], "little")
    ctx.check(header >> 32 == _MAGIC, "bad FSST symbol table magic")
    if not (header >> 24) & 1:
        return codes, offsets
    symbols, lengths = _symbols(ctx, table, header)
    count = len(lengths)
    codes = as_u8(codes)
    n = len(codes)
    ctx.check(len(offsets) >= 1 and int(offsets[0]) >= 0 and int(offsets[-1]) <= n
              and bool(np.all(np.diff(offsets) >= 0)), "FSST offsets exceed the data")
    if n == 0:
        return codes, offsets - offsets[0]
    compiled = kernels.compiled(n)
    if compiled is not None:
        return _decode_compiled(ctx, compiled, symbols, lengths, codes, offsets)
    highest = int(codes.max())
    escapes = np.flatnonzero(codes == _ESCAPE) if highest == _ESCAPE else _NONE
    if len(escapes):
        # the first 0xFF of a run starts a code: even positions in a run are escapes
        new_run = np.ones(len(escapes), dtype=bool)
        new_run[1:] = escapes[1:] != escapes[:-1] + 1
        k = np.arange(len(escapes))
        first = np.maximum.accumulate(np.where(new_run, k, 0))
        escapes = escapes[((k - first) & 1) == 0]
        ctx.check(int(escapes[-1]) < n - 1, "FSST data ends with an escape")
        units = codes.astype(np.int32)
        units[escapes + 1] += 256
        keep = np.ones(n, dtype=bool)
        keep[escapes] = False
        units = units[keep]
        ctx.check(bool(np.all((units < count) | (units >= 256))), "FSST code outside the symbol table")
        unit_before = offsets - np.searchsorted(escapes, offsets, side="left")
        kinds = 512
    else:
        ctx.check(highest < count, "FSST code outside the symbol table")
        units = codes
        unit_before = offsets
        kinds = 256
    unit_bytes = np.zeros((kinds, 8), dtype=np.uint8)
    unit_bytes[:count] = symbols
    unit_len = np.zeros(kinds, dtype=np.int64)
    unit_len[:count] = lengths
    if kinds == 512:
        unit_bytes[256:, 0] = np.arange(256, dtype=np.uint8)
        unit_len[256:] = 1
    m = len(units)
    if m < _SMALL:  # few codes: expand each unit directly (no table of all pairs)
        units = np.asarray(units, dtype=np.int64)
        lengths = unit_len[units]
        ends = np.cumsum(lengths)
        index = np.repeat(units * 8 - (ends - lengths), lengths) + np.arange(int(ends[-1]) if m else 0)
        out = unit_bytes.reshape(-1)[index]
        starts = np.concatenate([[0], ends])
        return out, starts[np.asarray(unit_before, dtype=np.int64)]
    pairs = m // 2
    if kinds == 256:
        # little-endian u16 view of two codes = first + 256 * second: no arithmetic needed; an odd
        # last code is paired with code 255, which is no symbol here (count < 256) and expands to nothing
        if m & 1:
            padded = np.empty(m + 1, dtype=np.uint8)
            padded[:m] = units
            padded[m] = _ESCAPE
            units = padded
        index = units.view("<u2")
    else:
        index = np.empty(pairs + (m & 1), dtype=np.int32)
        index[:pairs] = units[0: 2 * pairs: 2] + units[1: 2 * pairs: 2] * kinds
        if m & 1:
            index[pairs] = kinds * kinds + int(units[-1])
    large = 16 * len(index) >= 2**31
    key = (table, kinds, large)
    pair_table = _PAIR_TABLES.get(key)
    if pair_table is None:
        pair_table = _pair_table(unit_bytes, unit_len, large=large)
        with _PAIR_LOCK:  # scans decode fragments on several threads
            if len(_PAIR_TABLES) >= 8:
                _PAIR_TABLES.pop(next(iter(_PAIR_TABLES)))
            _PAIR_TABLES[key] = pair_table
    expanded = pair_table.take(pa.array(index))
    width = 8 if expanded.type == pa.large_binary() else 4
    positions = np.frombuffer(expanded.buffers()[1], dtype=f"<i{width}", count=len(index) + 1)
    data = expanded.buffers()[2]
    out = np.frombuffer(data, dtype=np.uint8) if data is not None and data.size else np.zeros(0, np.uint8)
    # a string boundary after an odd number of units lies inside a pair
    unit_before = np.asarray(unit_before, dtype=np.int64)
    odd = (unit_before & 1) == 1
    boundary = positions[unit_before // 2].astype(np.int64)
    boundary[odd] += unit_len[np.asarray(units)[unit_before[odd] - 1]]
    return out[: int(positions[-1])], boundary

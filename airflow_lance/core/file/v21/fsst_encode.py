"""FSST string compression for writing 2.2 pages, vectorised (decoding: ``fsst``).

A symbol table (at most 255 symbols of 1-8 bytes) is trained on a sample of
a page's strings, as FSST does: a few generations of parsing the sample with
the current table, counting how often each unit (a symbol, or an escaped
byte) and each pair of consecutive units occurs, and keeping the 255
candidates (units and concatenated pairs, at most 8 bytes) of highest gain
(occurrences x length; single bytes x 8, since an escape costs two bytes).

Compression parses every string greedily, longest symbol first, with one
step per code for *all strings at once*: each step gathers the 8 bytes at
every string's current position (a strided ``u64`` view of the data),
looks up the one symbol of 3+ bytes whose first 3 bytes hash to that slot
(FSST keeps at most one per slot), else the best symbol of 1-2 bytes in a
table of all byte pairs, else an escape (code 255 + the byte). Strings are
cut into segments of at most ``SEGMENT`` bytes (no symbol spans a cut), so a
page takes at most ``SEGMENT`` steps whatever its longest string. The
stored table is the FSST crate's layout (see ``fsst``), which pylance's
decoder reads.
"""

from __future__ import annotations

import numpy as np

from airflow_lance.core.arrays import sorted_unique
from airflow_lance.core.file.v21.fsst import TABLE_SIZE, _MAGIC
from airflow_lance.core.file.v21.util import exclusive_cumsum, take_ranges

#: Bytes of strings sampled (evenly spaced strings) to train the symbol table, and generations.
SAMPLE_BYTES = 32 * 1024
GENERATIONS = 5
#: Strings are parsed in segments of at most this many bytes.
SEGMENT = 64
_SLOT_BITS = 14
_SLOTS = 1 << _SLOT_BITS
_ESCAPE = 255
_MAX_SYMBOLS = 255
_MASKS = np.array([0] + [(1 << (8 * k)) - 1 for k in range(1, 8)] + [(1 << 64) - 1], dtype=np.uint64)
_PRIME = np.uint64(2971215073)


class SymbolTable:
    """Symbols (``u64`` values, first byte lowest, zero padded) with their lengths, and lookups."""

    def __init__(self, values: np.ndarray, lengths: np.ndarray) -> None:
        self.values = np.asarray(values, dtype=np.uint64)
        self.lengths = np.asarray(lengths, dtype=np.int64)
        count = len(self.values)
        codes = np.arange(count)
        # symbols of 3+ bytes: one per hash slot of their first 3 bytes
        self.long_value = np.zeros(_SLOTS, dtype=np.uint64)
        self.long_len = np.zeros(_SLOTS, dtype=np.uint8)
        self.long_code = np.zeros(_SLOTS, dtype=np.uint8)
        long = np.flatnonzero(self.lengths >= 3)
        slots = _hash(self.values[long])
        self.long_value[slots] = self.values[long]
        self.long_len[slots] = self.lengths[long]
        self.long_code[slots] = codes[long]
        self.has_long = bool(len(long))
        # whether a symbol of 3+ bytes starts with a byte pair (most positions need no hash)
        self.long_start = np.zeros(65536, dtype=bool)
        self.long_start[(self.values[long] & np.uint64(0xFFFF)).astype(np.int64)] = True
        # 1-2 byte symbols: (code, bytes consumed) for every byte pair, then for every last byte
        self.short_code = np.full(65536 + 256, _ESCAPE, dtype=np.uint8)
        self.short_adv = np.ones(65536 + 256, dtype=np.uint8)
        one = np.flatnonzero(self.lengths == 1)
        ones = self.values[one].astype(np.int64)
        self.short_code[65536 + ones] = codes[one]
        pairs = self.short_code[:65536].reshape(256, 256)  # [second byte, first byte]
        pairs[:, ones] = codes[one]
        two = np.flatnonzero(self.lengths == 2)
        twos = self.values[two].astype(np.int64)
        self.short_code[twos] = codes[two]
        self.short_adv[twos] = 2

    def export(self) -> bytes:
        """The 2312-byte table of the FSST crate (compression switch on)."""
        count = len(self.values)
        header = (_MAGIC << 32) | (1 << 24) | count
        out = np.zeros(TABLE_SIZE, dtype=np.uint8)
        out[:8] = np.array([header], dtype="<u8").view(np.uint8)
        out[8: 8 + 8 * count] = self.values.astype("<u8").view(np.uint8)
        out[8 + 8 * count: 8 + 9 * count] = self.lengths
        return out.tobytes()


def _hash(prefixes: np.ndarray) -> np.ndarray:
    """Hash slot of the first 3 bytes of little-endian words (``u32`` or ``u64``)."""
    three = (prefixes & 0xFFFFFF).astype(np.uint32)
    return (three * np.uint32(_PRIME) >> np.uint32(32 - _SLOT_BITS)).astype(np.intp)


class _Views:
    """The data as little-endian ``u16``/``u32``/``u64`` at every byte position (zero padded)."""

    def __init__(self, data: np.ndarray) -> None:
        padded = np.zeros(len(data) + 8, dtype=np.uint8)
        padded[: len(data)] = data
        self.u16 = np.ndarray((len(data),), dtype="<u2", buffer=padded, strides=(1,))
        self.u32 = np.ndarray((len(data),), dtype="<u4", buffer=padded, strides=(1,))
        self.u64 = np.ndarray((len(data),), dtype="<u8", buffer=padded, strides=(1,))


def _step(table: SymbolTable, views: _Views, pos: np.ndarray, rem: np.ndarray):
    """The next code at every position (``rem`` bytes left in its segment): (code, advance, pair),
    ``pair`` the two bytes at the position (the escaped byte is its low byte)."""
    pair = views.u16[pos]
    code = table.short_code[pair]
    advance = table.short_adv[pair]
    last = np.flatnonzero(rem == 1)  # one byte left: no 2-byte symbol
    if len(last):
        single = 65536 + (pair[last] & 0xFF).astype(np.intp)
        code[last] = table.short_code[single]
        advance[last] = 1
    if table.has_long:
        cand = np.flatnonzero(table.long_start[pair])
        if len(cand):
            at = pos[cand]
            cand_slot = _hash(views.u32[at])
            cand_len = table.long_len[cand_slot]
            ok = (cand_len <= rem[cand]) & ((views.u64[at] & _MASKS[cand_len]) == table.long_value[cand_slot])
            ok &= cand_len > 0
            hit = cand[ok]
            code[hit] = table.long_code[cand_slot[ok]]
            advance[hit] = cand_len[ok]
    return code, advance, pair


def _segments(offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(string of each segment, start, end) of the non-empty strings cut every ``SEGMENT`` bytes."""
    lengths = np.diff(offsets)
    pieces = -(-lengths // SEGMENT)
    strings = np.repeat(np.arange(len(lengths)), pieces)
    if len(strings) == int(np.count_nonzero(lengths)):  # no string longer than a segment
        return strings, offsets[:-1][strings], offsets[1:][strings]
    within = np.arange(len(strings)) - np.repeat(exclusive_cumsum(pieces)[:-1], pieces)
    starts = offsets[:-1][strings] + within * SEGMENT
    return strings, starts, np.minimum(starts + SEGMENT, offsets[1:][strings])


def train(data: np.ndarray, offsets: np.ndarray) -> SymbolTable:
    """A symbol table for the strings ``data``/``offsets`` (int64 offsets starting at 0)."""
    n = len(offsets) - 1
    total = int(offsets[-1])
    if total > SAMPLE_BYTES and n > 1:
        average = total / n
        picks = sorted_unique(np.linspace(0, n - 1, max(int(SAMPLE_BYTES / max(average, 1)), 1)).astype(np.int64))
        lengths = offsets[picks + 1] - offsets[picks]
        sample = take_ranges(data, offsets[picks], lengths)
        sample_offsets = exclusive_cumsum(lengths)
    else:
        sample, sample_offsets = data[:total], offsets
    views = _Views(sample)
    _, starts, ends = _segments(sample_offsets)
    table = SymbolTable(np.zeros(0, np.uint64), np.zeros(0, np.int64))
    for _ in range(GENERATIONS):
        steps: list[tuple[np.ndarray, ...]] = []
        segments, pos, end = np.arange(len(starts)), starts.copy(), ends
        step = 0
        while len(pos):
            _, advance, _ = _step(table, views, pos, end - pos)
            steps.append((segments, np.full(len(segments), step), views.u64[pos] & _MASKS[advance],
                          advance.astype(np.int64)))
            pos = pos + advance
            live = pos < end
            segments, pos, end = segments[live], pos[live], end[live]
            step += 1
        segment = np.concatenate([s[0] for s in steps])
        order = np.lexsort((np.concatenate([s[1] for s in steps]), segment))
        segment = segment[order]
        value = np.concatenate([s[2] for s in steps])[order]
        length = np.concatenate([s[3] for s in steps])[order]
        # candidates: every unit, and every pair of consecutive units of a segment
        same = segment[1:] == segment[:-1]
        first, second = np.flatnonzero(same), np.flatnonzero(same) + 1
        pair_len = np.minimum(length[first] + length[second], 8)
        shifted = np.where(length[first] < 8, value[second] << (8 * np.minimum(length[first], 7)).astype(np.uint64),
                           np.uint64(0))
        pair_value = (value[first] | shifted) & _MASKS[pair_len]
        cand_value = np.concatenate([value, pair_value])
        cand_len = np.concatenate([length, pair_len])
        order = np.lexsort((cand_len, cand_value))
        cand_value, cand_len = cand_value[order], cand_len[order]
        new = np.ones(len(cand_value), dtype=bool)
        new[1:] = (cand_value[1:] != cand_value[:-1]) | (cand_len[1:] != cand_len[:-1])
        heads = np.flatnonzero(new)
        count = np.diff(np.append(heads, len(cand_value)))
        cand_value, cand_len = cand_value[heads], cand_len[heads]
        gain = count * np.where(cand_len == 1, 8, cand_len)
        rank = np.lexsort((cand_value, -gain))
        cand_value, cand_len, gain = cand_value[rank], cand_len[rank], gain[rank]
        # one symbol of 3+ bytes per hash slot: the one of highest gain
        long = cand_len >= 3
        slot = np.where(long, _hash(cand_value), -1 - np.arange(len(cand_value)))
        _, keep = np.unique(slot, return_index=True)
        keep = np.sort(keep)[:_MAX_SYMBOLS]
        table = SymbolTable(cand_value[keep], cand_len[keep])
    return table


def compress(table: SymbolTable, data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """FSST codes of the strings ``data``/``offsets`` (int64 positions in ``data``): (codes, int64 code
    offsets from 0)."""
    n = len(offsets) - 1
    strings, starts, ends = _segments(offsets)
    if not len(starts):
        return np.zeros(0, np.uint8), np.zeros(n + 1, np.int64)
    base = int(offsets[0])
    views = _Views(data[base: int(offsets[-1])])
    begin = 2 * (starts - base)  # a segment's codes take at most twice its bytes
    out = np.empty(2 * (int(offsets[-1]) - base), dtype=np.uint8)
    written = np.empty(len(starts), dtype=np.int64)
    segments, pos, end, at = np.arange(len(starts)), starts - base, ends - base, begin.copy()
    while len(pos):
        code, advance, pair = _step(table, views, pos, end - pos)
        out[at] = code
        escaped = np.flatnonzero(code == _ESCAPE)
        if len(escaped):
            out[at[escaped] + 1] = (pair[escaped] & 0xFF).astype(np.uint8)
            at[escaped] += 1
        at += 1
        pos += advance
        done = np.flatnonzero(pos >= end)
        if len(done):
            written[segments[done]] = at[done]
            live = pos < end
            segments, pos, end, at = segments[live], pos[live], end[live], at[live]
    written -= begin
    codes = take_ranges(out, begin, written)
    per_string = np.bincount(strings, weights=written, minlength=n).astype(np.int64)
    return codes, exclusive_cumsum(per_string)

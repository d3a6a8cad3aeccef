"""JSONB to canonical JSON text for a whole column at once (see :mod:`.jsonb` for the format).

Every value is a tree of containers; the column's trees are walked together, one level at a time,
with numpy over all containers of that level:

1. top down, each level's containers are split into their elements (headers and entries read
   with vectorised gathers; an object's keys and values interleaved in output order);
2. each leaf's text is built in bulk: strings are their own bytes between quotes (the few that
   need escapes go through ``json.dumps``), integers of every width and sign are cast to text by
   Arrow, doubles get Python's shortest ``repr`` in pylance's notation, ``null``/``true``/``false``
   are constants;
3. bottom up, each container's text length is its elements' lengths plus brackets and
   separators; top down again, each element's position in the output follows from its
   container's and its preceding siblings';
4. one output buffer is filled: brackets and separators by scatter, leaf texts by one ranged copy.

With the compiled loops (the ``fast`` extra, :mod:`.file.v21.kernels`) one loop walks each
document instead, twice: once for the texts' lengths and the doubles' positions, once to write
the texts (doubles, formatted by Python's ``repr`` in between, copied in). A value it does not
handle (a decimal, nesting deeper than 256, anything malformed) sends the column to the numpy
path, which names what is wrong. ``bench/bench_json.py`` (200,000 documents of five keys with a
nested array, written by pylance 14, read back with ``to_table``): 3.5 s one value at a time
before, 1.30 s with numpy, 0.24 s compiled; pylance 0.05 s.

The result equals :func:`.jsonb.decode_value` of every value (the tests compare both on random
documents, both paths, and on pylance's files); a malformed value is a ``CorruptFileError``.
"""

from __future__ import annotations

from json.encoder import encode_basestring  # type: ignore[attr-defined]

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_lance.core.errors import CorruptFileError
from airflow_lance.core.file.v21 import kernels
from airflow_lance.core.file.v21.util import exclusive_cumsum, range_positions, take_ranges

#: JSONB's container headers (type bits or-ed with the number of entries) and entries (type bits
#: or-ed with the element's length), also used by the encoder and the one-value decoder (``jsonb``)
_ARRAY, _OBJECT, _SCALAR = 0x80000000, 0x40000000, 0x20000000
_HEADER_TYPE, _HEADER_LEN = 0xE0000000, 0x1FFFFFFF
_NULL, _STRING, _NUMBER, _FALSE, _TRUE, _CONTAINER = (t << 28 for t in range(6))
_ENTRY_TYPE, _ENTRY_LEN = 0x70000000, 0x0FFFFFFF
_CONSTANTS = {_NULL: b"null", _TRUE: b"true", _FALSE: b"false"}


class _Corrupt(ValueError):
    pass


def _be32(data: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Big-endian u32 at every position of ``at`` (int64)."""
    out = data[at].astype(np.int64) << 24
    out |= data[at + 1].astype(np.int64) << 16
    out |= data[at + 2].astype(np.int64) << 8
    out |= data[at + 3]
    return out


def _be_uint(data: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """Big-endian unsigned integers of ``width`` bytes at ``at`` (uint64)."""
    out = np.zeros(len(at), dtype=np.uint64)
    for k in range(width):
        out <<= np.uint64(8)
        out |= data[at + k].astype(np.uint64)
    return out


def _segment_before(values: np.ndarray, groups: np.ndarray, count: int) -> np.ndarray:
    """For values grouped by ``groups`` (ascending, ``count`` groups): the sum of the values before
    each one in its group."""
    totals = np.bincount(groups, weights=values, minlength=count).astype(np.int64)
    return np.cumsum(values) - values - exclusive_cumsum(totals)[:-1][groups]


class _Pieces:
    """Texts built outside the source bytes (numbers, escaped strings), in one buffer."""

    def __init__(self) -> None:
        self.arrays: list[pa.Array] = []
        self.size = 0

    def add(self, texts: pa.Array) -> np.ndarray:
        """Append ``texts`` (strings); returns their start offsets in the buffer; lengths via ``lengths``."""
        texts = texts.cast(pa.large_string())
        offsets = np.frombuffer(texts.buffers()[1], dtype=np.int64)[texts.offset: texts.offset + len(texts) + 1]
        self.arrays.append(texts)
        starts = offsets[:-1] - offsets[0] + self.size
        self.size += int(offsets[-1] - offsets[0])
        return starts

    def buffer(self) -> np.ndarray:
        if not self.arrays:
            return np.zeros(0, dtype=np.uint8)
        joined = pa.concat_arrays(self.arrays)
        offsets = np.frombuffer(joined.buffers()[1], dtype=np.int64)[joined.offset: joined.offset + len(joined) + 1]
        data = joined.buffers()[2]
        raw = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, dtype=np.uint8)
        return raw[int(offsets[0]): int(offsets[-1])]


def _text_lengths(texts: pa.Array) -> np.ndarray:
    return pc.binary_length(texts).to_numpy(zero_copy_only=False).astype(np.int64)


def _numbers(data: np.ndarray, start: np.ndarray, length: np.ndarray, pieces: _Pieces, fallback
             ) -> tuple[np.ndarray, np.ndarray]:
    """(start in ``pieces``, text length) of every number element."""
    tag = data[start].astype(np.int64)
    body = length - 1
    out_start = np.zeros(len(start), dtype=np.int64)
    out_len = np.zeros(len(start), dtype=np.int64)
    done = np.zeros(len(start), dtype=bool)

    def place(mask: np.ndarray, texts: pa.Array) -> None:
        out_start[mask] = pieces.add(texts)
        out_len[mask] = _text_lengths(texts)
        done[mask] = True

    zero = tag == 0x00
    if zero.any():
        place(zero, pa.array(["0"] * int(zero.sum()), pa.string()))
    for width in (1, 2, 4, 8):
        for signed in (True, False):
            mask = (tag == (0x40 if signed else 0x50)) & (body == width)
            if not mask.any():
                continue
            raw = _be_uint(data, start[mask] + 1, width)
            if signed:
                values = raw.view(np.int64) if width == 8 else (
                    raw.astype(np.int64) - ((raw >> np.uint64(8 * width - 1)).astype(np.int64) << (8 * width)))
                place(mask, pa.array(values, pa.int64()).cast(pa.string()))
            else:
                place(mask, pa.array(raw, pa.uint64()).cast(pa.string()))
    double = (tag == 0x60) & (body == 8)
    if double.any():
        values = _be_uint(data, start[double] + 1, 8).view(np.float64)
        if not np.isfinite(values).all():
            raise _Corrupt(f"JSONB holds {values[~np.isfinite(values)][0]}, which JSON text cannot")
        place(double, _double_texts(values))
    if np.isin(tag, (0x10, 0x20, 0x30)).any():
        raise _Corrupt("JSONB holds NaN or an infinity, which JSON text cannot")
    rest = np.flatnonzero(~done)
    if len(rest):  # decimals (rare) and anything malformed: one by one
        place(~done, pa.array([fallback(data[int(s): int(s) + int(n)].tobytes())
                               for s, n in zip(start[rest], length[rest], strict=True)], pa.string()))
    return out_start, out_len


def decode_column(values: pa.Array, where: str = "") -> pa.Array:
    """The canonical JSON text (``large_string``) of every JSONB value of ``values`` (a binary or
    large binary array); nulls stay null. ``CorruptFileError`` for a malformed value."""
    from airflow_lance.core.jsonb import _read_number

    if pa.types.is_binary(values.type):
        values = values.cast(pa.large_binary())
    n = len(values)
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int64)[values.offset: values.offset + n + 1]
    buffer = values.buffers()[2]
    data = np.frombuffer(buffer, dtype=np.uint8) if buffer is not None else np.zeros(0, dtype=np.uint8)
    valid = np.ones(n, dtype=bool) if values.null_count == 0 else values.is_valid().to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(valid)
    try:
        loops = kernels.compiled(int(offsets[-1] - offsets[0]))
        texts = None if loops is None else _compiled(loops, data, offsets, rows)
        if texts is None:
            texts = _decode(data, offsets, rows, _read_number)
        row_offsets, out = texts
        validity = None if values.null_count == 0 else pa.py_buffer(np.packbits(valid, bitorder="little"))
        result = pa.LargeStringArray.from_buffers(n, pa.py_buffer(row_offsets), pa.py_buffer(out), validity,
                                                  values.null_count)
        result.validate(full=True)  # UTF-8: a string's bad bytes stay bad between the text's ASCII
        return result
    except (_Corrupt, ValueError, IndexError, pa.ArrowInvalid) as exc:
        raise CorruptFileError(where, f"malformed JSONB value: {exc}") from None


def _escapes() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per byte: its length inside a JSON string (1, 2 for a short escape, 6 for \\u00XX) and its
    short escape letter; the hex digits. As ``json.dumps(..., ensure_ascii=False)`` escapes."""
    length = np.ones(256, dtype=np.int64)
    length[:0x20] = 6
    letter = np.zeros(256, dtype=np.uint8)
    for byte, char in ((0x22, '"'), (0x5C, "\\"), (0x08, "b"), (0x0C, "f"), (0x0A, "n"), (0x0D, "r"), (0x09, "t")):
        length[byte] = 2
        letter[byte] = ord(char)
    return length, letter, np.frombuffer(b"0123456789abcdef", dtype=np.uint8).copy()


_ESCAPE_LENGTH, _ESCAPE_LETTER, _HEX = _escapes()


#: pylance's text of a double: Python's shortest ``repr`` digits, exponent notation below 1e-5 and
#: from 1e16 on (Python's below 1e-4), the exponent without zero padding (1e-7, not 1e-07). Two
#: rewrites of a repr, applied in this order: its exponent -5 written out (-7.5e-05 -> -0.000075),
#: then the zero padding dropped. Replacements in RE2's syntax (`\1`, a single digit).
DOUBLE_NOTATION = ((r"^(-?)(\d)(?:\.(\d+))?e-05$", r"\10.0000\2\3"), (r"e([+-])0(\d)$", r"e\1\2"))


def _double_texts(values: np.ndarray) -> pa.Array:
    """pylance's texts of doubles (:data:`DOUBLE_NOTATION`)."""
    texts = pa.array([repr(v) for v in values.tolist()], pa.string())
    for pattern, replacement in DOUBLE_NOTATION:
        texts = pc.replace_substring_regex(texts, pattern=pattern, replacement=replacement)
    return texts


def _compiled(loops, data: np.ndarray, offsets: np.ndarray, rows: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray] | None:
    """(row offsets, text bytes) by the compiled loop's two passes, or None when a value needs the
    numpy path (a decimal, deep nesting, or something malformed, which it then names)."""
    starts, ends = offsets[rows].astype(np.int64), offsets[rows + 1].astype(np.int64)
    capacity = len(data) // 13 + 1  # a double takes an entry and a tag and 8 bytes
    double_at = np.empty(capacity, dtype=np.int64)
    double_row = np.empty(capacity, dtype=np.int64)
    lengths = np.zeros(len(rows), dtype=np.int64)
    no_text, no_offsets = np.zeros(0, dtype=np.uint8), np.zeros(1, dtype=np.int64)
    status, doubles = loops.jsonb_text(data, starts, ends, _ESCAPE_LENGTH, _ESCAPE_LETTER, _HEX, False, no_text,
                                       lengths, lengths, double_at, double_row, no_text, no_offsets)
    if status:
        return None
    values = _be_uint(data, double_at[:doubles], 8).view(np.float64)
    texts = _double_texts(values).cast(pa.large_string())
    text_offsets = np.frombuffer(texts.buffers()[1], dtype=np.int64)[: doubles + 1]
    text = np.frombuffer(texts.buffers()[2], dtype=np.uint8) if doubles else no_text
    lengths += np.bincount(double_row[:doubles], weights=np.diff(text_offsets), minlength=len(rows)).astype(np.int64)
    row_len = np.zeros(len(offsets) - 1, dtype=np.int64)
    row_len[rows] = lengths
    row_offsets = exclusive_cumsum(row_len)
    out = np.empty(int(row_offsets[-1]), dtype=np.uint8)
    status, _ = loops.jsonb_text(data, starts, ends, _ESCAPE_LENGTH, _ESCAPE_LETTER, _HEX, True, out,
                                 row_offsets[:-1][rows], lengths, double_at, double_row, text, text_offsets)
    if status:
        raise _Corrupt("a value read differently by the second pass")
    return row_offsets, out


def _decode(data: np.ndarray, offsets: np.ndarray, rows: np.ndarray, read_number
            ) -> tuple[np.ndarray, np.ndarray]:
    n = len(offsets) - 1

    # --- 1. top down: every level's containers split into elements ---------------------------
    # nodes: every root and every element; containers are nodes too (their own level's entries)
    node_kind = np.full(len(rows), _CONTAINER, dtype=np.int64)
    node_start = offsets[rows].astype(np.int64)
    node_len = (offsets[rows + 1] - offsets[rows]).astype(np.int64)
    # per level: its containers' node ids and types, then for their elements in output order: node
    # ids, containers (positions in the level) and whether each is an object's value (not a key)
    levels = []
    count = len(rows)
    frontier = np.arange(count, dtype=np.int64)
    while len(frontier):
        c_start, c_len = node_start[frontier], node_len[frontier]
        if bool((c_len < 4).any()):
            raise _Corrupt("a container shorter than its header")
        header = _be32(data, c_start)
        c_type = header & _HEADER_TYPE
        c_count = header & _HEADER_LEN
        if not np.isin(c_type, (_ARRAY, _OBJECT, _SCALAR)).all():
            raise _Corrupt(f"container header {int(header[~np.isin(c_type, (_ARRAY, _OBJECT, _SCALAR))][0]):#x}")
        entries = np.where(c_type == _OBJECT, 2 * c_count, np.where(c_type == _SCALAR, 1, c_count))
        head = 4 + 4 * entries
        if bool((head > c_len).any()):
            raise _Corrupt("entries past the end of a container")
        first = exclusive_cumsum(entries)
        total = int(first[-1])
        parent = np.repeat(np.arange(len(frontier), dtype=np.int64), entries)
        local = np.arange(total, dtype=np.int64) - first[:-1][parent]
        entry = _be32(data, c_start[parent] + 4 + 4 * local)
        e_len = entry & _ENTRY_LEN
        e_kind = entry & _ENTRY_TYPE
        within = _segment_before(e_len, parent, len(frontier))
        e_start = c_start[parent] + head[parent] + within
        if total and bool((within + e_len > c_len[parent] - head[parent]).any()):
            raise _Corrupt("element past the end")
        # output order: an object's key i then its value i
        pair = np.where(c_type[parent] == _OBJECT, np.where(local < c_count[parent], 2 * local,
                                                             2 * (local - c_count[parent]) + 1), local)
        order = np.empty(total, dtype=np.int64)
        order[first[:-1][parent] + pair] = np.arange(total, dtype=np.int64)
        ids = count + np.arange(total, dtype=np.int64)
        count += total
        node_kind = np.concatenate([node_kind, e_kind])
        node_start = np.concatenate([node_start, e_start])
        node_len = np.concatenate([node_len, e_len])
        levels.append((frontier, c_type, ids[order], parent[order], pair[order] % 2))
        frontier = ids[e_kind == _CONTAINER]

    # --- 2. leaves' texts ----------------------------------------------------------------------
    text_len = np.zeros(count, dtype=np.int64)
    source_start = np.zeros(count, dtype=np.int64)  # in data (strings) or, shifted later, in pieces
    from_pieces = np.zeros(count, dtype=bool)
    quoted = np.zeros(count, dtype=bool)
    pieces = _Pieces()
    unknown = ~np.isin(node_kind, (_NULL, _STRING, _NUMBER, _FALSE, _TRUE, _CONTAINER))
    if unknown.any():
        raise _Corrupt(f"entry type {int(node_kind[unknown][0]) >> 28} (a Databend extension value)")
    for constant, text in _CONSTANTS.items():
        mask = node_kind == constant
        if mask.any():
            source_start[mask] = pieces.add(pa.array([text.decode()], pa.string()))[0]
            text_len[mask] = len(text)
            from_pieces[mask] = True
    strings = np.flatnonzero(node_kind == _STRING)
    if len(strings):
        s_start, s_len = node_start[strings], node_len[strings]
        raw = take_ranges(data, s_start, s_len)
        as_text = pa.LargeStringArray.from_buffers(len(strings), pa.py_buffer(exclusive_cumsum(s_len)),
                                                   pa.py_buffer(raw))
        as_text.validate(full=True)  # UTF-8
        special = np.cumsum(np.concatenate(([0], (raw < 0x20) | (raw == 0x22) | (raw == 0x5C))))
        bounds = exclusive_cumsum(s_len)
        escaped = special[bounds[1:]] > special[bounds[:-1]]
        plain = strings[~escaped]
        source_start[plain] = node_start[plain]
        text_len[plain] = node_len[plain] + 2
        quoted[plain] = True
        if escaped.any():
            # json.dumps(t, ensure_ascii=False) of a string, without its dispatch
            texts = pa.array([encode_basestring(t) for t in as_text.filter(pa.array(escaped)).to_pylist()],
                             pa.string())
            source_start[strings[escaped]] = pieces.add(texts)
            text_len[strings[escaped]] = _text_lengths(texts)
            from_pieces[strings[escaped]] = True
    numbers = np.flatnonzero(node_kind == _NUMBER)
    if len(numbers):
        if bool((node_len[numbers] < 1).any()):
            raise _Corrupt("a number without its tag")
        at, size = _numbers(data, node_start[numbers], node_len[numbers], pieces, read_number)
        source_start[numbers], text_len[numbers], from_pieces[numbers] = at, size, True

    # --- 3. bottom up: container lengths; top down: positions --------------------------------
    separator = [np.zeros(0, dtype=np.int64)] * len(levels)
    for depth in range(len(levels) - 1, -1, -1):
        containers, c_type, elements, parents, is_value = levels[depth]
        last = np.zeros(len(elements), dtype=bool)
        if len(elements):
            last[np.r_[np.flatnonzero(np.diff(parents)), len(parents) - 1]] = True
        # after an object's key ':'; after any other element but its container's last ','
        sep = np.where((c_type[parents] == _OBJECT) & (is_value == 0), ord(":"), np.where(last, 0, ord(",")))
        sep = np.where(c_type[parents] == _SCALAR, 0, sep)
        separator[depth] = sep
        inner = np.bincount(parents, weights=text_len[elements] + (sep != 0), minlength=len(containers))
        text_len[containers] = inner.astype(np.int64) + np.where(c_type == _SCALAR, 0, 2)
    out_start = np.zeros(count, dtype=np.int64)
    row_len = np.zeros(n, dtype=np.int64)
    row_len[rows] = text_len[: len(rows)]
    row_offsets = exclusive_cumsum(row_len)
    out_start[: len(rows)] = row_offsets[:-1][rows]
    out = np.empty(int(row_offsets[-1]), dtype=np.uint8)
    for depth, (containers, c_type, elements, parents, _) in enumerate(levels):
        sep = separator[depth]
        step = text_len[elements] + (sep != 0)
        before = _segment_before(step, parents, len(containers))
        opened = np.where(c_type == _SCALAR, 0, 1)
        out_start[elements] = out_start[containers][parents] + opened[parents] + before
        bracketed = c_type != _SCALAR
        at = out_start[containers][bracketed]
        out[at] = np.where(c_type[bracketed] == _OBJECT, ord("{"), ord("["))
        out[at + text_len[containers][bracketed] - 1] = np.where(c_type[bracketed] == _OBJECT, ord("}"), ord("]"))
        has_sep = sep != 0
        out[out_start[elements][has_sep] + text_len[elements][has_sep]] = sep[has_sep]

    # --- 4. leaf texts into place --------------------------------------------------------------
    extra = pieces.buffer()
    source = np.concatenate([data, extra])
    leaves = np.flatnonzero(node_kind != _CONTAINER)
    body_start = np.where(from_pieces[leaves], source_start[leaves] + len(data), source_start[leaves])
    body_len = np.where(quoted[leaves], text_len[leaves] - 2, text_len[leaves])
    body_at = out_start[leaves] + quoted[leaves]
    if len(leaves) and (int(body_start.min()) < 0 or int((body_start + body_len).max()) > len(source)):
        raise _Corrupt("a value past the end of the column")
    loops = kernels.compiled(int(body_len.sum()))
    if loops is not None:
        loops.scatter_ranges(source, body_start, body_len, out, body_at)
    else:
        out[range_positions(body_at, body_len, int(body_len.sum()))] = take_ranges(source, body_start, body_len)
    q = leaves[quoted[leaves]]
    out[out_start[q]] = ord('"')
    out[out_start[q] + text_len[q] - 1] = ord('"')

    return row_offsets, out

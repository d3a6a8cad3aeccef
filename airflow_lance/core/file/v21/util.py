"""Byte-level helpers shared by the 2.1+ codec: error context, range gathers, codecs.

Everything here is vectorised over numpy arrays; ``take_ranges`` copies many
``(start, length)`` ranges of one buffer into a new contiguous array with a
single C-level call (pyarrow's list-view flatten for long ranges, one numpy
fancy index for short ones), so callers never loop over chunks or values.
"""

from __future__ import annotations

import struct
import threading
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import zstandard

from airflow_lance.core._proto import encodings_v2_1_pb2 as pb
from airflow_lance.core.errors import CorruptFileError, UnsupportedFeatureError
from airflow_lance.core.file.v21 import kernels

#: Ranges of at least this many bytes on average are gathered with pyarrow, a memcpy each: in
#: order 5-10x the compiled loop's speed (which copies about 1 GB/s), at random places faster too.
_MEMCPY_RANGE = 4096
#: Ranges of at least this many bytes on average (and under ``_MEMCPY_RANGE``) take the compiled
#: loop only when it is loaded already: pyarrow's per-range cost (about 0.7 us) makes it up to 2x
#: slower there, against about 0.8 s of CPU to load numba, so a process that only writes
#: (whose gathers are string and mini-block chunks) never loads it.
_MEDIUM_RANGE = 256
#: Without the compiled loops, ranges of at least this many values on average are gathered with
#: pyarrow too (numpy's per-byte index costs more from here on).
_LONG_RANGE = 48
_EMPTY_U8 = np.zeros(0, dtype=np.uint8)
#: Memory alignment of gathered page data: a direct-I/O sink can write it without a copy.
PAGE_MEMORY_ALIGNMENT = 4096


@dataclass(frozen=True)
class Ctx:
    """Where we are (file, column, page) for error messages."""

    path: str
    where: str

    def corrupt(self, reason: str) -> CorruptFileError:
        """A ``CorruptFileError`` naming the file and the page."""
        return CorruptFileError(self.path, f"{self.where}: {reason}")

    def unsupported(self, what: str) -> UnsupportedFeatureError:
        """An ``UnsupportedFeatureError`` naming the file and the page."""
        return UnsupportedFeatureError(f"{self.path}: {self.where}: {what} is not supported")

    def check(self, condition: bool, reason: str) -> None:
        """Raise ``corrupt(reason)`` unless ``condition``."""
        if not condition:
            raise self.corrupt(reason)


class LazyBuffer:
    """A page buffer that is not read yet: :meth:`gather` reads only some of its byte ranges.

    ``read(offset, size)`` reads bytes of the buffer; ranges closer than
    ``gap`` bytes are read with one request. :meth:`gather` returns the bytes
    read, back to back, and where each requested range starts in them
    (relative order, and the offset of a range from the start of its request,
    hence 8-byte alignment of 8-aligned ranges, are kept).
    """

    def __init__(self, read, size: int, gap: int) -> None:
        self._read = read
        self.size = size
        self.gap = gap
        self._whole: np.ndarray | None = None

    def __len__(self) -> int:
        return self.size

    def whole(self) -> np.ndarray:
        if self._whole is None:
            self._whole = as_u8(self._read(0, self.size)) if self.size else _EMPTY_U8
        return self._whole

    def gather(self, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(bytes, start of every range in them) for sorted, non-overlapping ranges in the buffer."""
        starts = np.asarray(starts, dtype=np.int64)
        lengths = np.asarray(lengths, dtype=np.int64)
        if self._whole is not None or not len(starts):
            return self.whole() if len(starts) else _EMPTY_U8, starts
        ends = starts + lengths
        if int(starts[0]) < 0 or int(ends[-1]) > self.size or bool(np.any(starts[1:] < ends[:-1])):
            raise ValueError("byte ranges outside the buffer or out of order")
        new_run = np.ones(len(starts), dtype=bool)
        new_run[1:] = starts[1:] > ends[:-1] + self.gap
        heads = np.flatnonzero(new_run)
        run_starts, run_ends = starts[heads], ends[np.append(heads[1:], len(starts)) - 1]
        if len(heads) == 1 and int(run_starts[0]) == 0 and int(run_ends[0]) == self.size:
            return self.whole(), starts
        pieces = [as_u8(self._read(s, e - s)) for s, e in zip(run_starts.tolist(), run_ends.tolist())]
        data = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
        run = np.cumsum(new_run) - 1
        bases = exclusive_cumsum(run_ends - run_starts)[:-1]
        return data, bases[run] + starts - run_starts[run]


def gather(buffer, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, new range starts): the bytes of ``buffer`` holding the given ranges (a
    :class:`LazyBuffer` reads only them) and where each range starts in those bytes."""
    if isinstance(buffer, LazyBuffer):
        return buffer.gather(starts, lengths)
    return as_u8(buffer), np.asarray(starts, dtype=np.int64)


def as_u8(buffer: pa.Buffer | bytes | np.ndarray) -> np.ndarray:
    """A read-only uint8 view of a buffer (no copy)."""
    if isinstance(buffer, LazyBuffer):
        return buffer.whole()
    if isinstance(buffer, np.ndarray):
        return buffer.view(np.uint8) if buffer.dtype != np.uint8 else buffer
    if len(buffer) == 0:
        return _EMPTY_U8
    return np.frombuffer(buffer, dtype=np.uint8)


def exclusive_cumsum(values: np.ndarray) -> np.ndarray:
    """``[0, v0, v0+v1, ...]`` (length ``len(values) + 1``, int64)."""
    out = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(values, out=out[1:])
    return out


def aligned_empty(nbytes: int, alignment: int = PAGE_MEMORY_ALIGNMENT) -> np.ndarray:
    """An uninitialised uint8 array of ``nbytes`` whose first byte is ``alignment``-aligned."""
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    skip = -int(raw.ctypes.data) % alignment
    return raw[skip: skip + nbytes]


def take_ranges(source: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenate ``source[s:s+l]`` for every (s, l), vectorised; IndexError when a range is out
    of bounds (a corrupt file's offsets)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    starts = np.asarray(starts, dtype=np.int64)
    total = int(lengths.sum()) if len(lengths) else 0
    if total == 0:
        return source[:0].copy()
    if int(lengths.min()) < 0:
        raise IndexError("a range of negative length")
    if int(starts.min()) < 0 or int((starts + lengths).max()) > len(source):
        # empty ranges may start anywhere (a null's value past the end of a page); any other must lie inside
        empty = lengths == 0
        if bool(np.any(~empty & ((starts < 0) | (starts + lengths > len(source))))):
            raise IndexError(f"ranges outside the {len(source)} values they are taken from")
        starts = np.where(empty, 0, starts)
    if len(starts) == 1:
        return source[int(starts[0]): int(starts[0]) + total].copy()
    nbytes = total * source.itemsize
    if nbytes >= _MEMCPY_RANGE * len(lengths):
        return _flatten_ranges(source, starts, lengths)
    plain = source.ndim == 1 and source.flags.c_contiguous and not source.dtype.hasobject
    compiled = kernels.compiled(total, load=nbytes < _MEDIUM_RANGE * len(lengths)) if plain else None
    if compiled is not None:
        out = np.empty(total, dtype=source.dtype)
        size = source.itemsize  # copied as bytes: one compiled loop for every dtype
        compiled.copy_ranges(source.view(np.uint8), starts * size, lengths * size, out.view(np.uint8))
        return out
    if total >= _LONG_RANGE * len(lengths):
        return _flatten_ranges(source, starts, lengths)
    return source[range_positions(starts, lengths, total)]


def range_positions(starts: np.ndarray, lengths: np.ndarray, total: int) -> np.ndarray:
    """The positions ``starts[i] .. starts[i] + lengths[i] - 1`` of every range, concatenated
    (``total``: the sum of ``lengths``)."""
    index = np.repeat(starts - exclusive_cumsum(lengths)[:-1], lengths)
    index += np.arange(total, dtype=np.int64)
    return index


def _flatten_ranges(source: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``take_ranges`` by pyarrow: a memcpy per range (ranges that follow each other in ``source``
    are not copied at all: the result is then a read-only view)."""
    values = pa.array(source) if source.dtype != np.uint8 or source.ndim != 1 else pa.array(source, pa.uint8())
    view = pa.LargeListViewArray.from_arrays(pa.array(starts, pa.int64()), pa.array(lengths, pa.int64()), values)
    return view.flatten().to_numpy(zero_copy_only=False)


def take_interleaved(sources: list[np.ndarray], starts: list[np.ndarray], lengths: list[np.ndarray]) -> np.ndarray:
    """Rows of ranges from several uint8 sources, concatenated row by row.

    ``starts[i][r]``/``lengths[i][r]`` is the ``i``-th range of row ``r``;
    starts are offsets into the concatenation of ``sources``. The result is
    ``take_ranges`` of that concatenation with the ranges in row order. When
    every column's ranges are alike in all rows but the last (see
    :func:`_uniform_columns`), rows are filled with one strided copy per
    column and the sources are never concatenated.
    """
    rows = len(starts[0]) if starts else 0
    if rows >= 2:
        plan = _uniform_columns(sources, starts, lengths)
        if plan is not None:
            return _fill_uniform(sources, plan, rows)
    source = np.concatenate(sources) if sources else _EMPTY_U8
    return take_ranges(source, np.stack(starts, axis=1).reshape(-1), np.stack(lengths, axis=1).reshape(-1))


#: One column of a uniform gather, offsets into the concatenated sources:
#: (first start, step, length; last row: start, length).
_Column = tuple[int, int, int, int, int]


def _uniform_columns(
    sources: list[np.ndarray], starts: list[np.ndarray], lengths: list[np.ndarray]
) -> list[_Column] | None:
    """Per column, where its ranges come from, if all rows but the last take the same length,
    each row the next range (step = length; it may run on across sources, e.g. the pieces of
    a page's values) or the same one (step 0, within one source)."""
    bases = exclusive_cumsum(np.array([len(source) for source in sources], dtype=np.int64))
    total = int(bases[-1])
    all_starts, all_lengths = np.stack(starts), np.stack(lengths)  # (columns, rows), checked at once
    body = all_starts.shape[1] - 1
    length = all_lengths[:, 0]
    step = all_starts[:, 1] - all_starts[:, 0] if body > 1 else length
    if (body > 1 and not bool(np.all(all_lengths[:, 1:-1] == length[:, None]))) or \
            not bool(np.all((step == 0) | (step == length))) or \
            (body > 2 and not bool(np.all(np.diff(all_starts[:, :-1], axis=1) == step[:, None]))):
        return None
    plan = []
    for first, step_, length_, last_start, last_length in zip(
            all_starts[:, 0].tolist(), step.tolist(), length.tolist(), all_starts[:, -1].tolist(),
            all_lengths[:, -1].tolist()):
        span = step_ * (body - 1) + length_
        if length_ and (first < 0 or first + span > total or (step_ == 0 and _source_of(bases, first, span) is None)):
            return None
        if last_length and (last_start < 0 or last_start + last_length > total):
            return None
        plan.append((first, step_, length_, last_start, last_length))
    return plan


def _source_of(bases: np.ndarray, start: int, span: int) -> int | None:
    """Index of the source holding ``[start, start + span)``, else None."""
    index = int(np.searchsorted(bases, start, side="right")) - 1
    if index < 0 or index >= len(bases) - 1 or start + span > int(bases[index + 1]):
        return None
    return index


def _fill_uniform(sources: list[np.ndarray], plan: list[_Column], rows: int) -> np.ndarray:
    """The rows of a uniform gather: strided copies for all rows but the last, then the last."""
    bases = exclusive_cumsum(np.array([len(source) for source in sources], dtype=np.int64))
    body = rows - 1
    row_bytes = sum(column[2] for column in plan)
    out = aligned_empty(row_bytes * body + sum(column[4] for column in plan))
    matrix = out[: row_bytes * body].reshape(body, row_bytes)
    at = 0
    for start, step, length, _, _ in plan:
        if length:
            if step:
                _copy_rows(sources, bases, start, matrix[:, at: at + length])
            else:
                source = _source_of(bases, start, length)
                local = start - int(bases[source])
                matrix[:, at: at + length] = sources[source][local: local + length]
        at += length
    at = row_bytes * body
    for _, _, _, start, length in plan:
        _copy_run(sources, bases, start, out[at: at + length])
        at += length
    return out


def _spans(bases: np.ndarray, start: int, length: int):
    """``(source, offset in it, offset in the run, bytes)`` of the run ``[start, start + length)``
    of the concatenated sources, one per source it touches."""
    index = int(np.searchsorted(bases, start, side="right")) - 1
    done = 0
    while done < length:
        local = start + done - int(bases[index])
        size = min(length - done, int(bases[index + 1]) - start - done)
        if size > 0:
            yield index, local, done, size
        done += max(size, 0)
        index += 1


def _copy_run(sources: list[np.ndarray], bases: np.ndarray, start: int, out: np.ndarray) -> None:
    """``out[:] =`` the run of the concatenated sources starting at ``start`` (one copy per source)."""
    for index, local, done, size in _spans(bases, start, len(out)):
        out[done: done + size] = sources[index][local: local + size]


def _copy_rows(sources: list[np.ndarray], bases: np.ndarray, start: int, matrix: np.ndarray) -> None:
    """Fill the ``(rows, length)`` view ``matrix`` row by row from the run of the concatenated sources
    starting at ``start``: per source a partial first row, whole rows (one strided copy), a partial last row."""
    rows, length = matrix.shape
    for index, local, done, size in _spans(bases, start, rows * length):
        data = sources[index][local: local + size]
        row, column = divmod(done, length)
        if column:  # the end of a row begun by the previous source
            head = min(length - column, size)
            matrix[row, column: column + head] = data[:head]
            data, row = data[head:], row + 1
        whole = len(data) // length
        if whole:
            matrix[row: row + whole] = data[: whole * length].reshape(whole, length)
        rest = len(data) - whole * length
        if rest:
            matrix[row + whole, :rest] = data[whole * length:]


def check_ranges(ctx: Ctx, starts: np.ndarray, lengths: np.ndarray, size: int, what: str) -> None:
    """Every range lies within ``[0, size)``."""
    if len(starts) and (
        int(np.min(lengths)) < 0 or int(np.min(starts)) < 0 or int(np.max(starts + lengths)) > size
    ):
        raise ctx.corrupt(f"{what} extend beyond their buffer ({size} bytes)")


def fixed_dtype(bits: int) -> np.dtype:
    """Unsigned little-endian numpy type of a 8/16/32/64-bit width."""
    return np.dtype(f"<u{bits // 8}")


# ----------------------------------------------------------------------------- general compression

_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
_ZSTD_MAGIC = 0xFD2FB528
#: Refuse to inflate a single buffer beyond this (a corrupt size prefix could ask for petabytes).
MAX_DECOMPRESSED = 1 << 34
#: The formats' maximum expansion of a buffer (decompressed bytes per compressed byte).
_MAX_RATIO = {"zstd": 40_000, "lz4_raw": 255}


def _zstd_frame_size(data: bytes | memoryview) -> int | None:
    """Decompressed size recorded in a zstd frame header, if any."""
    if len(data) < 6:
        return None
    descriptor = data[4]
    fcs_flag = descriptor >> 6
    single_segment = (descriptor >> 5) & 1
    dict_id_flag = descriptor & 3
    position = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[dict_id_flag]
    width = (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
    if width == 0 or len(data) < position + width:
        return None
    size = int.from_bytes(bytes(data[position: position + width]), "little")
    return size + 256 if width == 2 else size


_CODECS: dict[str, pa.Codec] = {}


def _codec(name: str) -> pa.Codec:
    codec = _CODECS.get(name)
    if codec is None:
        codec = _CODECS[name] = pa.Codec(name)
    return codec


def decompress(ctx: Ctx, scheme: int, data: bytes | memoryview | pa.Buffer) -> pa.Buffer:
    """Undo Lance's general compression of one buffer (pyarrow codecs).

    zstd: ``u64`` decompressed size then a zstd frame (or a bare frame whose
    header records its size); lz4: ``u32`` size then one raw lz4 block.
    """
    raw = memoryview(data) if not isinstance(data, memoryview) else data
    if len(raw) == 0:
        return pa.py_buffer(b"")
    try:
        if scheme == pb.COMPRESSION_ALGORITHM_ZSTD:
            if len(raw) >= 8 and _U32.unpack_from(raw, 0)[0] == _ZSTD_MAGIC and not (raw[4] & 0x10):
                size, body = _zstd_frame_size(raw), raw
                if size is None:
                    raise ctx.unsupported("zstd frame without a recorded size")
            else:
                ctx.check(len(raw) >= 8, "zstd buffer shorter than its size prefix")
                size, body = _U64.unpack_from(raw, 0)[0], raw[8:]
            codec = "zstd"
        elif scheme == pb.COMPRESSION_ALGORITHM_LZ4:
            ctx.check(len(raw) >= 4, "lz4 buffer shorter than its size prefix")
            size, body, codec = _U32.unpack_from(raw, 0)[0], raw[4:], "lz4_raw"
        else:
            raise ctx.unsupported(f"general compression scheme {scheme}")
        ctx.check(size <= MAX_DECOMPRESSED and size <= _MAX_RATIO[codec] * len(body) + 1024,
                  f"implausible decompressed size {size}")
        if size == 0:
            return pa.py_buffer(b"")
        out = _codec(codec).decompress(body, decompressed_size=size)
    except (OSError, MemoryError, ValueError, pa.ArrowException) as exc:
        raise ctx.corrupt(f"cannot decompress buffer: {exc}") from exc
    ctx.check(out.size == size, "decompressed buffer has the wrong size")
    return out


_DECOMPRESSORS = threading.local()


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    """This thread's zstd decompressor (one context reused for every frame; not thread-safe)."""
    dctx = getattr(_DECOMPRESSORS, "dctx", None)
    if dctx is None:
        dctx = _DECOMPRESSORS.dctx = zstandard.ZstdDecompressor()
    return dctx


def decompress_chunks(ctx: Ctx, scheme: int, src: np.ndarray, starts: np.ndarray,
                      sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`decompress` of the buffers ``src[s:s+n]`` for every (s, n): their data back to back, and
    each one's decompressed size.

    zstd buffers with their ``u64`` size prefix (what pylance and we write)
    are decompressed straight into one output array by a reused context,
    without the GIL: about 2x pyarrow's codec called per buffer, which
    allocates a context and an output buffer every time, and no concatenation
    afterwards. Other buffers go through :func:`decompress` one by one.
    """
    starts = np.asarray(starts, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    if scheme == pb.COMPRESSION_ALGORITHM_ZSTD and len(sizes) and int(sizes.min()) >= 8 \
            and int(starts.min()) >= 0 and int((starts + sizes).max()) <= len(src):
        head = src[starts[:, None] + np.arange(8)].view("<u8").reshape(-1)  # u64 prefix, or a frame's start
        magic = (head & np.uint64(0xFFFFFFFF)) == _ZSTD_MAGIC
        bare = magic & ((src[starts + 4] & 0x10) == 0)  # as decompress() tells a bare frame
        if not bare.any():
            return _zstd_into(ctx, src, starts, sizes, head.astype(np.int64))
    pieces = [as_u8(decompress(ctx, scheme, memoryview(src[s: s + n])))
              for s, n in zip(starts.tolist(), sizes.tolist(), strict=True)]
    out_sizes = np.array([len(p) for p in pieces], dtype=np.int64)
    return (np.concatenate(pieces) if pieces else np.zeros(0, np.uint8)), out_sizes


def _zstd_into(ctx: Ctx, src: np.ndarray, starts: np.ndarray, sizes: np.ndarray,
               declared: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    bodies = sizes - 8
    ctx.check(bool(np.all((declared >= 0) & (declared <= MAX_DECOMPRESSED)
                          & (declared <= _MAX_RATIO["zstd"] * bodies + 1024))), "implausible decompressed size")
    out = np.empty(int(declared.sum()), dtype=np.uint8)
    target, source = memoryview(out), memoryview(src)
    dctx = _zstd_decompressor()
    at = 0
    try:
        for start, body, size in zip((starts + 8).tolist(), bodies.tolist(), declared.tolist()):
            if size == 0:
                continue
            reader = dctx.stream_reader(source[start: start + body])
            filled = 0
            while filled < size:
                got = reader.readinto(target[at + filled: at + size])
                if not got:
                    break
                filled += got
            ctx.check(filled == size and not reader.read(1), "decompressed buffer has the wrong size")
            at += size
    except zstandard.ZstdError as exc:
        raise ctx.corrupt(f"cannot decompress buffer: {exc}") from exc
    return out, declared


def compress_zstd(data: bytes | pa.Buffer, level: int = 3) -> bytes:
    """Lance's zstd buffer format (u64 size prefix + frame)."""
    body = pa.Codec("zstd", compression_level=level).compress(data, asbytes=True)
    return _U64.pack(len(data)) + body


def compress_lz4(data: bytes | pa.Buffer) -> bytes:
    """Lance's lz4 buffer format (u32 size prefix + raw block)."""
    return _U32.pack(len(data)) + pa.Codec("lz4_raw").compress(data, asbytes=True)

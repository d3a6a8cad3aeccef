"""Decoding of 2.1+ compressive encodings, vectorised across mini-block chunks.

``decode(ctx, encoding, src, buffers, counts, block=...)`` decodes the values
of many chunks at once. ``src`` is one uint8 array (usually the page's chunk
data); ``buffers[b] = (starts, sizes)`` locates buffer ``b`` of every chunk in
``src``; ``counts`` are the values per chunk. The result is one block holding
the values of all chunks in order. Two contexts share the code:

* mini-block values (``block=False``): a chunk has ``num_buffers`` buffers
  (RLE: run values + run lengths; nullable fixed-size lists: validity + items);
* blocks (``block=True``): every chunk has a single self-describing buffer
  (rep/def levels of a chunk, a page's dictionary): variable-width data starts
  with ``[bits per offset][offset of the bytes]``, RLE with ``u64`` run-value bytes.

Layouts of the value encodings pylance writes (byte details in the module
docstrings of ``bitpack``/``fsst``):

================  ===========================================================
flat              values back to back (1-bit values LSB-first per chunk)
variable          mini-block: ``n + 1`` offsets (relative to the chunk buffer),
                  then bytes; block: header, offsets, bytes
inline_bitpacking per 1024 values: width word + FastLanes words
out_of_line       FastLanes blocks of the encoding's width, raw or packed tail
rle               run values + u8 run lengths (runs of at most 255)
byte_stream_split byte ``j`` of value ``k`` at ``j * n + k`` within a chunk
general           zstd/lz4 of the chunk's first buffer (pyarrow codecs)
fsst              FSST codes in a ``variable`` block, symbol table in the message
fixed_size_list   [item validity bits], then ``n * dim`` items
packed_struct     one flat row of all children, split by ``bits_per_value``
constant          the value in the message, no buffers
================  ===========================================================

Only general compression loops over chunks in Python (every chunk is an
independent zstd/lz4 frame); inline bit-packing loops over the 1024-value
blocks *of a chunk* (one round per block position, each round vectorised over
all chunks; mini-block chunks have one block, so one round).
"""

from __future__ import annotations

import numpy as np

from airflow_lance.core._proto import encodings_v2_1_pb2 as pb
from airflow_lance.core.arrays import sorted_unique
from airflow_lance.core.file.v21 import bitpack, fsst, kernels
from airflow_lance.core.file.v21.blocks import Block, Fixed, Fsl, Struct, Variable, take
from airflow_lance.core.file.v21.util import (
    Ctx,
    as_u8,
    check_ranges,
    decompress_chunks,
    exclusive_cumsum,
    fixed_dtype,
    take_ranges,
)

Ranges = tuple[np.ndarray, np.ndarray]
_MAX_BITS = 1 << 16
#: Selections of fewer than 1 in this many values of the decoded chunks read values one by one.
_DENSE = 4


def kind(encoding: pb.CompressiveEncoding) -> str | None:
    """Name of the set variant of a ``CompressiveEncoding``."""
    return encoding.WhichOneof("compression")


def num_buffers(ctx: Ctx, encoding: pb.CompressiveEncoding) -> int:
    """Buffers per mini-block chunk used by a value encoding."""
    which = kind(encoding)
    if which in ("flat", "inline_bitpacking", "variable", "byte_stream_split", "packed_struct",
                 "out_of_line_bitpacking"):
        return 1
    if which == "rle":
        return 2
    if which == "constant":
        return 0
    if which == "fsst":
        return num_buffers(ctx, encoding.fsst.values)
    if which == "general":
        return num_buffers(ctx, encoding.general.values)
    if which == "fixed_size_list":
        return int(encoding.fixed_size_list.has_validity) + num_buffers(ctx, encoding.fixed_size_list.values)
    raise ctx.unsupported(f"value encoding {which!r}")


def decode(
    ctx: Ctx,
    encoding: pb.CompressiveEncoding,
    src: np.ndarray,
    buffers: list[Ranges],
    counts: np.ndarray,
    *,
    block: bool,
    select: np.ndarray | None = None,
) -> Block:
    """Decode the values of every chunk (see module docstring).

    ``select`` (sorted value positions, or None for all): only those values
    are returned. FSST picks the selected codes before decompressing (each
    value is an independent code string); other encodings decode the chunks
    and then take the values.
    """
    counts = np.asarray(counts, dtype=np.int64)
    for starts, sizes in buffers:
        check_ranges(ctx, starts, sizes, len(src), "chunk buffers")
    which = kind(encoding)
    decoder = _DECODERS.get(which)
    if decoder is None:
        raise ctx.unsupported(f"compressive encoding {which!r}")
    if select is not None and which in ("fsst", "general", "inline_bitpacking") or (
            select is not None and which == "variable" and not block):
        # single values out of bit-packed blocks cost more than unpacking the blocks when many are wanted
        if which != "inline_bitpacking" or len(select) * _DENSE < int(counts.sum()):
            return decoder(ctx, getattr(encoding, which), src, buffers, counts, block, select)
    out = decoder(ctx, getattr(encoding, which), src, buffers, counts, block)
    if select is None or (len(select) == out.n and (out.n == 0 or int(select[-1]) == out.n - 1)):
        return out
    if isinstance(out, Fixed) and out.bits % 8 == 0 and len(select) and \
            int(select[-1]) - int(select[0]) + 1 == len(select) and int(select[-1]) < out.n:
        width = out.bits // 8  # a contiguous run: a slice
        return Fixed(out.data[int(select[0]) * width: (int(select[-1]) + 1) * width], out.bits, len(select))
    return take(out, select, ctx)


def decode_levels(ctx: Ctx, encoding: pb.CompressiveEncoding, src: np.ndarray, ranges: Ranges,
                  counts: np.ndarray) -> np.ndarray:
    """Repetition or definition levels (u16) of every chunk, concatenated."""
    out = decode(ctx, encoding, src, [ranges], counts, block=True)
    if not isinstance(out, Fixed) or out.bits != 16:
        raise ctx.corrupt("levels are not 16-bit values")
    return out.data[: 2 * out.n].view("<u2")


def _one(ctx: Ctx, buffers: list[Ranges], what: str) -> Ranges:
    if len(buffers) != 1:
        raise ctx.corrupt(f"{what} expects one buffer per chunk, got {len(buffers)}")
    return buffers[0]


def _typed(src: np.ndarray, starts: np.ndarray, counts: np.ndarray, bits: int) -> np.ndarray:
    """Gather ``counts`` values of ``bits`` at byte ``starts`` as a typed array."""
    return take_ranges(src, starts, counts * (bits // 8)).view(fixed_dtype(bits))


def _concat_bits(src: np.ndarray, starts: np.ndarray, nbits: np.ndarray) -> np.ndarray:
    """Concatenate the first ``nbits`` bits (LSB first) at each byte start; packed result."""
    nbytes = (nbits + 7) // 8
    raw = take_ranges(src, starts, nbytes)
    if len(starts) == 1 or bool(np.all(nbits[:-1] % 8 == 0)):
        return raw
    bits = np.unpackbits(raw, bitorder="little")
    return np.packbits(take_ranges(bits, exclusive_cumsum(nbytes)[:-1] * 8, nbits), bitorder="little")


# ----------------------------------------------------------------------------- leaf encodings


def _flat(ctx, flat: pb.Flat, src, buffers, counts, block) -> Block:
    starts, sizes = _one(ctx, buffers, "flat")
    if flat.HasField("data"):
        src, starts, sizes = _decompress_each(ctx, flat.data.scheme, src, starts, sizes)
    bits = flat.bits_per_value
    ctx.check(0 < bits <= _MAX_BITS, f"flat width of {bits} bits")
    total = int(counts.sum())
    need = (counts * bits + 7) // 8
    ctx.check(bool(np.all(sizes >= need)), "flat buffer shorter than its values")
    if bits % 8 == 0:
        return Fixed(take_ranges(src, starts, need), bits, total)
    return Fixed(_concat_bits(src, starts, counts * bits), bits, total)


def _constant(ctx, constant: pb.Constant, src, buffers, counts, block) -> Block:
    value = np.frombuffer(constant.value, dtype=np.uint8) if constant.HasField("value") else np.zeros(0, np.uint8)
    total = int(counts.sum())
    ctx.check(total * max(len(value), 1) <= 1 << 32, f"{total} constant values")
    return Fixed(np.tile(value, total), 8 * len(value), total)


def _variable_bits(ctx, variable: pb.Variable) -> int:
    if kind(variable.offsets) != "flat" or variable.offsets.flat.bits_per_value not in (32, 64):
        raise ctx.unsupported("variable offsets that are not flat 32/64-bit")
    if variable.HasField("values"):
        raise ctx.unsupported("compressed variable-width values")
    return variable.offsets.flat.bits_per_value


def _variable(ctx, variable: pb.Variable, src, buffers, counts, block, select=None) -> Block:
    starts, sizes = _one(ctx, buffers, "variable")
    bits = _variable_bits(ctx, variable)
    if block:
        return _variable_block(ctx, src, starts, sizes, counts, bits)
    offsets, ends, first, last = _variable_chunks(ctx, src, starts, sizes, counts, bits)
    lengths = last - first
    if select is not None:  # only the selected values' bytes are copied
        value_start, value_end = _value_ranges(offsets, ends, starts, counts)
        begin, size = value_start[select], (value_end - value_start)[select]
        return Variable(exclusive_cumsum(size), take_ranges(src, begin, size), len(select))
    data = take_ranges(src, starts + first, lengths)
    keep = np.ones(len(offsets), dtype=bool)
    keep[ends[1:] - 1] = False
    shift = np.repeat(first - exclusive_cumsum(lengths)[:-1], counts)
    out = np.empty(int(counts.sum()) + 1, dtype=np.int64)
    out[:-1] = offsets[keep] - shift
    out[-1] = int(lengths.sum())
    return Variable(out, data, int(counts.sum()))


def _value_ranges(offsets: np.ndarray, ends: np.ndarray, starts: np.ndarray, counts: np.ndarray):
    """Where every value's bytes are in the page: (begin, end) byte positions."""
    keep = np.ones(len(offsets), dtype=bool)
    keep[ends[1:] - 1] = False
    value_start = offsets[keep] + np.repeat(starts, counts)
    value_end = offsets[1:][keep[:-1]] + np.repeat(starts, counts)
    return value_start, value_end


def variable_value_ranges(ctx, variable: pb.Variable, src, buffers, counts) -> tuple[np.ndarray, np.ndarray]:
    """The (begin, end) byte positions in ``src`` of every value of mini-block variable-width chunks,
    checked, without copying the bytes (for decoders that read them in place)."""
    starts, sizes = _one(ctx, buffers, "variable")
    offsets, ends, _, _ = _variable_chunks(ctx, src, starts, sizes, counts, _variable_bits(ctx, variable))
    return _value_ranges(offsets, ends, starts, counts)


def _variable_chunks(ctx, src, starts, sizes, counts, bits):
    """Every chunk's value offsets (``counts + 1`` per chunk, back to back), where each chunk's run of
    offsets ends, and each chunk's first and last offset; checked."""
    width = bits // 8
    ctx.check(bool(np.all(starts % width == 0)), "unaligned variable-width chunk")
    ctx.check(bool(np.all(sizes >= (counts + 1) * width)), "variable-width chunk shorter than its offsets")
    words = src[: len(src) // width * width].view(fixed_dtype(bits))
    offsets = take_ranges(words, starts // width, counts + 1).astype(np.int64)
    ends = exclusive_cumsum(counts + 1)
    first, last = offsets[ends[:-1]], offsets[ends[1:] - 1]
    ctx.check(bool(np.all(first >= (counts + 1) * width)) and bool(np.all(last <= sizes))
              and bool(np.all(first <= last)), "variable-width offsets outside their chunk")
    steps = np.diff(offsets)
    boundary = ends[1:-1] - 1
    steps[boundary] = 0
    ctx.check(bool(np.all(steps >= 0)), "variable-width offsets are not monotonic")
    return offsets, ends, first, last


def _variable_block(ctx, src, starts, sizes, counts, bits) -> Block:
    """Variable blocks: ``[u32 bits][u32|u64 bytes start][offsets][bytes]`` each."""
    pieces_offsets, pieces_data, base = [], [], 0
    for start, size, n in zip(starts.tolist(), sizes.tolist(), counts.tolist()):  # a dictionary: one block
        buf = src[start: start + size]
        ctx.check(size >= 8, "variable-width block header truncated")
        stored_bits = int(buf[:4].view("<u4")[0])
        ctx.check(stored_bits in (32, 64), f"variable-width block with {stored_bits}-bit offsets")
        width = stored_bits // 8
        head = 8 if stored_bits == 32 else 16
        ctx.check(size >= head, "variable-width block header truncated")
        data_start = int(buf[4:8].view("<u4")[0]) if stored_bits == 32 else int(buf[8:16].view("<u8")[0])
        ctx.check(head + (n + 1) * width <= data_start <= size, "variable-width block offsets out of range")
        offsets = buf[head: head + (n + 1) * width].copy().view(fixed_dtype(stored_bits)).astype(np.int64)
        data = buf[data_start:]
        ctx.check(n == 0 or (offsets[0] >= 0 and offsets[-1] <= len(data) and bool(np.all(np.diff(offsets) >= 0))),
                  "variable-width block offsets are not monotonic or exceed the data")
        pieces_offsets.append(offsets[:-1] - offsets[0] + base)
        pieces_data.append(data[offsets[0]: offsets[-1]])
        base += int(offsets[-1] - offsets[0])
    out = np.concatenate([*pieces_offsets, np.array([base], dtype=np.int64)])
    data = np.concatenate(pieces_data) if pieces_data else np.zeros(0, np.uint8)
    return Variable(out, data, int(counts.sum()))


def _inline_bitpacking(ctx, inline: pb.InlineBitpacking, src, buffers, counts, block, select=None) -> Block:
    starts, sizes = _one(ctx, buffers, "inline bit-packing")
    if inline.HasField("values"):
        src, starts, sizes = _decompress_each(ctx, inline.values.scheme, src, starts, sizes)
    bits = inline.uncompressed_bits_per_value
    ctx.check(bits in (8, 16, 32, 64), f"inline bit-packing of {bits}-bit values")
    word = bits // 8
    total = int(counts.sum())
    ctx.check(total <= bitpack.BLOCK * int(sizes.sum() // word + len(sizes)), "inline bit-packing: too many values")
    cursor, end, remaining = starts.astype(np.int64), starts + sizes, counts.copy()
    out_base = exclusive_cumsum(counts)[:-1]
    positions, widths, out_starts, takes = [], [], [], []
    step = 0
    active = np.flatnonzero(remaining > 0)
    while len(active):  # one round per block position inside a chunk (mini-block chunks: one round)
        at = cursor[active]
        ctx.check(bool(np.all(at + word <= end[active])), "inline bit-packing block header truncated")
        width = take_ranges(src, at, np.full(len(at), word)).view(fixed_dtype(bits)).astype(np.int64)
        ctx.check(bool(np.all(width <= bits)), "inline bit-packing width exceeds the value width")
        nbytes = width * (bitpack.BLOCK // 8)
        ctx.check(bool(np.all(at + word + nbytes <= end[active])), "inline bit-packing block truncated")
        positions.append(at + word)
        widths.append(width)
        out_starts.append(out_base[active] + step * bitpack.BLOCK)
        takes.append(np.minimum(remaining[active], bitpack.BLOCK))
        cursor[active] = at + word + nbytes
        remaining[active] -= bitpack.BLOCK
        step += 1
        active = active[remaining[active] > 0]
    if not positions:
        return Fixed(np.zeros(0, np.uint8), bits, 0)
    position, width, out_start, take = (np.concatenate(x) for x in (positions, widths, out_starts, takes))
    if select is not None:  # only the selected values, straight out of their blocks
        order = np.argsort(out_start, kind="stable")
        position, width, out_start, take = position[order], width[order], out_start[order], take[order]
        owner = np.searchsorted(out_start, select, side="right") - 1
        element = select - out_start[owner]
        ctx.check(len(select) == 0 or (int(owner.min()) >= 0 and bool(np.all(element < take[owner]))),
                  "selected values outside the bit-packed blocks")
        ctx.check(bool(np.all(position % word == 0)), "unaligned bit-packed block")
        words = src[: len(src) // word * word].view(fixed_dtype(bits))
        values = bitpack.unpack_at(words, position[owner] // word, element, width[owner], bits)
        return Fixed(values.view(np.uint8), bits, len(select))
    values = None
    ctx.check(bool(np.all(position + width * (bitpack.BLOCK // 8) <= len(src))), "inline bit-packing block truncated")
    if bool(np.all(position % word == 0)):  # compiled loops: every block straight out of the page
        values = bitpack.unpack_blocks(src[: len(src) // word * word].view(fixed_dtype(bits)), position // word,
                                       width, bits)
    if values is None:
        values = _unpack_by_width(src, position, width, bits)
    if bool(np.all(out_start[1:] > out_start[:-1])) and bool(np.all(take[:-1] == bitpack.BLOCK)):
        # blocks in order, all full but the last: the values are the unpacked blocks' prefix
        return Fixed(values.reshape(-1)[:total].view(np.uint8), bits, total)
    order = np.argsort(out_start, kind="stable")
    data = take_ranges(values.reshape(-1), order * bitpack.BLOCK, take[order])
    return Fixed(data.view(np.uint8), bits, total)


def _unpack_by_width(src: np.ndarray, position: np.ndarray, width: np.ndarray, bits: int) -> np.ndarray:
    """Inline bit-packed blocks (byte ``position``, ``width``) -> ``(k, 1024)`` values, one numpy unpack
    per width."""
    widths_used = sorted_unique(width).tolist()
    if len(widths_used) == 1:  # one width (common): the unpacked blocks need no scatter
        w = widths_used[0]
        packed = take_ranges(src, position, np.full(len(position), w * (bitpack.BLOCK // 8)))
        return bitpack.unpack(packed.view(fixed_dtype(bits)).reshape(len(position), w * bitpack.BLOCK // bits), w, bits)
    values = np.empty((len(position), bitpack.BLOCK), dtype=fixed_dtype(bits))
    for w in widths_used:
        sel = np.flatnonzero(width == w)
        packed = take_ranges(src, position[sel], np.full(len(sel), w * (bitpack.BLOCK // 8)))
        words = packed.view(fixed_dtype(bits)).reshape(len(sel), w * bitpack.BLOCK // bits)
        values[sel] = bitpack.unpack(words, w, bits)
    return values


def _out_of_line(ctx, ool: pb.OutOfLineBitpacking, src, buffers, counts, block) -> Block:
    starts, sizes = _one(ctx, buffers, "out-of-line bit-packing")
    bits = ool.uncompressed_bits_per_value
    ctx.check(bits in (8, 16, 32, 64), f"bit-packing of {bits}-bit values")
    if kind(ool.values) != "flat":
        raise ctx.unsupported("out-of-line bit-packing without flat values")
    width = ool.values.flat.bits_per_value
    ctx.check(width <= bits, "bit-packing width exceeds the value width")
    block_bytes = width * (bitpack.BLOCK // 8)
    full, tail = counts // bitpack.BLOCK, counts % bitpack.BLOCK
    raw_size = full * block_bytes + tail * (bits // 8)
    raw_tail = (tail > 0) & (sizes == raw_size)
    packed_blocks = full + ((tail > 0) & ~raw_tail)
    ctx.check(bool(np.all(np.where(raw_tail, sizes >= raw_size, sizes >= packed_blocks * block_bytes))),
              "bit-packed buffer shorter than its values")
    nblocks = int(packed_blocks.sum())
    ctx.check(nblocks * block_bytes <= len(src) or width == 0, "bit-packed buffer shorter than its values")
    block_index = exclusive_cumsum(packed_blocks)
    within = np.arange(nblocks, dtype=np.int64) - np.repeat(block_index[:-1], packed_blocks)
    block_starts = np.repeat(starts, packed_blocks) + within * block_bytes
    packed = take_ranges(src, block_starts, np.full(nblocks, block_bytes))
    words_per_block = width * bitpack.BLOCK // bits
    unpacked = bitpack.unpack(packed.view(fixed_dtype(bits)).reshape(nblocks, words_per_block), width, bits).reshape(-1)
    tails = _typed(src, starts + full * block_bytes, np.where(raw_tail, tail, 0), bits)
    from_blocks = counts - np.where(raw_tail, tail, 0)
    source = np.concatenate([unpacked, tails])
    piece_starts = np.stack([block_index[:-1] * bitpack.BLOCK,
                             len(unpacked) + exclusive_cumsum(np.where(raw_tail, tail, 0))[:-1]], axis=1).reshape(-1)
    piece_lengths = np.stack([from_blocks, np.where(raw_tail, tail, 0)], axis=1).reshape(-1)
    data = take_ranges(source, piece_starts, piece_lengths)
    return Fixed(data.view(np.uint8), bits, int(counts.sum()))


def _rle(ctx, rle: pb.Rle, src, buffers, counts, block) -> Block:
    if kind(rle.values) != "flat" or kind(rle.run_lengths) != "flat" or rle.run_lengths.flat.bits_per_value != 8:
        raise ctx.unsupported("RLE other than flat values with 8-bit run lengths")
    bits = rle.values.flat.bits_per_value
    ctx.check(bits in (8, 16, 32, 64), f"RLE of {bits}-bit values")
    width = bits // 8
    if block:
        starts, sizes = _one(ctx, buffers, "RLE")
        ctx.check(bool(np.all(sizes >= 8)), "RLE block header truncated")
        value_bytes = take_ranges(src, starts, np.full(len(starts), 8)).view("<u8").astype(np.int64)
        ctx.check(bool(np.all(value_bytes % width == 0)) and bool(np.all(value_bytes <= sizes - 8)),
                  "RLE block header inconsistent")
        runs = value_bytes // width
        ctx.check(bool(np.all(sizes - 8 - value_bytes == runs)), "RLE run lengths do not match the run values")
        value_starts, length_starts = starts + 8, starts + 8 + value_bytes
    else:
        ctx.check(len(buffers) == 2, "RLE expects two buffers per chunk")
        (value_starts, value_sizes), (length_starts, runs) = buffers
        ctx.check(bool(np.all(value_sizes >= runs * width)), "RLE run values shorter than the run lengths")
    values = _typed(src, value_starts, runs, bits)
    lengths = take_ranges(src, length_starts, runs)
    per_chunk = np.diff(exclusive_cumsum(lengths.astype(np.int64))[exclusive_cumsum(runs)])
    if block or np.array_equal(per_chunk, counts):
        ctx.check(bool(np.array_equal(per_chunk, counts)), "RLE runs do not add up to the chunk's values")
        return Fixed(np.repeat(values, lengths).view(np.uint8), bits, int(counts.sum()))
    # Older pylance releases (4.0.2 and 7.1.0 among those in the corpus) cut a mini-block chunk at a
    # power of two after its last run had crossed it: the run lengths then add up to more than the
    # chunk's values, and the excess is encoded again at the start of the next chunk. pylance drops
    # it; so do we.
    ctx.check(bool(np.all(per_chunk >= counts)), "RLE runs do not add up to the chunk's values")
    kept = take_ranges(np.repeat(values, lengths), exclusive_cumsum(per_chunk)[:-1], counts)
    return Fixed(kept.view(np.uint8), bits, int(counts.sum()))


def _byte_stream_split(ctx, bss: pb.ByteStreamSplit, src, buffers, counts, block) -> Block:
    starts, sizes = _one(ctx, buffers, "byte stream split")
    if kind(bss.values) != "flat" or bss.values.flat.bits_per_value % 8:
        raise ctx.unsupported("byte stream split without byte-aligned flat values")
    width = bss.values.flat.bits_per_value // 8
    ctx.check(width > 0 and bool(np.all(sizes >= counts * width)), "byte stream split buffer too short")
    raw = take_ranges(src, starts, counts * width)
    total = int(counts.sum())
    out = np.empty(total * width, dtype=np.uint8)
    base = exclusive_cumsum(counts * width)[:-1]
    # chunks of equal size are transposed together: (chunks, width, n) -> (chunks, n, width)
    for count in sorted_unique(counts).tolist():  # usually two sizes: full chunks and the last one
        sel = np.flatnonzero(counts == count)
        size = count * width
        streams = take_ranges(raw, base[sel], np.full(len(sel), size)).reshape(len(sel), width, count)
        values = streams.transpose(0, 2, 1).reshape(-1)
        if len(sel) == sel[-1] - sel[0] + 1:  # a contiguous run of chunks
            out[base[sel[0]]: base[sel[0]] + len(values)] = values
        else:
            out[(base[sel][:, None] + np.arange(size)).reshape(-1)] = values
    return Fixed(out, width * 8, total)


def _general(ctx, general: pb.General, src, buffers, counts, block, select=None) -> Block:
    ctx.check(len(buffers) >= 1, "general compression without buffers")
    starts, sizes = buffers[0]
    src, new_starts, new_sizes = _decompress_each(ctx, general.compression.scheme, src, starts, sizes,
                                                  keep_source=len(buffers) > 1)
    if not general.HasField("values"):
        raise ctx.corrupt("general compression without an inner encoding")
    return decode(ctx, general.values, src, [(new_starts, new_sizes), *buffers[1:]], counts, block=block,
                  select=select)


def _fsst(ctx, fsst_: pb.Fsst, src, buffers, counts, block, select=None) -> Block:
    if not block and select is None and kind(fsst_.values) == "variable" \
            and kernels.compiled(kernels.MIN_VALUES) is not None:  # compiled: the codes decoded in place
        begins, ends = variable_value_ranges(ctx, fsst_.values.variable, src, buffers, counts)
        data, offsets = fsst.decode_ranges(ctx, fsst_.symbol_table, src, begins, ends)
        return Variable(offsets, data, len(begins))
    inner = decode(ctx, fsst_.values, src, buffers, counts, block=block, select=select)
    if not isinstance(inner, Variable):
        raise ctx.corrupt("FSST data is not variable-width")
    data, offsets = fsst.decode(ctx, fsst_.symbol_table, inner.data, inner.offsets)
    return Variable(offsets, data, inner.n)


def _fixed_size_list(ctx, fsl: pb.FixedSizeList, src, buffers, counts, block) -> Block:
    dim = fsl.items_per_value
    ctx.check(0 < dim <= _MAX_BITS, f"fixed-size list of {dim} items")
    validity = None
    if fsl.has_validity:
        ctx.check(len(buffers) >= 2, "fixed-size list validity buffer missing")
        starts, sizes = buffers[0]
        ctx.check(bool(np.all(sizes * 8 >= counts * dim)), "fixed-size list validity too short")
        packed = _concat_bits(src, starts, counts * dim)
        validity = np.unpackbits(packed, bitorder="little", count=int(counts.sum()) * dim).astype(bool)
        buffers = buffers[1:]
    inner = decode(ctx, fsl.values, src, buffers, counts * dim, block=block)
    return Fsl(dim, validity, inner, int(counts.sum()))


def _packed_struct(ctx, packed: pb.PackedStruct, src, buffers, counts, block) -> Block:
    inner = decode(ctx, packed.values, src, buffers, counts, block=block)
    widths = list(packed.bits_per_value)
    if not isinstance(inner, Fixed) or inner.bits != sum(widths) or any(w % 8 for w in widths):
        raise ctx.unsupported("packed struct of non byte-aligned fields")
    return split_rows(inner.data, inner.n, widths)


def split_rows(data: np.ndarray, n: int, widths: list[int]) -> Struct:
    """Packed rows (fields side by side) -> one Fixed block per field."""
    row = sum(widths) // 8
    rows = data[: n * row].reshape(n, row)
    children, at = [], 0
    for bits in widths:
        children.append(Fixed(np.ascontiguousarray(rows[:, at: at + bits // 8]).reshape(-1), bits, n))
        at += bits // 8
    return Struct(children, n)


def _decompress_each(ctx, scheme: int, src, starts, sizes,
                     keep_source: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """General-decompress one buffer per chunk (each chunk is its own frame).

    Returns a new source with the new ranges: the decompressed buffers back to back, after the
    old source where other buffers still point into it (``keep_source``).
    """
    data, new_sizes = decompress_chunks(ctx, scheme, as_u8(src), starts, sizes)
    if not keep_source:
        return data, exclusive_cumsum(new_sizes)[:-1], new_sizes
    new_starts = len(src) + exclusive_cumsum(new_sizes)[:-1]
    return np.concatenate([src, data]), new_starts, new_sizes


_DECODERS = {
    "flat": _flat,
    "constant": _constant,
    "variable": _variable,
    "inline_bitpacking": _inline_bitpacking,
    "out_of_line_bitpacking": _out_of_line,
    "rle": _rle,
    "byte_stream_split": _byte_stream_split,
    "general": _general,
    "fsst": _fsst,
    "fixed_size_list": _fixed_size_list,
    "packed_struct": _packed_struct,
}

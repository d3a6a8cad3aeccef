"""Page layouts of 2.1+ files -> levels + values of one leaf column page.

=================  ============================================================
layout             page buffers
=================  ============================================================
mini-block         0: chunk metadata, one entry per chunk (2.1: u16, 2.2:
                   ``has_large_chunk`` -> u32): ``(8-byte words - 1) << 4 | log2
                   values`` (log2 0 in the last chunk: "the rest");
                   1: the chunks; 2: dictionary (if any); then the repetition
                   index (unused by full scans). A chunk: ``u16`` levels, ``u16``
                   rep bytes (if rep), ``u16`` def bytes (if def), one size per
                   value buffer (u16; u32 with large chunks), zero padding to 8;
                   then rep, def, value buffers, each padded to 8 bytes.
full-zip           0: per entry a control word (``rep << bits_def | def`` in 1, 2
                   or 4 bytes, absent without levels), then for a visible entry
                   its fixed-width value, or for a visible valid entry a
                   ``bits_per_offset`` length and the bytes; 1: byte-packed
                   offsets of every row start plus the end (absent for
                   fixed-width data without repetition).
constant/all-null  [scalar value buffer] then rep and def levels (u16 unless a
                   level compression is given); the fixed-width constant
                   (2.2) is inline in the message. The scalar buffer is
                   ``u32 count, u32 sizes..., buffers`` (Arrow buffers of a
                   one-value array).
=================  ============================================================

:func:`decode_page` returns a :class:`PageData`: levels (``None`` when absent),
the number of level entries, and the values of the visible leaf entries
(a value block, a dictionary + index block, or a scalar to repeat).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError

from airflow_lance.core._proto import encodings_v2_1_pb2 as pb
from airflow_lance.core._proto import file2_pb2
from airflow_lance.core.file.v21 import compression, fsst
from airflow_lance.core.file.v21.blocks import Block, Fixed, Fsl, Struct, Variable, take
from airflow_lance.core.file.v21.compression import kind
from airflow_lance.core.file.v21.structure import max_rep, visible_threshold
from airflow_lance.core.file.v21.util import (
    Ctx,
    as_u8,
    decompress_chunks,
    exclusive_cumsum,
    fixed_dtype,
    gather,
    take_ranges,
)

PAGE_LAYOUT_URL = "/lance.encodings21.PageLayout"
_ALIGN = 8


@dataclass
class PageData:
    """A decoded page: levels, entry count, visible values."""

    rows: int
    layers: list[int]
    entries: int
    rep: np.ndarray | None
    defs: np.ndarray | None
    values: Block | None = None          # visible leaf values (None: all null)
    dictionary: Block | None = None      # values are indices into this
    scalar: Block | None = None          # constant page: one value for every visible entry
    blobs: tuple[np.ndarray, np.ndarray] | None = None  # blob page: (file position, size) per visible entry


def parse_layout(ctx: Ctx, encoding: file2_pb2.Encoding) -> pb.PageLayout:
    """The ``PageLayout`` of a page (direct ``Any``)."""
    if encoding.WhichOneof("location") != "direct":
        raise ctx.unsupported(f"page encoding location {encoding.WhichOneof('location')!r}")
    packed = any_pb2.Any()
    layout = pb.PageLayout()
    try:
        packed.ParseFromString(encoding.direct.encoding)
        if packed.type_url != PAGE_LAYOUT_URL:
            raise ctx.unsupported(f"page encoding {packed.type_url!r} in a 2.1+ file")
        layout.ParseFromString(packed.value)
    except DecodeError as exc:
        raise ctx.corrupt(f"undecodable page layout: {exc}") from exc
    return layout


def decode_page(
    ctx: Ctx, layout: pb.PageLayout, buffers: list[pa.Buffer], rows: int, select: np.ndarray | None = None
) -> PageData:
    """Decode one page (see module docstring).

    ``select``: sorted, unique row positions within the page (None: every
    row); the result then holds exactly those rows. Mini-block pages decode
    only the chunks holding them (with the repetition index, where rows span
    chunks), full-zip pages only the selected rows' entries.
    """
    which = layout.WhichOneof("layout")
    if select is not None:
        select = np.asarray(select, dtype=np.int64)
        ctx.check(len(select) == 0 or (int(select[0]) >= 0 and int(select[-1]) < rows), "row selection outside the page")
        if len(select) == rows:  # sorted, unique and in range: every row
            select = None
    if which == "mini_block_layout":
        return _mini_block(ctx, layout.mini_block_layout, buffers, rows, select)
    if which == "full_zip_layout":
        return _full_zip(ctx, layout.full_zip_layout, buffers, rows, select)
    if which == "constant_layout":
        data = _constant(ctx, layout.constant_layout, buffers, rows)
    elif which == "blob_layout":
        data = _blob(ctx, layout.blob_layout, buffers, rows)
    else:
        raise ctx.unsupported(f"page layout {which!r}")
    return data if select is None else select_rows(ctx, data, select)


def _ranges_index(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``concat(arange(s, s + l))`` for every (s, l), vectorised."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum()) if len(lengths) else 0
    index = np.repeat(np.asarray(starts, dtype=np.int64) - exclusive_cumsum(lengths)[:-1], lengths)
    index += np.arange(total, dtype=np.int64)
    return index


def _selected_entries(
    ctx: Ctx, rep: np.ndarray | None, defs: np.ndarray | None, layers: list[int], entries: int, local: np.ndarray
) -> tuple[np.ndarray, np.ndarray | None]:
    """(level entries of the rows ``local``, their visible value positions; None when entries = values).

    Without repetition every entry is a row; with it a row starts at each
    entry with the top repetition level. Values exist for visible entries only.
    """
    if rep is None:
        entry = local
    else:
        top = max_rep(layers)
        starts = np.flatnonzero(rep == top)
        ctx.check(len(starts) == 0 or int(starts[0]) == 0, "repetition levels do not start a row")
        bounds = np.append(starts, entries)
        ctx.check(len(local) == 0 or int(local[-1]) < len(starts), "row selection past the decoded rows")
        entry = _ranges_index(bounds[local], bounds[local + 1] - bounds[local])
    if defs is None:
        return entry, (None if rep is None else entry)
    visible = defs <= visible_threshold(layers)
    if bool(visible.all()):
        return entry, entry
    return entry, np.searchsorted(np.flatnonzero(visible), entry[visible[entry]])


def select_rows(ctx: Ctx, data: PageData, select: np.ndarray) -> PageData:
    """The rows ``select`` of a fully decoded page."""
    entry, value = _selected_entries(ctx, data.rep, data.defs, data.layers, data.entries, select)
    rep = None if data.rep is None else data.rep[entry]
    defs = None if data.defs is None else data.defs[entry]
    if value is None:
        value = entry
    values = None if data.values is None else take(data.values, value, ctx)
    blobs = None if data.blobs is None else (data.blobs[0][value], data.blobs[1][value])
    return PageData(len(select), data.layers, len(entry), rep, defs, values, data.dictionary, data.scalar, blobs)


def _blob(ctx: Ctx, layout: pb.BlobLayout, buffers: list[pa.Buffer], rows: int) -> PageData:
    """Blob pages: an inner page of (position, size) descriptions; the bytes live elsewhere in the file.

    A description with size 0 is empty (position 0) or carries levels in its
    position (``def << 16 | rep``); repetition inside blob pages is not supported.
    """
    inner = decode_page(ctx, layout.inner_layout, buffers, rows)
    values = inner.values
    if inner.rep is not None or inner.defs is not None or not isinstance(values, Struct) \
            or len(values.children) != 2 or any(not isinstance(c, Fixed) or c.bits != 64 for c in values.children):
        raise ctx.unsupported("blob page descriptions other than (u64 position, u64 size)")
    layers = list(layout.layers)
    if any(layer not in (pb.REPDEF_ALL_VALID_ITEM, pb.REPDEF_NULLABLE_ITEM) for layer in layers):
        raise ctx.unsupported("blob pages inside lists")
    position = values.children[0].data.view("<u8")
    size = values.children[1].data.view("<u8")
    ctx.check(bool(np.all(position < 2**62)) and bool(np.all(size < 2**62)), "blob descriptions out of range")
    position, size = position.astype(np.int64), size.astype(np.int64)
    levels = np.where(size == 0, position, 0)
    ctx.check(bool(np.all(levels & 0xFFFF == 0)), "blob description with repetition levels")
    defs = levels >> 16
    ctx.check(bool(np.all(defs <= sum(layer == pb.REPDEF_NULLABLE_ITEM for layer in layers))),
              "blob description with an unknown definition level")
    position = np.where(size == 0, 0, position)
    return PageData(rows, layers, values.n, None, defs.astype(np.uint16) if defs.any() else None,
                    blobs=(position, size))


def _pad(sizes: np.ndarray) -> np.ndarray:
    return (sizes + _ALIGN - 1) // _ALIGN * _ALIGN


# ----------------------------------------------------------------------------- mini-block


def _chunk_rows(
    ctx: Ctx, layout: pb.MiniBlockLayout, buffers: list[pa.Buffer], counts: np.ndarray, rows: int, has_rep: bool
) -> tuple[np.ndarray, np.ndarray] | None:
    """(rows starting in each chunk, group of each chunk) or None when unknown.

    Without repetition a chunk's values are its rows. With it the repetition
    index gives per chunk the rows ending in it and the items of a trailing
    partial row; a row continuing into the next chunk ties the chunks into one
    group, and only whole groups decode into whole rows.
    """
    chunks = len(counts)
    if not has_rep:
        return counts, np.arange(chunks, dtype=np.int64)
    depth = layout.repetition_index_depth
    position = 2 + layout.HasField("dictionary")
    if depth == 0 or len(buffers) <= position:
        return None
    index = as_u8(buffers[position])
    stride = depth + 1
    if len(index) != chunks * stride * 8:
        return None
    table = index.view("<u8").reshape(chunks, stride).astype(np.int64)
    trailer = table[:, 1] > 0
    preamble = np.zeros(chunks, dtype=bool)
    preamble[1:] = trailer[:-1]
    starts = table[:, 0] + trailer - preamble
    ctx.check(bool(np.all(starts >= 0)) and int(starts.sum()) == rows, "repetition index does not match the rows")
    return starts, np.cumsum(~preamble) - 1


def _mini_block(
    ctx: Ctx, layout: pb.MiniBlockLayout, buffers: list[pa.Buffer], rows: int, select: np.ndarray | None = None
) -> PageData:
    return mini_block_pages(ctx, [layout], [buffers], [rows], [select])


def group_key(layout: pb.PageLayout) -> bytes | None:
    """Pages of a column with equal keys decode together (:func:`mini_block_pages`): mini-block
    pages with the same encodings (their item and dictionary counts aside); None: alone."""
    if layout.WhichOneof("layout") != "mini_block_layout":
        return None
    key = pb.MiniBlockLayout()
    key.CopyFrom(layout.mini_block_layout)
    key.ClearField("num_items")
    key.ClearField("num_dictionary_items")
    return key.SerializeToString()


class Ungroupable(Exception):
    """Pages that cannot be decoded as one (their dictionaries cannot be concatenated)."""


def _page_chunks(ctx: Ctx, layout: pb.MiniBlockLayout, buffers: list, rows: int, select: np.ndarray | None):
    """One page's chunk sizes, value counts, byte starts (in the gathered data), the gathered
    data, the positions of the selected rows among the decoded rows (None: all rows) and the
    number of rows decoded."""
    has_rep = layout.HasField("rep_compression")
    ctx.check(len(buffers) >= 2 + layout.HasField("dictionary"), f"mini-block page with {len(buffers)} buffers")
    entry = 4 if layout.has_large_chunk else 2
    meta = as_u8(buffers[0])
    data = buffers[1]
    ctx.check(len(meta) % entry == 0, "chunk metadata size is not a multiple of its entries")
    meta_values = meta.view(f"<u{entry}").astype(np.int64)
    chunks = len(meta_values)
    num_values = layout.num_items
    sizes = ((meta_values >> 4) + 1) * _ALIGN
    logs = meta_values & 0xF
    ctx.check(int(sizes.sum()) == len(data), f"chunk sizes add up to {int(sizes.sum())}, not {len(data)} bytes")
    ctx.check(chunks > 0 or num_values == 0, "mini-block page without chunks")
    ctx.check(has_rep or num_values == rows, f"{num_values} values in a page of {rows} rows")
    counts = np.left_shift(1, logs)
    if chunks:
        ctx.check(bool(np.all(logs[:-1] > 0)), "a chunk other than the last has no value count")
        counts[-1] = num_values - int(counts[:-1].sum())
        ctx.check(int(counts[-1]) > 0, "chunk value counts exceed the page's values")
    starts = exclusive_cumsum(sizes)[:-1]
    local = None  # positions of the selected rows among the rows of the decoded chunks
    decoded = rows
    if select is not None:
        spans = _chunk_rows(ctx, layout, buffers, counts, rows, has_rep) if chunks else None
        if spans is None:
            local = select
        else:
            chunk_starts, group = spans
            ends = np.cumsum(chunk_starts)
            if len(select) and int(select[-1]) - int(select[0]) + 1 == len(select):
                # a run of rows: the chunks from the first row's group to the last row's
                first, last = np.searchsorted(ends, select[[0, -1]], side="right").tolist()
                low = int(np.searchsorted(group, group[first]))
                high = int(np.searchsorted(group, group[last], side="right"))
                chosen = np.arange(low, high)
                local = select - int((ends - chunk_starts)[low])
            else:
                owner = np.searchsorted(ends, select, side="right")
                chosen = np.flatnonzero(np.isin(group, group[owner]))
                before = np.zeros(chunks, dtype=np.int64)
                before[chosen] = exclusive_cumsum(chunk_starts[chosen])[:-1]
                local = before[owner] + select - (ends - chunk_starts)[owner]
            counts, sizes, starts = counts[chosen], sizes[chosen], starts[chosen]
            decoded = int(chunk_starts[chosen].sum())
    data, starts = gather(data, starts, sizes)
    return sizes, counts, starts, data, local, decoded


def _concat_blocks(ctx: Ctx, blocks: list[Block]) -> Block:
    """Dictionaries of several pages back to back (fixed byte-wide or variable-width values)."""
    if len(blocks) == 1:
        return blocks[0]
    if all(isinstance(b, Fixed) and b.bits % 8 == 0 and b.bits == blocks[0].bits for b in blocks):
        width = blocks[0].bits // 8
        return Fixed(np.concatenate([b.data[: b.n * width] for b in blocks]), blocks[0].bits, sum(b.n for b in blocks))
    if all(isinstance(b, Variable) for b in blocks):
        shifts = exclusive_cumsum([len(b.data) for b in blocks])
        offsets = np.concatenate([b.offsets[:-1] + shift for b, shift in zip(blocks, shifts[:-1])]
                                 + [np.array([shifts[-1]], dtype=np.int64)])
        return Variable(offsets, np.concatenate([b.data for b in blocks]), sum(b.n for b in blocks))
    raise Ungroupable()


def mini_block_pages(
    ctx: Ctx,
    layouts: list[pb.MiniBlockLayout],
    page_buffers: list[list],
    page_rows: list[int],
    selects: list[np.ndarray | None],
) -> PageData:
    """Decode consecutive mini-block pages of one column with equal encodings (see
    :func:`group_key`) as one: their chunks are decoded together, dictionaries concatenated
    (indices shifted), so the per-page work is only reading each page's chunk table.
    ``selects``: every page's selected rows, or all None. Raises :class:`Ungroupable` when
    the pages' dictionaries cannot be concatenated."""
    layout = layouts[0]
    has_rep, has_def = layout.HasField("rep_compression"), layout.HasField("def_compression")
    has_dict = layout.HasField("dictionary")
    sizes_, counts_, starts_, data_, locals_, dict_blocks, dict_bases = [], [], [], [], [], [], []
    base_bytes = decoded_rows = out_rows = dict_base = 0
    for page_layout, buffers, rows, select in zip(layouts, page_buffers, page_rows, selects):
        sizes, counts, starts, data, local, decoded = _page_chunks(ctx, page_layout, buffers, rows, select)
        sizes_.append(sizes)
        counts_.append(counts)
        starts_.append(starts + base_bytes)
        data_.append(data)
        base_bytes += len(data)
        if local is not None:
            locals_.append(local + decoded_rows)
        decoded_rows += decoded
        out_rows += rows if select is None else len(select)
        if has_dict:
            dict_data = as_u8(buffers[2])
            dict_blocks.append(compression.decode(ctx, page_layout.dictionary, dict_data,
                                                  [(np.zeros(1, np.int64), np.array([len(dict_data)]))],
                                                  np.array([page_layout.num_dictionary_items]), block=True))
            dict_bases.append(np.full(len(counts), dict_base, dtype=np.int64))
            dict_base += page_layout.num_dictionary_items
    single = len(layouts) == 1
    dictionary = _concat_blocks(ctx, dict_blocks) if has_dict else None
    sizes = sizes_[0] if single else np.concatenate(sizes_)
    counts = counts_[0] if single else np.concatenate(counts_)
    starts = starts_[0] if single else np.concatenate(starts_)
    data = data_[0] if single else np.concatenate(data_)
    local = None if not locals_ else locals_[0] if single else np.concatenate(locals_)
    chunks = len(counts)
    rows = decoded_rows
    value_kinds = compression.num_buffers(ctx, layout.value_compression)
    ctx.check(layout.num_buffers == value_kinds, f"num_buffers {layout.num_buffers}, encoding uses {value_kinds}")
    size_width = 4 if layout.has_large_chunk else 2
    header = 2 + 2 * has_rep + 2 * has_def + size_width * value_kinds
    ctx.check(bool(np.all(sizes >= header)), "chunk smaller than its header")
    head = data[(starts[:, None] + np.arange(header)).reshape(-1)].reshape(chunks, header)
    levels_in_chunk = head[:, 0:2].copy().view("<u2").reshape(-1).astype(np.int64)
    at = 2
    cursor = starts + _pad(np.full(chunks, header))
    rep_ranges = def_ranges = None
    if has_rep:
        rep_sizes = head[:, at: at + 2].copy().view("<u2").reshape(-1).astype(np.int64)
        rep_ranges, cursor, at = (cursor, rep_sizes), cursor + _pad(rep_sizes), at + 2
    if has_def:
        def_sizes = head[:, at: at + 2].copy().view("<u2").reshape(-1).astype(np.int64)
        def_ranges, cursor, at = (cursor, def_sizes), cursor + _pad(def_sizes), at + 2
    value_ranges = []
    for _ in range(value_kinds):
        buf_sizes = head[:, at: at + size_width].copy().view(f"<u{size_width}").reshape(-1).astype(np.int64)
        value_ranges.append((cursor, buf_sizes))
        cursor, at = cursor + _pad(buf_sizes), at + size_width
    ctx.check(bool(np.all(cursor <= starts + sizes)), "chunk buffers exceed the chunk")
    rep = defs = None
    entries = int(counts.sum())
    if has_rep or has_def:
        ctx.check(bool(np.all(levels_in_chunk >= counts)), "chunk has fewer levels than values")
        entries = int(levels_in_chunk.sum())
        ctx.check(not has_def or has_rep or entries == rows, "levels do not match the page's rows")
        if has_rep:
            rep = compression.decode_levels(ctx, layout.rep_compression, data, rep_ranges, levels_in_chunk)
        if has_def:
            defs = compression.decode_levels(ctx, layout.def_compression, data, def_ranges, levels_in_chunk)
    value_select = None
    if local is not None:
        entry, value_select = _selected_entries(ctx, rep, defs, list(layout.layers), entries, local)
        if value_select is None:
            value_select = entry
        rep = None if rep is None else rep[entry]
        defs = None if defs is None else defs[entry]
        entries = len(entry)
    values = compression.decode(ctx, layout.value_compression, data, value_ranges, counts, block=False,
                                select=value_select)
    if has_dict and not single and dict_base > (dict_bases[0][0] if dict_bases else 0):
        # indices of each page's values point into its own dictionary: shift them to the concatenation
        shift = np.repeat(np.concatenate(dict_bases), counts)
        if value_select is not None:
            shift = shift[value_select]
        if not isinstance(values, Fixed) or values.bits not in (8, 16, 32, 64):
            raise Ungroupable()
        width = values.bits // 8
        indices = values.data[: values.n * width].view(f"<u{width}").astype(np.int64) + shift
        values = Fixed(indices.astype("<u8").view(np.uint8), 64, values.n)
    return PageData(out_rows, list(layout.layers), entries, rep, defs, values, dictionary)


# ----------------------------------------------------------------------------- full-zip


def _word_bytes(bits_rep: int, bits_def: int) -> int:
    total = bits_rep + bits_def
    if total == 0:
        return 0
    return 1 if total <= 8 else 2 if total <= 16 else 4


def _read_words(data: np.ndarray, positions: np.ndarray, width: int) -> np.ndarray:
    if width == 0:
        return np.zeros(len(positions), dtype=np.int64)
    raw = data[(positions[:, None] + np.arange(width)).reshape(-1)].reshape(len(positions), width)
    return raw.copy().view(f"<u{width}").reshape(-1).astype(np.int64)


def _full_zip(
    ctx: Ctx, layout: pb.FullZipLayout, buffers: list[pa.Buffer], rows: int, select: np.ndarray | None = None
) -> PageData:
    ctx.check(len(buffers) >= 1, "full-zip page without data")
    data = buffers[0]
    bits_rep, bits_def = layout.bits_rep, layout.bits_def
    ctx.check(bits_rep <= 16 and bits_def <= 16, "control word wider than 32 bits")
    word = _word_bytes(bits_rep, bits_def)
    entries = layout.num_items
    details = layout.WhichOneof("details")
    layers = list(layout.layers)
    limit = visible_threshold(layers) if layers else 0
    if details == "bits_per_value":
        # 0 bits: no bytes per entry, the values a ``constant`` (pylance 1.0.4-9.0.1 so wrote vectors
        # whose items are all null)
        ctx.check(layout.bits_per_value % 8 == 0 and (layout.bits_per_value > 0 or kind(layout.value_compression)
                                                      == "constant"), "full-zip values not byte-aligned")
        value_bytes, length_bytes = layout.bits_per_value // 8, 0
    elif details == "bits_per_offset":
        ctx.check(layout.bits_per_offset in (32, 64), f"full-zip lengths of {layout.bits_per_offset} bits")
        value_bytes, length_bytes = 0, layout.bits_per_offset // 8
    else:
        raise ctx.corrupt("full-zip layout without a value width")
    rep_mask = (1 << bits_rep) - 1
    def_mask = (1 << bits_def) - 1

    def split(words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return (words >> bits_def) & rep_mask, words & def_mask

    if bits_rep == 0 and length_bytes == 0:
        # fixed width, every entry visible: a regular stride
        stride = word + value_bytes
        if select is None:
            data = as_u8(data)
        elif stride:
            ctx.check(len(data) == entries * stride and entries == rows, "full-zip data size does not match its entries")
            data, at = gather(data, select * stride, np.full(len(select), stride))
            data = take_ranges(data, at, np.full(len(select), stride))
            entries = rows = len(select)
            select = None
        ctx.check(len(data) == entries * stride, "full-zip data size does not match its entries")
        matrix = data.reshape(entries, stride) if stride else data.reshape(entries, 0)
        if select is not None:
            ctx.check(entries == rows, "full-zip entries differ from rows without repetition")
            matrix, entries, rows = matrix[select], len(select), len(select)
        defs = None
        if word:
            defs = matrix[:, :word].copy().view(f"<u{word}").reshape(-1).astype(np.int64) & def_mask
        rows2d = matrix[:, word:]
        values = _fixed_per_value(ctx, layout.value_compression, rows2d, value_bytes)
        return PageData(rows, layers, entries, None, _levels(defs), values)
    ctx.check(len(buffers) >= 2, "full-zip page without its repetition index")
    index = as_u8(buffers[1])
    ctx.check(len(index) % (rows + 1) == 0, "repetition index size does not match the rows")
    width = len(index) // (rows + 1)
    ctx.check(width in (1, 2, 4, 8), f"repetition index of {width}-byte entries")
    row_starts = index.view(f"<u{width}").astype(np.int64)
    ctx.check(rows == 0 or (row_starts[0] == 0 and row_starts[-1] == len(data)
                            and bool(np.all(np.diff(row_starts) > 0))), "repetition index inconsistent")
    row_ends = row_starts[1:]
    row_starts = row_starts[:-1]
    if select is not None:
        row_starts, row_ends, rows = row_starts[select], row_ends[select], len(select)
        data, moved = gather(data, row_starts, row_ends - row_starts)
        row_starts, row_ends = moved, moved + (row_ends - row_starts)
    else:
        data = as_u8(data)
    if bits_rep == 0:
        # one entry per row: the index gives every entry's start
        position = row_starts
        ctx.check(select is not None or rows == entries, "full-zip entries differ from rows without repetition")
        words = _read_words(data, position, word)
        reps = defs = None
        if word:
            _, defs = split(words)
    else:
        position, words = _walk_rows(ctx, data, row_starts, row_ends, word, value_bytes, length_bytes, split, limit)
        reps, defs = split(words)
        ctx.check(select is not None or len(position) == entries, "full-zip entry count differs from the layout")
    visible = np.ones(len(position), dtype=bool) if defs is None else defs <= limit
    valid = visible if defs is None else defs == 0
    body = position + word
    if length_bytes:
        lengths = np.zeros(len(position), dtype=np.int64)
        has_value = visible & valid
        lengths[has_value] = _read_words(data, body[has_value], length_bytes)
        ends = np.where(has_value, body + length_bytes + lengths, body)
        if select is None:
            ctx.check(bool(np.all(ends <= np.append(position[1:], len(data)))), "full-zip value overruns its entry")
        else:
            ctx.check(bool(np.all(ends <= len(data))), "full-zip value overruns the page")
        vis = np.flatnonzero(visible)
        block = Variable(exclusive_cumsum(lengths[vis]), take_ranges(data, body[vis] + length_bytes, lengths[vis]),
                         len(vis))
        values = _variable_per_value(ctx, layout.value_compression, block)
    else:
        vis = np.flatnonzero(visible)
        ctx.check(bool(np.all(body[vis] + value_bytes <= len(data))), "full-zip value overruns the page")
        rows2d = take_ranges(data, body[vis], np.full(len(vis), value_bytes)).reshape(len(vis), value_bytes)
        values = _fixed_per_value(ctx, layout.value_compression, rows2d, value_bytes)
    ctx.check(select is not None or values.n == layout.num_visible_items or layout.num_visible_items == 0,
              "full-zip visible entries differ from the layout")
    return PageData(rows, layers, len(position), _levels(reps), _levels(defs), values)


def _levels(values: np.ndarray | None) -> np.ndarray | None:
    return None if values is None else values.astype(np.uint16)


def _walk_rows(ctx, data, row_starts, row_ends, word, value_bytes, length_bytes, split, limit):
    """Entry positions and control words of a full-zip page with repetition.

    Entries of one row follow each other with data-dependent sizes, so rows are
    walked in rounds: round k reads the k-th entry of every row still open,
    vectorised over the rows (rounds = entries of the longest row).
    """
    cursor = row_starts.copy()
    ends = row_ends
    row = np.arange(len(cursor), dtype=np.int64)
    found_pos, found_word, found_row, found_round = [], [], [], []
    active = np.flatnonzero(cursor < ends)
    step = 0
    while len(active):
        at = cursor[active]
        ctx.check(bool(np.all(at + word <= ends[active])), "full-zip control word overruns its row")
        words = _read_words(data, at, word)
        _, defs = split(words)
        visible = defs <= limit
        size = np.full(len(at), word, dtype=np.int64)
        if length_bytes:
            has_value = visible & (defs == 0)
            idx = np.flatnonzero(has_value)
            ctx.check(bool(np.all(at[idx] + word + length_bytes <= ends[active][idx])), "full-zip length overruns")
            lengths = _read_words(data, at[idx] + word, length_bytes)
            size[idx] += length_bytes + lengths
        else:
            size[visible] += value_bytes
        found_pos.append(at)
        found_word.append(words)
        found_row.append(row[active])
        found_round.append(np.full(len(at), step))
        cursor[active] = at + size
        ctx.check(bool(np.all(cursor[active] <= ends[active])), "full-zip entry overruns its row")
        active = active[cursor[active] < ends[active]]
        step += 1
    if not found_pos:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    positions = np.concatenate(found_pos)
    order = np.lexsort((np.concatenate(found_round), np.concatenate(found_row)))
    return positions[order], np.concatenate(found_word)[order]


def _fixed_per_value(ctx: Ctx, encoding: pb.CompressiveEncoding, rows2d: np.ndarray, value_bytes: int) -> Block:
    """Fixed-width full-zip values (one row of ``value_bytes`` per visible entry)."""
    n = len(rows2d)
    which = kind(encoding)
    if which == "flat":
        ctx.check(encoding.flat.bits_per_value == value_bytes * 8, "full-zip flat width mismatch")
        return Fixed(np.ascontiguousarray(rows2d).reshape(-1), value_bytes * 8, n)
    if which == "fixed_size_list":
        return _fsl_per_value(ctx, encoding, np.ascontiguousarray(rows2d), n)
    if which == "constant" and value_bytes == 0:  # nothing stored per entry (without a value: all null)
        value = np.frombuffer(encoding.constant.value, dtype=np.uint8)
        return Fixed(np.tile(value, n), 8 * len(value), n)
    raise ctx.unsupported(f"full-zip fixed-width encoding {which!r}")


def _fsl_per_value(ctx: Ctx, encoding: pb.CompressiveEncoding, rows2d: np.ndarray, n: int) -> Block:
    """Full-zip fixed-size lists: per row the item validity of every nullable layer, then the items."""
    dims, nullable = [], []
    while kind(encoding) == "fixed_size_list":
        dims.append(int(encoding.fixed_size_list.items_per_value))
        nullable.append(encoding.fixed_size_list.has_validity)
        encoding = encoding.fixed_size_list.values
    ctx.check(all(d > 0 for d in dims), "fixed-size list of 0 items")
    constant = None  # items stored once for all (pylance: ``constant`` without a value when every item is null)
    if kind(encoding) == "constant":
        constant = np.frombuffer(encoding.constant.value, dtype=np.uint8)
        bits = 8 * len(constant)
    elif kind(encoding) == "flat" and encoding.flat.bits_per_value % 8 == 0:
        bits = encoding.flat.bits_per_value
    else:
        raise ctx.unsupported(f"full-zip list items encoded as {kind(encoding)!r}")
    cumulative = np.cumprod(dims)
    offset, valids = 0, []
    for count, has_validity in zip(cumulative.tolist(), nullable):
        if has_validity:
            width = (count + 7) // 8
            ctx.check(rows2d.shape[1] >= offset + width, "full-zip list validity missing")
            valid = np.unpackbits(rows2d[:, offset: offset + width], axis=1, bitorder="little")[:, :count]
            valids.append(valid.reshape(-1).astype(bool))
            offset += width
        else:
            valids.append(None)
    items = n * int(cumulative[-1])
    if constant is not None:
        ctx.check(rows2d.shape[1] == offset, "full-zip list width mismatch")
        block: Block = Fixed(np.tile(constant, items), bits, items)
    else:
        ctx.check(rows2d.shape[1] - offset == int(cumulative[-1]) * bits // 8, "full-zip list width mismatch")
        block = Fixed(np.ascontiguousarray(rows2d[:, offset:]).reshape(-1), bits, items)
    for k in range(len(dims) - 1, -1, -1):
        block = Fsl(dims[k], valids[k], block, n * (int(cumulative[k - 1]) if k else 1))
    return block


def _variable_per_value(ctx: Ctx, encoding: pb.CompressiveEncoding, block: Variable) -> Block:
    which = kind(encoding)
    if which == "variable":
        return block
    if which == "fsst":
        inner = _variable_per_value(ctx, encoding.fsst.values, block)
        if not isinstance(inner, Variable):
            raise ctx.corrupt("FSST data is not variable-width")
        data, offsets = fsst.decode(ctx, encoding.fsst.symbol_table, inner.data, inner.offsets)
        return Variable(offsets, data, inner.n)
    if which == "general":
        # every value is its own frame: one decompression per value (values are >= 32 KiB)
        offsets = np.asarray(block.offsets, dtype=np.int64)
        data, lengths = decompress_chunks(ctx, encoding.general.compression.scheme, as_u8(block.data),
                                          offsets[:-1], np.diff(offsets))
        out = Variable(exclusive_cumsum(lengths), data, block.n)
        if encoding.general.HasField("values") and kind(encoding.general.values) != "variable":
            return _variable_per_value(ctx, encoding.general.values, out)
        return out
    if which == "variable_packed_struct":
        return _variable_packed_struct(ctx, encoding.variable_packed_struct, block)
    raise ctx.unsupported(f"full-zip variable-width encoding {which!r}")


def _variable_packed_struct(ctx: Ctx, packed: pb.VariablePackedStruct, block: Variable) -> Block:
    """Rows of fields side by side (fixed: bytes; variable: length + bytes), one field at a time.

    A null struct is stored as a row without bytes (pylance 14 writes such pages for nullable
    packed structs, blob v2 descriptors among them; a valid row always has bytes): its fields decode
    as zeros (a fixed field) or empty (a variable one), and the page's levels mark the row null."""
    present = block.offsets[1:] > block.offsets[:-1]
    if len(present) and not bool(present.all()):
        if not packed.fields:
            raise ctx.corrupt("packed struct without fields")
        rows = np.flatnonzero(present)
        starts, lengths = block.offsets[rows], block.offsets[rows + 1] - block.offsets[rows]
        empty = b"".join(bytes(f.bits_per_value // 8 if f.WhichOneof("layout") == "bits_per_value"
                               else f.bits_per_length // 8) for f in packed.fields)
        data = np.concatenate([take_ranges(block.data, starts, lengths), np.frombuffer(empty, np.uint8)])
        offsets = exclusive_cumsum(np.append(lengths, len(empty)))
        decoded = _variable_packed_struct(ctx, packed, Variable(offsets, data, len(rows) + 1))
        index = np.where(present, np.cumsum(present) - 1, len(rows))
        return take(decoded, index, ctx)
    n = block.n
    cursor = block.offsets[:-1].copy()
    ends = block.offsets[1:]
    children: list[Block] = []
    for field in packed.fields:
        layout = field.WhichOneof("layout")
        if layout == "bits_per_value":
            ctx.check(field.bits_per_value % 8 == 0 and field.bits_per_value > 0, "packed field not byte-aligned")
            width = field.bits_per_value // 8
            ctx.check(bool(np.all(cursor + width <= ends)), "packed struct field overruns its row")
            rows2d = take_ranges(block.data, cursor, np.full(n, width)).reshape(n, width)
            children.append(_fixed_per_value(ctx, field.value, rows2d, width))
            cursor = cursor + width
        elif layout == "bits_per_length":
            ctx.check(field.bits_per_length in (8, 16, 32, 64), "packed field length width")
            width = field.bits_per_length // 8
            ctx.check(bool(np.all(cursor + width <= ends)), "packed struct length overruns its row")
            lengths = _read_words(block.data, cursor, width)
            ctx.check(bool(np.all(cursor + width + lengths <= ends)), "packed struct value overruns its row")
            inner = Variable(exclusive_cumsum(lengths), take_ranges(block.data, cursor + width, lengths), n)
            children.append(_variable_per_value(ctx, field.value, inner))
            cursor = cursor + width + lengths
        else:
            raise ctx.corrupt("packed struct field without a layout")
    ctx.check(bool(np.array_equal(cursor, ends)), "packed struct rows have trailing bytes")
    return Struct(children, n)


# ----------------------------------------------------------------------------- constant / all-null


def _constant(ctx: Ctx, layout: pb.ConstantLayout, buffers: list[pa.Buffer], rows: int) -> PageData:
    layers = list(layout.layers)
    has_inline = layout.HasField("inline_value")
    count = len(buffers)
    scalar: Block | None = None
    if has_inline:
        ctx.check(count in (0, 2), f"constant page with an inline value and {count} buffers")
        value = np.frombuffer(layout.inline_value, dtype=np.uint8)
        scalar = Fixed(value.copy(), 8 * len(value), 1)
        level_buffers = buffers
    else:
        ctx.check(count in (0, 1, 2, 3), f"constant page with {count} buffers")
        if count in (1, 3):
            scalar = _scalar_buffer(ctx, as_u8(buffers[0]))
            level_buffers = buffers[1:]
        else:
            level_buffers = buffers
    rep = defs = None
    entries = rows
    if level_buffers:
        rep = _constant_levels(ctx, layout, "rep", as_u8(level_buffers[0]))
        defs = _constant_levels(ctx, layout, "def", as_u8(level_buffers[1]))
        lengths = {len(x) for x in (rep, defs) if x is not None}
        ctx.check(len(lengths) <= 1, "constant page levels differ in length")
        entries = lengths.pop() if lengths else rows
    return PageData(rows, layers, entries, rep, defs, None, None, scalar)


def _constant_levels(ctx: Ctx, layout: pb.ConstantLayout, which: str, data: np.ndarray) -> np.ndarray | None:
    if len(data) == 0:
        return None
    encoding_name = f"{which}_compression"
    if layout.HasField(encoding_name):
        count = layout.num_rep_values if which == "rep" else layout.num_def_values
        ranges = (np.zeros(1, np.int64), np.array([len(data)], np.int64))
        return compression.decode_levels(ctx, getattr(layout, encoding_name), data, ranges, np.array([count]))
    ctx.check(len(data) % 2 == 0, "level buffer of odd size")
    return data.view("<u2")


def _scalar_buffer(ctx: Ctx, data: np.ndarray) -> Block:
    """A one-value array stored as ``u32 count, u32 sizes..., buffers``."""
    ctx.check(len(data) >= 4, "constant value buffer truncated")
    count = int(data[:4].view("<u4")[0])
    ctx.check(0 < count <= 4 and len(data) >= 4 + 4 * count, "constant value buffer header")
    sizes = data[4: 4 + 4 * count].view("<u4").astype(np.int64)
    starts = 4 + 4 * count + exclusive_cumsum(sizes)[:-1]
    ctx.check(int(starts[-1] + sizes[-1]) <= len(data), "constant value buffers exceed their buffer")
    parts = [data[s: s + n] for s, n in zip(starts.tolist(), sizes.tolist())]
    if count == 2:  # variable width: offsets (32 or 64 bit) + bytes
        ctx.check(len(parts[0]) in (8, 16), "constant value offsets")
        offsets = parts[0].copy().view(fixed_dtype(len(parts[0]) * 4)).astype(np.int64)
        ctx.check(0 <= offsets[0] <= offsets[1] <= len(parts[1]), "constant value offsets out of range")
        return Variable(offsets, parts[1].copy(), 1)
    return Fixed(parts[0].copy(), 8 * len(parts[0]), 1)

"""Fast paths of the 2.1+ writer against straightforward reference computations on random inputs.

The references are the writer's earlier, simpler algorithms (per-entry
expansion with ``repeat``, per-value scatter of level blocks, one gather of
a concatenated source); the fast paths must give identical arrays/bytes.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from airflow_lance.core._proto import encodings_v2_1_pb2 as pb
from airflow_lance.core.file.v21 import bitpack
from airflow_lance.core.file.v21.structure import (
    _DEF_COUNT, _LIST_LAYERS, ITEM, LIST, NodeData, layers_for, levels,
    levels_and_rows,
)
from airflow_lance.core.file.v21.util import exclusive_cumsum, take_interleaved, take_ranges
from airflow_lance.core.file.v21.write import _chunk_offsets, _pack_levels, _repetition_index, encode_page


# ----------------------------------------------------------------------------- references


def _reference_levels(nodes: list[NodeData], layers: list[int]):
    """Outside in: every live list slot is replaced by its children's entries (``repeat`` per layer)."""
    depth = len(nodes)
    def_base = np.concatenate(([0], np.cumsum([_DEF_COUNT[layer] for layer in layers])))
    rep_number = np.cumsum([layer in _LIST_LAYERS for layer in layers])
    top = rep_number[-1]
    slot = np.arange(nodes[0].length, dtype=np.int64)
    defs = np.zeros(nodes[0].length, dtype=np.int64)
    reps = np.full(nodes[0].length, top, dtype=np.int64)
    for depth_index, node in enumerate(nodes):
        j = depth - 1 - depth_index
        live = slot >= 0
        if node.valid is not None:
            null = live.copy()
            null[live] = ~node.valid[slot[live]]
            defs[null] = def_base[j] + 1
            slot[null] = -1
        if node.kind != LIST:
            continue
        live = slot >= 0
        lengths = np.zeros(len(slot), dtype=np.int64)
        lengths[live] = node.offsets[slot[live] + 1] - node.offsets[slot[live]]
        empty = live & (lengths == 0)
        if layers[j] in (pb.REPDEF_EMPTYABLE_LIST, pb.REPDEF_NULL_AND_EMPTY_LIST):
            defs[empty] = def_base[j] + _DEF_COUNT[layers[j]]
        slot[empty] = -1
        expand = np.where(slot >= 0, lengths, 1)
        new_slot = np.repeat(slot, expand)
        first = exclusive_cumsum(expand)[:-1]
        within = np.arange(len(new_slot), dtype=np.int64) - np.repeat(first, expand)
        live_new = new_slot >= 0
        new_slot[live_new] = np.repeat(node.offsets[:-1][slot[slot >= 0]], lengths[slot >= 0]) + within[live_new]
        new_reps = np.repeat(reps, expand)
        new_reps[within > 0] = rep_number[j] - 1
        slot, defs, reps = new_slot, np.repeat(defs, expand), new_reps
    return reps.astype(np.uint16), defs.astype(np.uint16) if def_base[-1] else None, slot


def _reference_pack_levels(levels_: np.ndarray, counts: np.ndarray) -> bytes:
    """Each chunk's levels scattered value by value into zero-padded blocks, packed, raw tails appended."""
    width = max(bitpack.bits_needed(int(levels_.max())), 1)
    block = bitpack.BLOCK
    out = []
    start = 0
    for count in counts.tolist():
        chunk = levels_[start: start + count]
        start += count
        tail = count % block
        raw = tail > 0 and tail == 64 * width
        packed_count = count - tail if raw else count
        blocks = -(-packed_count // block)
        matrix = np.zeros(blocks * block, dtype=np.uint16)
        matrix[:packed_count] = chunk[:packed_count]
        out.append(bitpack.pack(matrix.reshape(blocks, block), width, 16).tobytes())
        if raw:
            out.append(chunk[packed_count:].astype("<u2").tobytes())
    return b"".join(out)


def _reference_repetition_index(rep: np.ndarray, level_counts: np.ndarray, top: int) -> np.ndarray:
    """Rows finished in each chunk and leftover entries, row by row."""
    out = []
    start = 0
    pending = False  # the previous chunk ended inside a row
    for count in level_counts.tolist():
        chunk = rep[start: start + count]
        start += count
        tops = np.flatnonzero(chunk == top)
        rows = len(tops) - (1 if len(tops) and tops[0] == 0 else 0)
        if pending and len(tops) and tops[0] == 0:
            out[-1][0] += 1
            out[-1][1] = 0
        leftover = count - int(tops[-1]) if len(tops) else count
        out.append([rows, leftover])
        pending = True
    out[-1][0] += 1
    out[-1][1] = 0
    return np.array(out, dtype="<u8").reshape(-1)


# ----------------------------------------------------------------------------- random inputs


def _random_nodes(rng: np.random.Generator, kinds: list[str], rows: int, *, nulls: float, empties: float,
                  null_lengths: bool) -> list[NodeData]:
    """Random validity/offsets for a path (outermost first); the last kind is the leaf item."""
    nodes = []
    length = rows
    for kind in kinds:
        valid = None
        if nulls and rng.random() < 0.8:
            valid = rng.random(length) >= nulls
        if kind == LIST:
            lengths = rng.integers(1, 5, length)
            lengths[rng.random(length) < empties] = 0
            if valid is not None and not null_lengths:
                lengths[~valid] = 0
            offsets = exclusive_cumsum(lengths)
            nodes.append(NodeData(LIST, length, valid, offsets))
            length = int(offsets[-1])
        else:
            nodes.append(NodeData(ITEM, length, valid))
    return nodes


_PATHS = [
    [LIST, ITEM], [LIST, LIST, ITEM], [LIST, ITEM, ITEM], [ITEM, LIST, ITEM], [LIST, ITEM, LIST, ITEM],
    [ITEM, LIST, LIST, ITEM], [LIST, LIST, LIST, ITEM], [ITEM, ITEM, LIST, ITEM, ITEM],
]


@pytest.mark.parametrize("kinds", _PATHS, ids=lambda kinds: "-".join(kinds))
@pytest.mark.parametrize("nulls,empties,null_lengths", [
    (0.0, 0.0, False), (0.0, 0.2, False), (0.15, 0.0, False), (0.15, 0.2, True), (0.5, 0.5, True),
])
def test_levels_match_reference(kinds, nulls, empties, null_lengths):
    rng = np.random.default_rng(abs(hash((tuple(kinds), nulls, empties, null_lengths))) % 2**32)
    for rows in (0, 1, 7, 300):
        nodes = _random_nodes(rng, kinds, rows, nulls=nulls, empties=empties, null_lengths=null_lengths)
        layers = layers_for(nodes)
        rep, defs, slots = levels(nodes, layers)
        ref_rep, ref_defs, ref_slots = _reference_levels(nodes, layers)
        rows = levels_and_rows(nodes, layers)[3]
        assert np.array_equal(rows, np.flatnonzero(ref_rep == ref_rep.max(initial=1)))
        assert rep.dtype == np.uint16 and np.array_equal(rep, ref_rep)
        assert (defs is None) == (ref_defs is None)
        if defs is not None:
            assert defs.dtype == np.uint16 and np.array_equal(defs, ref_defs)
        if slots is None:  # identity: every entry is the leaf slot of the same index
            assert np.array_equal(ref_slots, np.arange(len(ref_slots)))
            assert len(ref_slots) == nodes[-1].length
        else:
            assert np.array_equal(slots, ref_slots)
            assert np.all(np.diff(slots[slots >= 0]) > 0)  # leaf slots rise along the entries


def test_levels_without_gaps_nested():
    offsets_outer = np.array([0, 2, 3, 5])
    offsets_inner = np.array([0, 1, 3, 4, 6, 7])
    nodes = [NodeData(LIST, 3, None, offsets_outer), NodeData(LIST, 5, None, offsets_inner),
             NodeData(ITEM, 7, np.array([True, True, False, True, True, True, True]))]
    rep, defs, slots = levels(nodes, layers_for(nodes))
    assert rep.tolist() == [2, 1, 0, 2, 2, 0, 1]
    assert defs.tolist() == [0, 0, 1, 0, 0, 0, 0]
    assert slots.tolist() == [0, 1, -1, 3, 4, 5, 6]


@pytest.mark.parametrize("seed", range(6))
def test_pack_levels_matches_reference(seed):
    rng = np.random.default_rng(seed)
    width = int(rng.integers(1, 4))
    words = 64 * width
    choices = [1024, 4096, 1024 + words, words, 2048 + 17, 5, 3000]
    counts = np.array(rng.choice(choices, int(rng.integers(1, 8))), dtype=np.int64)
    if seed == 0:
        counts[:] = 4096  # the uniform case: no padding between chunks
    zero = seed == 1
    levels_ = np.zeros(int(counts.sum()), np.uint16) if zero else rng.integers(
        0, 2 ** width, int(counts.sum())).astype(np.uint16)
    levels_[0] = 0 if zero else 2 ** width - 1
    segments = []

    def add(array):
        segments.append(array)
        return 0

    _, (sizes, [(starts, lengths)]) = _pack_levels(levels_, counts, add)
    (data,) = segments
    assert np.array_equal(lengths, sizes)
    assert data.tobytes() == _reference_pack_levels(levels_, counts)
    assert np.array_equal(starts, exclusive_cumsum(sizes)[:-1]) and int(sizes.sum()) == len(data)


@pytest.mark.parametrize("seed", range(6))
def test_repetition_index_matches_reference(seed):
    rng = np.random.default_rng(seed)
    top = int(rng.integers(1, 3))
    rep = rng.integers(0, top + 1, 500).astype(np.uint16)
    rep[rng.random(500) < 0.5] = 0
    rep[0] = top
    cuts = np.sort(rng.choice(np.arange(1, 500), int(rng.integers(1, 20)), replace=False))
    level_counts = np.diff(np.concatenate(([0], cuts, [500])))
    assert np.array_equal(_repetition_index(rep, level_counts, top),
                          _reference_repetition_index(rep, level_counts, top))


@pytest.mark.parametrize("seed", range(8))
def test_take_interleaved_matches_take_ranges(seed):
    rng = np.random.default_rng(seed)
    rows = int(rng.integers(1, 40))
    sources = [rng.integers(0, 256, int(rng.integers(0, 3000)), dtype=np.uint8) for _ in range(4)]
    sources.append(np.full(8, 0xFE, np.uint8))
    bases = exclusive_cumsum(np.array([len(s) for s in sources]))
    starts, lengths = [], []
    for index, source in enumerate(sources):
        uniform = seed % 2 == 0 or index == len(sources) - 1
        if uniform:
            length = int(rng.integers(0, max(len(source) // rows, 1) + 1)) if index < len(sources) - 1 else 3
            length = min(length, len(source) // rows) if rows else length
            step = 0 if index == len(sources) - 1 else length
            column_starts = bases[index] + step * np.arange(rows)
            column_lengths = np.full(rows, length)
            column_lengths[-1] = int(rng.integers(0, length + 1))
        else:
            column_lengths = rng.integers(0, max(len(source) // (rows + 1), 1), rows)
            column_starts = bases[index] + rng.integers(0, max(len(source) - int(column_lengths.max()), 0) + 1, rows)
        starts.append(np.asarray(column_starts, dtype=np.int64))
        lengths.append(np.asarray(column_lengths, dtype=np.int64))
    expected = take_ranges(np.concatenate(sources), np.stack(starts, axis=1).reshape(-1),
                           np.stack(lengths, axis=1).reshape(-1))
    assert np.array_equal(take_interleaved(sources, starts, lengths), expected)


@pytest.mark.parametrize("seed", range(8))
def test_take_interleaved_runs_across_sources(seed):
    """Uniform columns whose ranges run on from one source into the next (a page's values in pieces)."""
    rng = np.random.default_rng(100 + seed)
    rows = int(rng.integers(2, 60))
    header = rng.integers(0, 256, rows * 5, dtype=np.uint8)
    length = int(rng.integers(1, 40))
    values = rng.integers(0, 256, rows * length, dtype=np.uint8)
    cuts = np.sort(rng.choice(np.arange(1, len(values)), int(rng.integers(1, 6)), replace=False))
    pieces = [piece for piece in np.split(values, cuts)]
    if seed % 2:
        pieces.insert(1, np.zeros(0, np.uint8))  # an empty piece in between
    sources = [header, *pieces, np.full(8, 0xFE, np.uint8)]
    bases = exclusive_cumsum(np.array([len(s) for s in sources]))
    last_length = int(rng.integers(0, length + 1))
    starts = [bases[0] + 5 * np.arange(rows), bases[1] + length * np.arange(rows), np.full(rows, bases[-2])]
    lengths = [np.full(rows, 5), np.full(rows, length), np.full(rows, 3)]
    lengths[1][-1] = last_length
    starts, lengths = [np.asarray(a, np.int64) for a in starts], [np.asarray(a, np.int64) for a in lengths]
    expected = take_ranges(np.concatenate(sources), np.stack(starts, axis=1).reshape(-1),
                           np.stack(lengths, axis=1).reshape(-1))
    assert np.array_equal(take_interleaved(sources, starts, lengths), expected)


def _chunked(array: pa.Array, rng: np.random.Generator) -> pa.ChunkedArray:
    cuts = np.sort(rng.choice(np.arange(1, len(array)), 4, replace=False)).tolist()
    bounds = [0, *cuts, len(array)]
    return pa.chunked_array([array.slice(a, b - a) for a, b in zip(bounds[:-1], bounds[1:])], array.type)


@pytest.mark.parametrize("version", [(2, 1), (2, 2)])
@pytest.mark.parametrize("dtype", [pa.float32(), pa.float64(), pa.int64(), pa.string(), pa.large_binary(),
                                   pa.list_(pa.float32(), 128), pa.list_(pa.float32(), 4), pa.list_(pa.int16(), 3)])
@pytest.mark.parametrize("in_list", [False, True])
def test_encode_page_of_chunks_matches_one_array(version, dtype, in_list):
    """Leaf values in several chunks (the writer's pending pieces) encode like their concatenation
    (vectors: full-zip for 128 floats, mini-block for the short ones)."""
    rng = np.random.default_rng(7)
    rows = 20_000
    if pa.types.is_fixed_size_list(dtype):
        items = pa.array(rng.standard_normal(rows * dtype.list_size) * 1000).cast(dtype.value_type, safe=False)
        values = pa.FixedSizeListArray.from_arrays(items, type=dtype)
    elif pa.types.is_floating(dtype):
        values = pa.array(rng.standard_normal(rows), dtype)
    elif pa.types.is_integer(dtype):
        values = pa.array(rng.integers(-(1 << 40), 1 << 40, rows), dtype)
    else:
        distinct = 10**6 if dtype == pa.string() else 8  # page dictionary or not
        values = pa.array([f"w{i}" * int(i % 5) for i in rng.integers(0, distinct, rows)], dtype)
    nodes = [NodeData(ITEM, rows, None)]
    if in_list:  # lists of 1+ items, some empty lists (half of them null)
        cuts = np.sort(rng.choice(np.arange(1, rows), rows // 4, replace=False))
        offsets = np.concatenate([[0], cuts, [rows]])
        offsets = np.sort(np.concatenate([offsets, rng.choice(offsets, 200)])).astype(np.int64)
        empty = np.diff(offsets) == 0
        valid = ~(empty & (rng.random(len(empty)) < 0.5))
        nodes = [NodeData(LIST, len(empty), valid, offsets), nodes[0]]
    whole = encode_page(nodes, values, nodes[0].length, version)
    pieces = encode_page(nodes, _chunked(values, rng), nodes[0].length, version)
    assert pieces.layout == whole.layout
    assert [b"".join(bytes(s) for s in b) for b in pieces.buffers] == [b"".join(bytes(s) for s in b)
                                                                        for b in whole.buffers]


def test_full_zip_vectors_are_written_from_their_chunks():
    """A page of vectors without levels is the chunks' own value buffers, not a copy."""
    rng = np.random.default_rng(3)
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(3000 * 128), pa.float32()), 128)
    chunks = _chunked(vectors, rng)
    page = encode_page([NodeData(ITEM, len(vectors), None)], chunks, len(vectors), (2, 2))
    assert page.layout.WhichOneof("layout") == "full_zip_layout"
    (segments,) = page.buffers
    items = [chunk.flatten() for chunk in chunks.chunks]
    assert [s.address for s in segments] == [i.buffers()[1].address + i.offset * 4 for i in items]


@pytest.mark.parametrize("bits", [8, 16, 32, 64])
def test_pack_blocks_matches_pack_per_block(bits):
    rng = np.random.default_rng(bits)
    dtype = np.dtype(f"<u{bits // 8}")
    for trial in range(12):
        blocks = int(rng.integers(1, 30))
        widths = np.zeros(blocks, np.int64) if trial == 0 else rng.integers(0, bits + 1, blocks)
        values = np.zeros((blocks, bitpack.BLOCK), dtype=dtype)
        for block, width in enumerate(widths.tolist()):
            if width:
                high = rng.integers(0, 1 << min(width - 1, 62), bitpack.BLOCK, dtype=np.uint64)
                values[block] = (high.astype(dtype) << dtype.type(max(width - 63, 0))) | dtype.type(1 << (width - 1))
        expected = [bitpack.pack(values[b: b + 1], int(w), bits).reshape(-1) for b, w in enumerate(widths)]
        assert np.array_equal(bitpack.pack_blocks(values, widths, bits), np.concatenate(expected))


@pytest.mark.parametrize("bits", [8, 16, 32])
def test_pack_ones_matches_pack(bits):
    rng = np.random.default_rng(bits)
    values = (rng.random((3, 1024)) < 0.1).astype(f"<u{bits // 8}")
    values[2] = 1
    packed = bitpack.pack_ones(np.flatnonzero(values), 3, bits)
    assert packed.dtype == np.dtype(f"<u{bits // 8}")
    assert np.array_equal(packed, bitpack.pack(values, 1, bits))


@pytest.mark.parametrize("counts", [[4], [3, 3, 2], [5, 5, 5, 1], [2, 4, 1]])
def test_chunk_offsets_match_reference(counts):
    rng = np.random.default_rng(len(counts))
    counts = np.array(counts, dtype=np.int64)
    offsets = exclusive_cumsum(rng.integers(0, 9, int(counts.sum())))
    first = exclusive_cumsum(counts)[:-1]
    header = (counts + 1) * 4
    expected = np.concatenate([offsets[f: f + c + 1] - offsets[f] + h for f, c, h in zip(first, counts, header)])
    assert np.array_equal(_chunk_offsets(offsets, first, counts, header, np.dtype("<u4")), expected)

"""The 2.1/2.2 codec on its own: FastLanes, FSST, rep/def levels, writer <-> reader round trips."""

from __future__ import annotations

import io
import sys
import pathlib

import numpy as np
import pyarrow as pa
import pytest

from airflow_lance.core._proto import encodings_v2_1_pb2 as pb
from airflow_lance.core.errors import CorruptFileError, UnsupportedFeatureError
from airflow_lance.core.file import LanceFileReader, LanceFileWriter
from airflow_lance.core.errors import InvalidInputError
from airflow_lance.core.file.v21 import bitpack, fsst, fsst_encode, kernels
from airflow_lance.core.file.v21.structure import (
    _DEF_COUNT, _LIST_LAYERS, ITEM, LIST, Level, NodeData, Structure, _visibility_table, layers_for, levels, max_rep,
    unravel)
from airflow_lance.core.file.v21.util import Ctx, exclusive_cumsum, take_ranges
from airflow_lance.core.schema import LanceSchema

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from v2x_tables import mixed_table  # noqa: E402

CTX = Ctx("mem.lance", "test")


# ----------------------------------------------------------------------------- FastLanes


def _reference_unpack(words: np.ndarray, width: int, bits: int) -> np.ndarray:
    """The FastLanes layout, one value at a time (slow reference)."""
    lanes = 1024 // bits
    out = np.zeros(1024, dtype=np.uint64)
    for lane in range(lanes):
        stream = 0
        for w in range(width):
            stream |= int(words[w * lanes + lane]) << (w * bits)
        for row in range(bits):
            index = bitpack.ORDER[row // 8] * 16 + (row % 8) * 128 + lane
            out[index] = (stream >> (row * width)) & ((1 << width) - 1)
    return out


@pytest.mark.parametrize("bits", [8, 16, 32, 64])
@pytest.mark.parametrize("width", [0, 1, 3, 7, 8])
def test_fastlanes_round_trip_matches_reference(bits, width, loops):
    if width > bits:
        return
    rng = np.random.default_rng(bits * 100 + width)
    dtype = np.dtype(f"<u{bits // 8}")
    values = (rng.integers(0, 2**width if width else 1, (3, 1024), dtype=np.uint64)).astype(dtype)
    packed = bitpack.pack(values, width, bits)
    assert packed.shape == (3, width * 1024 // bits)
    assert np.array_equal(bitpack.unpack(packed, width, bits), values)
    if width:
        assert np.array_equal(_reference_unpack(packed[1], width, bits), values[1].astype(np.uint64))


def test_fastlanes_full_width(loops):
    values = np.arange(1024, dtype=np.uint16).reshape(1, 1024) * 61
    assert np.array_equal(bitpack.unpack(bitpack.pack(values, 16, 16), 16, 16), values)


@pytest.mark.parametrize("bits", [32, 64])
def test_compiled_unpack_equals_numpy_for_every_width(bits, monkeypatch):
    """Every width 0..T of the word sizes the compiled unpack serves: it gives numpy's values
    (random words, so every bit of every lane is exercised, spills between words included)."""
    monkeypatch.setattr(kernels, "MIN_VALUES", 0)
    dtype = np.dtype(f"<u{bits // 8}")
    rng = np.random.default_rng(bits)
    for width in range(bits + 1):
        words = rng.integers(0, 2**bits, (5, width * 1024 // bits), dtype=np.uint64).astype(dtype)
        monkeypatch.setenv(kernels.ENV, "numpy")
        expected = bitpack.unpack(words, width, bits)
        monkeypatch.setenv(kernels.ENV, "numba")
        got = bitpack.unpack(words, width, bits)
        assert got.dtype == expected.dtype and np.array_equal(got, expected), width


def test_values_without_bytes_are_null():
    """A constant without a value (no bytes stored) reads as nulls, as pylance reads it: pylance 14's
    all-null vector items, and pylance 1.0.4-9.0.1's vectors of null items, which are valid vectors
    where their page gives them a validity. A value that is valid without bytes is a corrupt file."""
    from airflow_lance.core.file.v21.blocks import Fixed, to_arrow

    empty = Fixed(np.zeros(0, np.uint8), 0, 3)
    vectors = pa.list_(pa.float32(), 2)
    assert to_arrow(empty, pa.float32(), np.zeros(3, bool), CTX).equals(pa.nulls(3, pa.float32()))
    assert to_arrow(empty, pa.float32(), None, CTX).equals(pa.nulls(3, pa.float32()))
    assert to_arrow(empty, vectors, None, CTX).equals(pa.nulls(3, vectors))
    some_null = to_arrow(empty, vectors, np.array([True, False, True]), CTX)
    assert some_null.to_pylist() == [[None, None], None, [None, None]]
    assert to_arrow(Fixed(np.zeros(0, np.uint8), 0, 0), pa.float32(), None, CTX).equals(pa.array([], pa.float32()))
    with pytest.raises(CorruptFileError, match="0-bit values"):
        to_arrow(empty, pa.float32(), np.array([False, True, False]), CTX)


def test_a_byte_per_boolean():
    """pylance 7.1.0 wrote booleans of some full-zip pages a byte each: read as booleans, nulls kept."""
    from airflow_lance.core.file.v21.blocks import Fixed, to_arrow

    block = Fixed(np.array([0, 1, 1, 0, 1], np.uint8), 8, 5)
    got = to_arrow(block, pa.bool_(), np.array([True, True, False, True, True]), CTX)
    assert got.equals(pa.array([False, True, None, False, True]))
    with pytest.raises(CorruptFileError, match="value buffer too short"):
        to_arrow(Fixed(np.array([1], np.uint8), 8, 2), pa.bool_(), None, CTX)


def test_dictionary_take_of_strings_checks_indices(loops):
    """Dictionary-encoded strings: an index past the dictionary is a CorruptFileError (the compiled
    loop would read out of bounds); a null slot's index is never looked at."""
    from airflow_lance.core.file.v21 import read
    from airflow_lance.core.file.v21.blocks import Fixed, Variable

    dictionary = Variable(np.array([0, 1, 3]), np.frombuffer(b"abc", dtype=np.uint8), 2)
    indices = Fixed(np.array([1, 0, 9], dtype=np.uint8), 8, 3)
    got = read._dictionary_take(CTX, dictionary, indices, 3, np.array([True, True, False]), pa.string())
    assert got.equals(pa.array(["bc", "a", None], pa.string()))
    with pytest.raises(CorruptFileError, match="dictionary index out of range"):
        read._dictionary_take(CTX, dictionary, indices, 3, None, pa.string())


def test_kernel_mode_setting(monkeypatch):
    """``AIRFLOW_LANCE_KERNELS``: a typo is an error, not the default; ``numba`` without numba is an
    error; small inputs never load the kernels."""
    monkeypatch.setenv(kernels.ENV, "fast")
    with pytest.raises(InvalidInputError, match="AIRFLOW_LANCE_KERNELS='fast'"):
        kernels.compiled(1 << 20)
    monkeypatch.setenv(kernels.ENV, "numpy")
    assert kernels.compiled(1 << 20) is None
    monkeypatch.setenv(kernels.ENV, "numba")
    loaded = kernels.compiled(1 << 20)
    assert loaded is not None
    assert kernels.compiled(kernels.MIN_VALUES - 1) is None
    monkeypatch.setattr(kernels, "_LOADED", [])  # not loaded yet: only an input that asks loads them
    assert kernels.compiled(1 << 20, load=False) is None and kernels._LOADED == []
    assert kernels.compiled(1 << 20) is loaded and kernels.compiled(1 << 20, load=False) is loaded
    monkeypatch.setattr(kernels, "_SHIPPED_IN_ZIP", True)  # a Spark job's code zip: no lasting cache
    assert kernels.compiled(1 << 20) is not None
    monkeypatch.setenv(kernels.ENV, "auto")
    assert kernels.compiled(1 << 20) is None
    monkeypatch.setattr(kernels, "_SHIPPED_IN_ZIP", False)
    assert kernels.compiled(1 << 20) is not None
    monkeypatch.setenv(kernels.ENV, "numba")
    monkeypatch.setattr(kernels, "_LOADED", [(None, "numba is not installed (test)")])  # as without the fast extra
    with pytest.raises(InvalidInputError, match="numba is not installed"):
        kernels.compiled(1 << 20)
    monkeypatch.setenv(kernels.ENV, "auto")
    assert kernels.compiled(1 << 20) is None


# ----------------------------------------------------------------------------- FSST


def _table(symbols: list[bytes]) -> bytes:
    header = (0x46535354 << 32) | (1 << 24) | len(symbols)
    body = b"".join(s.ljust(8, b"\0") for s in symbols) + bytes(len(s) for s in symbols)
    return (header.to_bytes(8, "little") + body).ljust(fsst.TABLE_SIZE, b"\0")


def test_fsst_decodes_symbols_escapes_and_string_boundaries(loops):
    table = _table([b"hello", b" ", b"world!!!", b"\xff"])
    # "hello world!!!" | "" | escape 0xFF (literal 255) + code 3 (0xFF symbol) + escape 'z' | "hello"
    codes = np.array([0, 1, 2, 255, 255, 3, 255, ord("z"), 0], dtype=np.uint8)
    offsets = np.array([0, 3, 3, 8, 9])
    data, out_offsets = fsst.decode(CTX, table, codes, offsets)
    strings = [bytes(data[a:b]) for a, b in zip(out_offsets[:-1], out_offsets[1:])]
    assert strings == [b"hello world!!!", b"", b"\xff\xffz", b"hello"]


def test_fsst_switch_off_is_stored_data():
    data = np.frombuffer(b"abc", dtype=np.uint8)
    out, offsets = fsst.decode(CTX, fsst.stored_table(), data, np.array([0, 1, 3]))
    assert bytes(out) == b"abc" and list(offsets) == [0, 1, 3]


def _fsst_reference(symbols: list[bytes], codes: np.ndarray, offsets: np.ndarray) -> list[bytes]:
    """Per-code decoding (the definition): code < 255 is a symbol, 255 escapes the next byte."""
    out = []
    for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
        piece, i = bytearray(), a
        while i < b:
            if codes[i] == 255:
                piece.append(int(codes[i + 1]))
                i += 2
            else:
                piece += symbols[codes[i]]
                i += 1
        out.append(bytes(piece))
    return out


@pytest.mark.parametrize("count, escapes, odd", [(255, False, False), (255, False, True), (40, False, True),
                                                 (40, True, False), (40, True, True)])
def test_fsst_pair_path_matches_per_code_decoding(count, escapes, odd, loops):
    """Enough codes for the pair table (odd and even totals, with and without escape runs)."""
    rng = np.random.default_rng(count + 2 * escapes + odd)
    symbols = [bytes(rng.integers(0, 256, int(rng.integers(1, 9)), dtype=np.uint8)) for _ in range(count)]
    lengths = rng.integers(0, 50, 3000)
    lengths[-1] += (int(lengths.sum()) % 2 == 1) != odd  # the parity of the total asked for
    plain = rng.integers(0, count, int(lengths.sum())).astype(np.int16)
    escaped = rng.random(len(plain)) < (0.1 if escapes else 0)  # these codes become [255, literal]
    literal = rng.choice(np.array([255, 7, 0], np.int16), len(plain))
    pairs = np.stack([np.where(escaped, 255, plain), np.where(escaped, literal, -1)], axis=1).reshape(-1)
    codes = pairs[pairs >= 0].astype(np.uint8)
    offsets = exclusive_cumsum(1 + escaped)[exclusive_cumsum(lengths)]  # each string's first code
    if escapes:  # escapes make the total odd or even at random: fix it with one more code
        if (len(codes) % 2 == 1) != odd:
            codes, offsets = np.append(codes, np.uint8(1)), np.append(offsets, offsets[-1] + 1)
    assert len(codes) > fsst._SMALL and (len(codes) % 2 == 1) == odd
    data, out_offsets = fsst.decode(CTX, _table(symbols), codes, offsets)
    got = [bytes(data[a:b]) for a, b in zip(out_offsets[:-1].tolist(), out_offsets[1:].tolist())]
    assert got == _fsst_reference(symbols, codes, offsets)


@pytest.mark.parametrize("escapes", [False, True])
def test_compiled_fsst_equals_numpy_on_inner_offsets(escapes, monkeypatch):
    """Offsets that start after the first code and end before the last (a selection of strings):
    the compiled decoder returns numpy's bytes and offsets."""
    monkeypatch.setattr(kernels, "MIN_VALUES", 0)
    rng = np.random.default_rng(11 + escapes)
    symbols = [bytes(rng.integers(0, 256, int(rng.integers(1, 9)), dtype=np.uint8)) for _ in range(200)]
    per_string = [rng.integers(0, 200, int(rng.integers(0, 30))).astype(np.uint8) for _ in range(5000)]
    if escapes:
        per_string = [np.concatenate([c, np.array([255, rng.integers(0, 256)], np.uint8)]) if i % 3 == 0 else c
                      for i, c in enumerate(per_string)]
    codes = np.concatenate(per_string)
    offsets = exclusive_cumsum(np.array([len(c) for c in per_string]))[7:-9]
    results = []
    for mode in ("numpy", "numba"):
        monkeypatch.setenv(kernels.ENV, mode)
        results.append(fsst.decode(CTX, _table(symbols), codes, offsets))
    (data, bounds), (got_data, got_bounds) = results
    assert np.array_equal(bounds, got_bounds)
    assert np.array_equal(data, got_data)


@pytest.mark.parametrize("escapes", [False, True])
def test_fsst_strings_decoded_in_place_of_a_page(escapes, loops):
    """``decode_ranges``: strings whose codes lie in a page with gaps between chunks (offset tables,
    padding) decode to the per-code reference, offsets from 0."""
    rng = np.random.default_rng(21 + escapes)
    symbols = [bytes(rng.integers(0, 256, int(rng.integers(1, 9)), dtype=np.uint8)) for _ in range(120)]
    page, begins, ends, strings = bytearray(), [], [], []
    for i in range(4000):
        if i % 100 == 0:
            page += bytes(rng.integers(0, 256, int(rng.integers(0, 40)), dtype=np.uint8))  # a gap
        codes = rng.integers(0, 120, int(rng.integers(0, 30))).astype(np.uint8)
        if escapes and i % 4 == 0:
            codes = np.concatenate([codes, np.array([255, rng.integers(0, 256)], np.uint8)])
        begins.append(len(page))
        page += codes.tobytes()
        ends.append(len(page))
        strings.append(_fsst_reference(symbols, codes, np.array([0, len(codes)]))[0])
    src = np.frombuffer(bytes(page), dtype=np.uint8)
    data, offsets = fsst.decode_ranges(CTX, _table(symbols), src, np.array(begins), np.array(ends))
    assert offsets[0] == 0 and len(offsets) == len(strings) + 1
    assert [bytes(data[a:b]) for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())] == strings


@pytest.mark.parametrize("case", ["trailing escape", "code outside", "outside the page"])
def test_fsst_strings_in_place_reject_bad_codes(case, monkeypatch):
    """The compiled in-place decoder checks every string before writing: a string ending in an
    escape, a code past the symbol table, a range past the page are CorruptFileError."""
    monkeypatch.setenv(kernels.ENV, "numba")
    monkeypatch.setattr(kernels, "MIN_VALUES", 0)
    src = np.array([0, 0, 255, 0, 0], dtype=np.uint8)
    begins, ends = {"trailing escape": ([0, 3], [3, 5]), "code outside": ([0, 3], [3, 5]),
                    "outside the page": ([0, 3], [3, 6])}[case]
    symbols = [b"a"] if case == "code outside" else [b"a"] * 3
    if case == "code outside":
        src = np.array([0, 0, 7, 0, 0], dtype=np.uint8)
    with pytest.raises(CorruptFileError):
        fsst.decode_ranges(CTX, _table(symbols), src, np.array(begins), np.array(ends))


def _fsst_cases() -> dict[str, list[bytes]]:
    rng = np.random.default_rng(5)
    words = [b"alpha", b"beta", b"gamma ", b"delta", b"\xff\xff", b"\x00"]
    text = [b"".join(words[i] for i in rng.integers(0, len(words), int(rng.integers(0, 12)))) for _ in range(3000)]
    return {
        # empty strings, strings longer than a parse segment, 0xFF and 0x00 bytes
        "words": text + [b"", b"alpha" * 60, b"\xff" * 7, b"z"],
        "random": [bytes(rng.integers(0, 256, int(rng.integers(0, 40)), dtype=np.uint8)) for _ in range(2000)],
        "tiny": [b"ab", b"", b"abab"],
    }


@pytest.mark.parametrize("case", ["words", "random", "tiny"])
def test_fsst_encoder_round_trip(case, loops):
    """Our FSST encoder's codes decode (ours) to the strings; text shrinks, every symbol is 1-8 bytes."""
    strings = _fsst_cases()[case]
    data = np.frombuffer(b"".join(strings), dtype=np.uint8)
    offsets = exclusive_cumsum(np.array([len(s) for s in strings], dtype=np.int64))
    table = fsst_encode.train(data, offsets)
    assert len(table.values) <= 255 and bool(np.all((table.lengths >= 1) & (table.lengths <= 8)))
    codes, code_offsets = fsst_encode.compress(table, data, offsets)
    out, out_offsets = fsst.decode(CTX, table.export(), codes, code_offsets)
    assert [bytes(out[a:b]) for a, b in zip(out_offsets[:-1].tolist(), out_offsets[1:].tolist())] == strings
    # a suffix of the strings compresses alone to the same codes
    tail, tail_offsets = fsst_encode.compress(table, data, offsets[len(strings) // 2:])
    assert np.array_equal(tail, codes[code_offsets[len(strings) // 2]:])
    if case == "words":
        assert len(codes) < 0.5 * len(data)


@pytest.mark.parametrize("codes", [[255], [7], [0, 255]])
def test_fsst_rejects_bad_codes(codes, loops):
    with pytest.raises(CorruptFileError):
        fsst.decode(CTX, _table([b"a"]), np.array(codes, dtype=np.uint8), np.array([0, len(codes)]))


def test_take_ranges_short_and_long():
    source = np.arange(1000, dtype=np.uint8)
    for length in (1, 3, 200):
        starts = np.array([5, 100, 700])
        lengths = np.full(3, length)
        expected = np.concatenate([source[s:s + length] for s in starts])
        assert np.array_equal(take_ranges(source, starts, lengths), expected)


@pytest.mark.parametrize(("starts", "lengths"), [([0, 900], [100, 200]), ([-1, 5], [3, 3]), ([990], [20]),
                                                 ([0, 10], [5, -1])])
def test_take_ranges_out_of_bounds(starts, lengths):
    """A range past the source (a corrupt file's offsets) is an IndexError on every path, never bytes read
    from beyond the buffer (pyarrow's list-view flatten does not check) or a silently short result."""
    with pytest.raises(IndexError, match="outside the 1000 values|negative length"):
        take_ranges(np.arange(1000, dtype=np.uint8), np.array(starts), np.array(lengths))
    # an empty range may start anywhere (a null's value slot past the end of a page)
    got = take_ranges(np.arange(1000, dtype=np.uint8), np.array([998, 5000, -3]), np.array([2, 0, 0]))
    assert got.tolist() == [230, 231]


# ----------------------------------------------------------------------------- rep/def levels


def _nodes(array: pa.Array) -> tuple[list[NodeData], pa.Array]:
    """Node data of a chain of lists/structs (first child) down to the leaf."""
    nodes = []
    while True:
        valid = None if not array.null_count else np.asarray(array.is_valid().to_numpy(zero_copy_only=False))
        if pa.types.is_list(array.type):
            offsets = np.asarray(array.offsets.to_numpy(), dtype=np.int64)
            nodes.append(NodeData(LIST, len(array), valid, offsets - offsets[0]))
            array = array.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
        elif pa.types.is_struct(array.type):
            nodes.append(NodeData(ITEM, len(array), valid))
            array = array.field(0)
        else:
            nodes.append(NodeData(ITEM, len(array), valid))
            return nodes, array


@pytest.mark.parametrize("value", [
    pa.array([[1, 2], [], None, [None, 4]], pa.list_(pa.int32())),
    pa.array([[[1], [], None], None, [], [[None, 2]]], pa.list_(pa.list_(pa.int32()))),
    pa.array([{"a": [1, None]}, None, {"a": None}, {"a": []}], pa.struct([("a", pa.list_(pa.int32()))])),
    pa.array([[{"a": 1}], [None], None, [{"a": None}]], pa.list_(pa.struct([("a", pa.int32())]))),
    pa.array([{"a": {"b": 1}}, {"a": None}, None, {"a": {"b": None}}],
             pa.struct([("a", pa.struct([("b", pa.int32())]))])),
])
def test_levels_round_trip(value):
    nodes, leaf = _nodes(value)
    layers = layers_for(nodes)
    rep, defs, slots = levels(nodes, layers)
    entries = len(slots) if slots is not None else len(leaf)
    structure = unravel(CTX, rep, defs, layers, entries)
    top, level = nodes[0], structure.levels[0]
    assert level.length == len(value)
    valid = np.ones(len(value), bool) if top.valid is None else top.valid
    assert np.array_equal(np.ones(len(value), bool) if level.validity is None else level.validity, valid)
    if top.kind == LIST:
        assert np.array_equal(np.diff(level.offsets)[valid], np.diff(top.offsets)[valid])
    # levels rebuilt from the unravelled layers are the same levels
    rebuilt = [NodeData(node.kind, lv.length, lv.validity, lv.offsets) for node, lv in zip(nodes, structure.levels)]
    again = levels(rebuilt, layers)
    for first, second in zip((rep, defs), again[:2]):
        assert (first is None and second is None) or np.array_equal(first, second)


def test_layer_choice():
    offsets = np.array([0, 2, 2, 3])
    valid = np.array([True, True, False])
    assert layers_for([NodeData(LIST, 3, valid, offsets), NodeData(ITEM, 3, None)]) == [
        pb.REPDEF_ALL_VALID_ITEM, pb.REPDEF_NULL_AND_EMPTY_LIST]
    assert layers_for([NodeData(LIST, 3, None, np.array([0, 1, 2, 3])), NodeData(ITEM, 3, None)]) == [
        pb.REPDEF_ALL_VALID_ITEM, pb.REPDEF_ALL_VALID_LIST]


def test_unravel_rejects_bad_levels():
    layers = [pb.REPDEF_NULLABLE_ITEM, pb.REPDEF_NULLABLE_LIST]
    with pytest.raises(CorruptFileError):
        unravel(CTX, np.array([0, 1], np.uint16), np.array([0, 0], np.uint16), layers, 2)  # row must start at max rep
    with pytest.raises(CorruptFileError):
        unravel(CTX, np.array([1, 1], np.uint16), np.array([0, 9], np.uint16), layers, 2)  # def out of range
    with pytest.raises(CorruptFileError):
        unravel(CTX, None, np.array([0, 0], np.uint16), layers, 2)  # lists without rep


# The unravel implementation before its u16/threshold rewrite, kept as the oracle of the fast one.
def _unravel_reference(
    ctx: Ctx, rep: np.ndarray | None, defs: np.ndarray | None, layers: list[int], n_entries: int
) -> Structure:
    """The per-entry implementation unravel had before it compared thresholds in u16 (the oracle)."""
    depth = len(layers)
    top_rep = max_rep(layers)
    if rep is not None and len(rep) != n_entries or defs is not None and len(defs) != n_entries:
        raise ctx.corrupt("repetition and definition levels differ in length")
    if top_rep and rep is None and n_entries:
        raise ctx.corrupt("list layers without repetition levels")
    if rep is not None:
        if top_rep == 0:
            raise ctx.corrupt("repetition levels without list layers")
        if n_entries and (int(rep[0]) != top_rep or int(rep.max()) > top_rep):
            raise ctx.corrupt("repetition levels out of range")
    visibility = _visibility_table(layers)
    if defs is not None and n_entries and int(defs.max()) >= len(visibility):
        raise ctx.corrupt(f"definition level {int(defs.max())} out of range")
    if rep is None and defs is None:
        return Structure([Level(n_entries, None) for _ in range(depth)], n_entries, None)
    if rep is None:
        # no lists: every entry is a slot of every layer, a layer is valid below its own null level
        def_base = np.cumsum([0] + [_DEF_COUNT[layer] for layer in layers])
        out = []
        for j in range(depth - 1, -1, -1):
            valid = defs <= def_base[j]
            out.append(Level(n_entries, None if bool(valid.all()) else valid))
        return Structure(out, n_entries, out[-1].validity)
    defs_i = defs.astype(np.int64) if defs is not None else None
    vis_layer = visibility[defs_i] if defs_i is not None else None
    rep_i = rep.astype(np.int64) if rep is not None else None
    def_base = np.concatenate(([0], np.cumsum([_DEF_COUNT[layer] for layer in layers])))
    lists_inside = np.cumsum([layer in _LIST_LAYERS for layer in layers])

    def starts_at(j: int) -> np.ndarray:
        mask = np.ones(n_entries, dtype=bool) if vis_layer is None else vis_layer <= j
        if rep_i is not None and lists_inside[j]:
            mask &= rep_i >= lists_inside[j]
        return mask

    out: list[Level] = []
    child_starts = None
    for j in range(depth - 1, -1, -1):
        starts = child_starts if child_starts is not None else starts_at(j)
        positions = np.flatnonzero(starts)
        layer = layers[j]
        validity = None
        if defs_i is not None:
            slot_def = defs_i[positions]
            valid = slot_def <= def_base[j]
            if layer in (pb.REPDEF_EMPTYABLE_LIST, pb.REPDEF_NULL_AND_EMPTY_LIST):
                valid |= slot_def == def_base[j] + _DEF_COUNT[layer]
            validity = None if bool(valid.all()) else valid
        offsets = None
        child_starts = starts_at(j - 1) if j > 0 else None
        if layer in _LIST_LAYERS:
            if j == 0:
                raise ctx.corrupt("a list layer cannot be the leaf")
            counted = exclusive_cumsum(child_starts)
            offsets = np.empty(len(positions) + 1, dtype=np.int64)
            offsets[:-1] = counted[positions]
            offsets[-1] = counted[-1]
        out.append(Level(len(positions), validity, offsets))
    leaf = out[-1]
    leaf_valid = None
    if defs_i is not None:
        leaf_positions = np.flatnonzero(starts_at(0))
        leaf_valid = defs_i[leaf_positions] == 0
        if bool(leaf_valid.all()):
            leaf_valid = None
    return Structure(out, leaf.length, leaf_valid)


def _random_levels(rng, layers, rows):
    """Levels of ``rows`` random rows for ``layers`` via the writer (nodes drawn at random)."""
    kinds = [LIST if layer in _LIST_LAYERS else ITEM for layer in reversed(layers)]
    nodes, length = [], rows
    for kind in kinds:
        valid = rng.random(length) > 0.2
        if kind == LIST:
            sizes = rng.integers(0, 4, length) * valid
            offsets = exclusive_cumsum(sizes)
            nodes.append(NodeData(LIST, length, valid, offsets))
            length = int(offsets[-1])
        else:
            nodes.append(NodeData(ITEM, length, valid))
    layers = layers_for(nodes)
    rep, defs, slots = levels(nodes, layers)
    entries = len(slots) if slots is not None else nodes[-1].length
    return rep, defs, layers, entries


@pytest.mark.parametrize("shape", [[ITEM], [LIST, ITEM], [ITEM, LIST, ITEM], [LIST, LIST, ITEM],
                                   [LIST, ITEM, LIST, ITEM]])
def test_unravel_matches_reference(shape):
    rng = np.random.default_rng(len(shape))
    layers = [pb.REPDEF_NULLABLE_ITEM if kind == ITEM else pb.REPDEF_NULL_AND_EMPTY_LIST for kind in reversed(shape)]
    for rows in (0, 1, 7, 500):
        rep, defs, chosen, entries = _random_levels(rng, layers, rows)
        cases = [(rep, defs)]
        if defs is not None:  # also with no nulls and no empty lists at all (entries without gaps)
            cases.append((rep, np.zeros_like(defs)))
        for r, d in cases:
            got = unravel(CTX, r, d, chosen, entries)
            want = _unravel_reference(CTX, r, d, chosen, entries)
            assert got.leaf_count == want.leaf_count
            for x, y in [(got.leaf_valid, want.leaf_valid)] + [
                    (a.validity, b.validity) for a, b in zip(got.levels, want.levels)] + [
                    (a.offsets, b.offsets) for a, b in zip(got.levels, want.levels)]:
                assert (x is None and y is None) or np.array_equal(x, y)
            assert [lv.length for lv in got.levels] == [lv.length for lv in want.levels]


# ----------------------------------------------------------------------------- writer <-> reader


def _round_trip(table: pa.Table, version: str, **kwargs) -> tuple[pa.Table, bytes, LanceFileWriter]:
    schema = LanceSchema.from_arrow(table.schema)
    sink = io.BytesIO()
    writer = LanceFileWriter(sink, schema, version=version, **kwargs)
    for batch in table.to_batches(max_chunksize=997):
        writer.write_batch(batch)
    writer.finish()
    data = sink.getvalue()
    mapping = dict(zip(writer.field_ids, writer.column_indices))
    back = LanceFileReader(pa.BufferReader(data), path="mem.lance").read(schema, column_index=mapping)
    return back, data, writer


@pytest.fixture(scope="module")
def table() -> pa.Table:
    return mixed_table(3000)


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_round_trip_every_shape(table, version):
    back, data, writer = _round_trip(table, version)
    assert back.equals(table)
    assert data[-8:-4] == bytes([2, 0, int(version[-1]), 0])
    assert writer.file_version == (2, int(version[-1]))
    # only leaves have columns
    schema = LanceSchema.from_arrow(table.schema)
    leaves = [f.id for f in schema.fields if not schema.children(f.id)]
    assert writer.field_ids == leaves and writer.column_indices == list(range(len(leaves)))


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_round_trip_small_pages(table, version):
    back, _, _ = _round_trip(table, version, max_page_bytes=2000)
    assert back.equals(table)


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_pages_hold_max_page_bytes_of_leaf_values(version):
    """A leaf column's page holds about ``max_page_bytes`` of Arrow value bytes, as pylance's pages do:
    10k-row batches of 128-float lists (5.12 MB each) make pages of 8 MiB, not of half that."""
    rows, dim, limit = 100_000, 128, 8 * 1024 * 1024
    values = pa.array(np.arange(rows * dim, dtype=np.float32))
    table = pa.table({"embedding": pa.ListArray.from_arrays(pa.array(np.arange(0, rows * dim + 1, dim, dtype=np.int32)),
                                                             values)})
    schema = LanceSchema.from_arrow(table.schema)
    sink = io.BytesIO()
    writer = LanceFileWriter(sink, schema, version=version, max_page_bytes=limit)
    for batch in table.to_batches(max_chunksize=10_000):
        writer.write_batch(batch)
    writer.finish()
    reader = LanceFileReader(pa.BufferReader(sink.getvalue()), path="mem.lance")
    page_rows = [page.length for page in reader.column_metadata(0).pages]
    assert sum(page_rows) == rows
    value_bytes = [n * dim * 4 for n in page_rows]
    assert all(limit - dim * 4 <= size <= limit for size in value_bytes[:-1]), value_bytes
    assert len(page_rows) == -(-rows * dim * 4 // limit)
    mapping = dict(zip(writer.field_ids, writer.column_indices))
    assert reader.read(schema, column_index=mapping).equals(table)


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_default_column_index_of_our_files(table, version):
    small = table.select(["struct", "list_struct", "str_low", "vec8"])
    _, data, _ = _round_trip(small, version)
    assert LanceFileReader(pa.BufferReader(data), path="mem.lance").read().equals(small)


def test_struct_nulls_need_2_1():
    table = pa.table({"s": pa.array([{"a": 1}, None], pa.struct([("a", pa.int8())]))})
    with pytest.raises(UnsupportedFeatureError):
        _round_trip(table, "2.0")
    assert _round_trip(table, "2.1")[0].equals(table)


def test_unwritable_types_are_refused():
    table = pa.table({"f": pa.array([[{"a": 1}]], pa.list_(pa.struct([("a", pa.int8())]), 1))})
    with pytest.raises(UnsupportedFeatureError):
        _round_trip(table, "2.2")


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_long_lists_and_huge_values(version):
    rng = np.random.default_rng(3)
    table = pa.table({
        "long_list": pa.array([list(range(70_000)), [], None], pa.list_(pa.int32())),
        "huge": pa.array([rng.bytes(100_000), b"", None], pa.binary()),
        "bools": pa.array([[True] * 10, [], [False]], pa.list_(pa.bool_())),
    })
    assert _round_trip(table, version)[0].equals(table)


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_encodings_we_write(table, version):
    """Layouts and compressions our writer picks (see v21.write)."""
    from airflow_lance.core.file.v21.pages import parse_layout

    _, data, writer = _round_trip(table, version)
    reader = LanceFileReader(pa.BufferReader(data), path="mem.lance")
    schema = LanceSchema.from_arrow(table.schema)
    seen: dict[str, set[str]] = {}
    for field_id, column in zip(writer.field_ids, writer.column_indices):
        for page in reader.column_metadata(column).pages:
            layout = parse_layout(CTX, page.encoding)
            which = layout.WhichOneof("layout")
            names = {which}
            if which == "mini_block_layout":
                names.add(layout.mini_block_layout.value_compression.WhichOneof("compression"))
                if layout.mini_block_layout.HasField("dictionary"):
                    names.add("dictionary")
            seen.setdefault(schema.field(field_id).name, set()).update(names)
    assert seen["sorted_i64"] == {"mini_block_layout", "inline_bitpacking"}
    assert seen["f32"] == {"mini_block_layout", "flat"}
    assert seen["str_low"] >= {"mini_block_layout", "dictionary"}
    # 2.2: zstd-compressed chunks of strings (``general`` around ``variable``)
    assert seen["str_high"] == {"mini_block_layout", "variable" if version == "2.1" else "general"}
    assert seen["long_str"] == {"full_zip_layout"}
    assert seen["vec128"] == {"full_zip_layout"}
    assert seen["vec8"] == {"mini_block_layout", "fixed_size_list"}
    assert seen["null"] == seen["all_null_i32"] == {"constant_layout"}


#: A table of the usual shapes (ids, text, nullable numbers, tag lists, an embedding), large enough that
#: every column's pages pass the compiled loops' minimum size.
_USUAL_TABLE = """
import numpy as np, pyarrow as pa
rng = np.random.default_rng(5)
n = 200_000
lengths = rng.integers(20, 81, n)
offsets = np.zeros(n + 1, dtype=np.int32)
np.cumsum(lengths, out=offsets[1:])
letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz ", dtype=np.uint8)
text = pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(letters[rng.integers(0, 27, offsets[-1])]))
counts = rng.integers(0, 4, n)
tag_offsets = np.zeros(n + 1, dtype=np.int32)
np.cumsum(counts, out=tag_offsets[1:])
tags = pa.array([f"tag_{i:02d}" for i in range(50)]).take(pa.array(rng.integers(0, 50, int(tag_offsets[-1]))))
table = pa.table({
    "id": pa.array(np.arange(n, dtype=np.int64)),
    "text": text,
    "score": pa.array(rng.normal(50, 10, n), mask=rng.random(n) < 0.05),
    "tags": pa.ListArray.from_arrays(pa.array(tag_offsets), tags),
    "embedding": pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(n * 16, dtype=np.float32)), 16),
})
"""


def test_writing_never_loads_the_compiled_loops(tmp_path):
    """The writer's gathers of such a table are long ranges (string and mini-block chunks), which
    pyarrow copies faster than the compiled loop: a process that only writes 2.1/2.2 files (an
    Airflow task) does not pay for loading numba (about 0.8 s of CPU on the test machine).
    Checked in a fresh interpreter with the compiled loops allowed (``auto``, the ``fast`` extra
    installed); the files read back as the table."""
    import os
    import subprocess

    pytest.importorskip("numba")
    script = _USUAL_TABLE + (
        "import sys\n"
        "import airflow_lance.core as lance\n"
        "for version in ('2.1', '2.2'):\n"
        "    lance.write_dataset(table, sys.argv[1] + '/' + version, data_storage_version=version)\n"
        "print(sorted(m for m in sys.modules if m == 'numba' or m.endswith('_numba_kernels')))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "AIRFLOW_LANCE_KERNELS"}
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, env=env,
                         check=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout
    from airflow_lance.core import dataset

    namespace: dict = {}
    exec(_USUAL_TABLE, namespace)  # noqa: S102 - the test's own table code
    for version in ("2.1", "2.2"):
        assert dataset(str(tmp_path / version)).to_table().equals(namespace["table"])


def _chunks(parts: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    data = b"".join(parts)
    sizes = np.array([len(p) for p in parts], dtype=np.int64)
    return np.frombuffer(data, dtype=np.uint8), exclusive_cumsum(sizes)[:-1], sizes


def test_decompress_chunks_equals_one_by_one():
    """Chunk buffers decompressed into one array equal each buffer decompressed alone: zstd with its
    size prefix (the direct path, empty chunks included), bare zstd frames and lz4 (one by one)."""
    from airflow_lance.core.file.v21.util import compress_lz4, compress_zstd, decompress, decompress_chunks

    rng = np.random.default_rng(3)
    texts = [bytes(rng.integers(97, 123, int(n), dtype=np.uint8)) for n in rng.integers(0, 5000, 40)]
    texts[3] = b""
    bare = [compress_zstd(t)[8:] for t in texts if t]  # frames whose header records their size
    for scheme, parts in ((pb.COMPRESSION_ALGORITHM_ZSTD, [compress_zstd(t) for t in texts]),
                          (pb.COMPRESSION_ALGORITHM_ZSTD, bare),
                          (pb.COMPRESSION_ALGORITHM_LZ4, [compress_lz4(t) for t in texts])):
        src, starts, sizes = _chunks(parts)
        data, out_sizes = decompress_chunks(CTX, scheme, src, starts, sizes)
        expected = [bytes(decompress(CTX, scheme, p)) for p in parts]
        assert data.tobytes() == b"".join(expected)
        assert out_sizes.tolist() == [len(e) for e in expected]


@pytest.mark.parametrize("damage", ["truncated", "size too large", "size too small", "garbage", "implausible"])
def test_decompress_chunks_refuses_damaged_zstd(damage):
    """A damaged zstd chunk is a CorruptFileError naming the page, never a short or padded result."""
    import struct

    from airflow_lance.core.file.v21.util import compress_zstd, decompress_chunks

    good = compress_zstd(b"the quick brown fox " * 200)
    size, frame = struct.unpack_from("<Q", good)[0], good[8:]
    bad = {"truncated": good[:-5],
           "size too large": struct.pack("<Q", size + 1) + frame,
           "size too small": struct.pack("<Q", size - 1) + frame,
           "garbage": struct.pack("<Q", size) + bytes(len(frame)),
           "implausible": struct.pack("<Q", 1 << 40) + frame}[damage]
    src, starts, sizes = _chunks([good, bad, good])
    with pytest.raises(CorruptFileError, match="mem.lance"):
        decompress_chunks(CTX, pb.COMPRESSION_ALGORITHM_ZSTD, src, starts, sizes)

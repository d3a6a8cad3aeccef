"""Data file formats 2.1 / 2.2 / legacy 0.1 against pylance 14 (the oracle), in both directions."""

from __future__ import annotations

import pathlib
import struct
import sys
from collections.abc import Iterator
from typing import Any

import lance as pylance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from google.protobuf import any_pb2

import airflow_lance.core as ours
from airflow_lance.core._proto import encodings_v2_1_pb2 as pb
from airflow_lance.core._proto import file2_pb2, table_pb2
from airflow_lance.core.file import LanceFileWriter

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from v2x_tables import mixed_table  # noqa: E402

MIXED = mixed_table(4000)


def _rows(start: int, count: int) -> pa.Table:
    """A slice of MIXED with offset-0 arrays (pylance 14 panics writing some sliced nested structs)."""
    return MIXED.take(pa.array(np.arange(start, start + count)))


def _manifest(uri: str) -> table_pb2.Manifest:
    return ours.dataset(uri).manifest_file.manifest


def _decoded(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Dictionaries (at any depth) by value: pylance concatenates page dictionaries on read, and keeps
    a null entry in the dictionary of an all-null column."""
    plain = _without_dictionaries(column.type)
    return column if plain == column.type else column.cast(plain)


def _without_dictionaries(dtype: pa.DataType) -> pa.DataType:
    if pa.types.is_dictionary(dtype):
        return _without_dictionaries(dtype.value_type)
    if pa.types.is_struct(dtype):
        return pa.struct([f.with_type(_without_dictionaries(f.type)) for f in dtype])
    if pa.types.is_fixed_size_list(dtype):
        return pa.list_(dtype.value_field.with_type(_without_dictionaries(dtype.value_type)), dtype.list_size)
    if pa.types.is_large_list(dtype):
        return pa.large_list(dtype.value_field.with_type(_without_dictionaries(dtype.value_type)))
    if pa.types.is_list(dtype):
        return pa.list_(dtype.value_field.with_type(_without_dictionaries(dtype.value_type)))
    return dtype


def _columns_equal(mine: pa.Table, theirs: pa.Table) -> list[str]:
    assert mine.column_names == theirs.column_names
    return [name for name in mine.column_names
            if not _decoded(mine.column(name)).equals(_decoded(theirs.column(name)))]


def _data_file_versions(uri: str) -> set[tuple[int, int]]:
    return {(f.file_major_version, f.file_minor_version) for frag in _manifest(uri).fragments for f in frag.files}


# ----------------------------------------------------------------------------- we read pylance's files


@pytest.mark.parametrize("version", ["2.1", "2.2", "legacy"])
def test_we_read_every_type_pylance_writes(uri, version, loops):
    pylance.write_dataset(MIXED, uri, data_storage_version=version, max_rows_per_file=1500)
    theirs = pylance.dataset(uri).to_table()
    mine = ours.dataset(uri).to_table()
    assert _columns_equal(mine, theirs) == []
    if version != "legacy":
        assert mine.equals(MIXED)  # 2.1+ keep everything
    projected = ours.dataset(uri).to_table(columns=["list_struct", "str_low", "vec_null"])
    assert projected.equals(theirs.select(["list_struct", "str_low", "vec_null"]))


def test_legacy_reads_as_pylance_reads_it(uri):
    """Legacy files store no nulls for primitives/lists: we return what pylance returns."""
    table = pa.table({"i": pa.array([1, None, 3], pa.int32()), "s": pa.array(["a", None, ""]),
                      "l": pa.array([[1], None, []], pa.list_(pa.int8()))})
    pylance.write_dataset(table, uri, data_storage_version="legacy")
    assert ours.dataset(uri).data_storage_version == "0.1"
    mine = ours.dataset(uri).to_table()
    assert mine.to_pydict() == {"i": [1, 0, 3], "s": ["a", None, None], "l": [[1], [], []]}
    assert mine.equals(pylance.dataset(uri).to_table())


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_multi_page_and_multi_chunk(uri, version, loops):
    rng = np.random.default_rng(1)
    n = 120_000
    lengths = rng.integers(50, 110, n)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    text = pa.LargeStringArray.from_buffers(
        n, pa.py_buffer(offsets), pa.py_buffer(rng.integers(97, 123, int(offsets[-1])).astype(np.uint8)))
    table = pa.table({
        "text": text.cast(pa.string()),  # ~9 MB: more than one 8 MiB page
        "id": pa.array(np.arange(n)),
        "tags": pa.array([[] if i % 5000 else [i] for i in range(n)], pa.list_(pa.int32())),  # 65k-level pages
    })
    pylance.write_dataset(table, uri, data_storage_version=version)
    fragment = _manifest(uri).fragments[0]
    assert fragment.physical_rows == n
    mine = ours.dataset(uri).to_table()
    assert mine.equals(table)


ENCODING_CASES = {
    "zstd": pa.field("x", pa.int64(), metadata={"lance-encoding:compression": "zstd"}),
    "lz4": pa.field("x", pa.string(), metadata={"lance-encoding:compression": "lz4"}),
    "bss": pa.field("x", pa.float64(), metadata={"lance-encoding:compression": "zstd", "lance-encoding:bss": "on"}),
    "packed": pa.field("x", pa.struct([("a", pa.int32()), ("b", pa.float64())]), metadata={"packed": "true"}),
    "packed_var": pa.field("x", pa.struct([("a", pa.int32()), ("s", pa.string())]),
                           metadata={"lance-encoding:packed": "true"}),
    "blob": pa.field("x", pa.large_binary(), metadata={"lance-encoding:blob": "true"}),
}


def _encoding_case(name: str, n: int) -> pa.Table:
    field = ENCODING_CASES[name]
    rng = np.random.default_rng(4)
    if name == "zstd":
        values = pa.array(rng.integers(0, 10**9, n))
    elif name == "lz4":
        values = pa.array([f"value {i % 50} xyz" for i in range(n)])
    elif name == "bss":
        values = pa.array(rng.standard_normal(n))
    elif name == "packed":
        values = pa.array([{"a": i, "b": i / 2} for i in range(n)], field.type)
    elif name == "packed_var":
        values = pa.array([{"a": i, "s": str(i)} for i in range(n)], field.type)
    else:
        values = pa.array([rng.bytes(500) if i % 3 else None for i in range(n)], pa.large_binary())
    return pa.Table.from_arrays([values], schema=pa.schema([field]))


def _walk(encoding: pb.CompressiveEncoding, out: set[str]) -> None:
    which = encoding.WhichOneof("compression")
    if which is None:
        return
    out.add(which)
    message = getattr(encoding, which)
    for field, value in message.ListFields():
        if field.message_type is not None and field.message_type.name == "CompressiveEncoding":
            _walk(value, out)
        if which == "variable_packed_struct" and field.name == "fields":
            for item in value:
                _walk(item.value, out)


def _encodings(uri: str) -> set[str]:
    """Layouts and compressive encodings used in every data file of a dataset."""
    seen: set[str] = set()
    root = pathlib.Path(uri) / "data"
    for path in root.glob("*.lance"):
        data = path.read_bytes()
        _, cmo, _, _, columns, _, _, _ = struct.unpack("<QQQIIHH4s", data[-40:])
        for c in range(columns):
            position, size = struct.unpack_from("<QQ", data, cmo + 16 * c)
            metadata = file2_pb2.ColumnMetadata.FromString(data[position: position + size])
            for page in metadata.pages:
                layout = pb.PageLayout.FromString(any_pb2.Any.FromString(page.encoding.direct.encoding).value)
                which = layout.WhichOneof("layout")
                seen.add(which)
                body = getattr(layout, which)
                if which == "blob_layout":
                    body = body.inner_layout.mini_block_layout
                    seen.add("mini_block_layout")
                for name in ("value_compression", "rep_compression", "def_compression", "dictionary"):
                    if body.DESCRIPTOR.fields_by_name.get(name) and body.HasField(name):
                        _walk(getattr(body, name), seen)
                if which == "mini_block_layout" and body.HasField("dictionary"):
                    seen.add("page dictionary")
                if which == "constant_layout" and body.HasField("inline_value"):
                    seen.add("constant inline value")
    return seen


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_every_encoding_pylance_emits_is_read(tmp_path, version, loops):
    """Which encodings pylance 14 picks (by data) -- each one decoded equal to pylance's reading."""
    seen: set[str] = set()
    mixed = str(tmp_path / "mixed")
    pylance.write_dataset(MIXED, mixed, data_storage_version=version)
    seen |= _encodings(mixed)
    for name in ENCODING_CASES:
        if version == "2.1" and name == "packed_var":
            continue  # pylance: "Variable packed struct encoding is not enabled" for 2.1
        uri = str(tmp_path / name)
        table = _encoding_case(name, 3000)
        pylance.write_dataset(table, uri, data_storage_version=version)
        seen |= _encodings(uri)
        if name == "blob" and version == "2.2":  # pylance 14 stores it as blob v2: read as its struct<data, uri>
            values = ours.dataset(uri).to_table().column("x")
            assert values.type == pa.struct([pa.field("data", pa.large_binary()), pa.field("uri", pa.string())])
            assert pc.struct_field(values, "data").equals(table.column("x")), name
            continue
        mine = ours.dataset(uri).to_table()
        assert mine.equals(table), name  # the blob bytes themselves (pylance's to_table gives descriptors)
    expected = {
        "mini_block_layout", "full_zip_layout", "constant_layout", "flat", "variable", "inline_bitpacking",
        "out_of_line_bitpacking", "fsst", "rle", "fixed_size_list", "page dictionary", "general",
        "byte_stream_split", "packed_struct",
    }
    if version == "2.1":
        expected |= {"blob_layout"}
    else:
        expected |= {"variable_packed_struct", "constant inline value"}
    assert expected <= seen, sorted(expected - seen)


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_vectors_whose_items_are_all_null(tmp_path, version, loops):
    """Where every item of a fixed-size list page is null, pylance stores no item bytes: the full-zip
    rows hold only the item validity, the items are a ``constant`` without a value. We refused such
    files ('full-zip list items encoded as 'constant''): found by random tables written by pylance."""
    rows = 3000
    items = pa.nulls(rows * 16, pa.float32())
    cases = {
        "all items null": pa.FixedSizeListArray.from_arrays(items, 16),
        "null rows too": pa.FixedSizeListArray.from_arrays(items, 16, mask=pa.array(np.arange(rows) % 3 == 0)),
        "one item": pa.FixedSizeListArray.from_arrays(pa.nulls(rows, pa.float64()), 1),
        "vectors of vectors": pa.FixedSizeListArray.from_arrays(pa.FixedSizeListArray.from_arrays(items, 4), 4),
        "lists of vectors": pa.ListArray.from_arrays(  # rows 0-9 empty: taking only them selects no item
            pa.array(np.concatenate([np.zeros(11), np.arange(1, rows - 9)]).astype(np.int32)),
            pa.FixedSizeListArray.from_arrays(pa.nulls((rows - 10) * 3, pa.float32()), 3)),
    }
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(rows * 16, dtype=np.float32)), 16)
    table = pa.table({**cases, "id": pa.array(np.arange(rows)), "vector": vectors})
    uri = str(tmp_path / "nulls")
    pylance.write_dataset(table, uri, data_storage_version=version, max_rows_per_file=1000)
    assert "constant" in _encodings(uri)
    assert ours.dataset(uri).to_table().equals(table)
    for taken in (np.array([0, 1, 2, 999, 1000, 2998, 2999]), np.arange(10)):
        assert ours.dataset(uri).take(taken, columns=list(cases)).equals(table.select(list(cases)).take(taken))
    filtered = ours.dataset(uri).to_table(columns=["null rows too", "id"], filter="id >= 1500")
    assert filtered.equals(table.select(["null rows too", "id"]).slice(1500))


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_dictionary_strings_with_nulls(tmp_path, version, loops):
    """Low-cardinality strings and binaries with nulls and empty values (pylance stores them with a
    page dictionary): read as pylance reads them, with either loops."""
    rng = np.random.default_rng(7)
    words = np.array(["alpha", "beta", "", "gamma delta", "\u03b5psilon"], dtype=object)
    rows = 70_000
    table = pa.table({
        "s": pa.array(words[rng.integers(0, len(words), rows)], pa.string(), mask=rng.random(rows) < 0.1),
        "b": pa.array([w.encode() for w in words[rng.integers(0, len(words), rows)]], pa.large_binary(),
                      mask=rng.random(rows) < 0.3),
    })
    uri = str(tmp_path / "dictionary")
    pylance.write_dataset(table, uri, data_storage_version=version)
    assert "page dictionary" in _encodings(uri)
    assert ours.dataset(uri).to_table().equals(pylance.dataset(uri).to_table())
    assert ours.dataset(uri).to_table().equals(table)


# ----------------------------------------------------------------------------- pylance reads our files


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_pylance_reads_our_large_strings_in_full_zip_pages(tmp_path, version):
    """Values of large types long enough for full-zip pages (documents, blobs) carry 64-bit lengths,
    as pylance writes them: pylance refuses 32-bit lengths there ("expected 64-bit offsets"), so
    before, every such column we wrote was unreadable by pylance. Nulls, lists and a field asking
    for zstd too; ``string``/``binary`` keep 32-bit lengths."""
    rng = np.random.default_rng(11)
    rows = 300

    def text(low: int, high: int, count: int = rows) -> list[str]:
        ends = np.cumsum(rng.integers(low, high, count))
        letters = rng.integers(97, 123, int(ends[-1]) if count else 0, dtype=np.uint8).tobytes().decode()
        return [letters[a:b] for a, b in zip([0, *ends[:-1].tolist()], ends.tolist())]

    docs = text(150, 3000)
    zstd = {"lance-encoding:compression": "zstd"}
    table = pa.table({
        "doc": pa.array(docs, pa.large_string(), mask=rng.random(rows) < 0.2),
        "blob": pa.array([d.encode() for d in text(40_000, 50_000, rows)], pa.large_binary()),
        "chapters": pa.array([text(150, 400, int(k)) for k in rng.integers(0, 4, rows)], pa.list_(pa.large_string())),
        "note": pa.array(docs, pa.string()),
    }).cast(pa.schema([pa.field("doc", pa.large_string()), pa.field("blob", pa.large_binary(), metadata=zstd),
                       pa.field("chapters", pa.list_(pa.large_string())), pa.field("note", pa.string())]))
    uri = str(tmp_path / "large")
    ours.write_dataset(table, uri, data_storage_version=version)
    assert "full_zip_layout" in _encodings(uri)
    assert pylance.dataset(uri).to_table().equals(table)
    assert ours.dataset(uri).to_table().equals(table)
    # and the other way: pylance's full-zip blobs are zstd frames, one per value (decompress_chunks)
    theirs = str(tmp_path / "theirs")
    pylance.write_dataset(table, theirs, data_storage_version=version)
    assert {"full_zip_layout", "general"} <= _encodings(theirs)
    assert ours.dataset(theirs).to_table().equals(table)


@pytest.mark.parametrize("version", ["2.1", "2.2", "stable"])
def test_pylance_reads_what_we_write(uri, version):
    ours.write_dataset(MIXED, uri, data_storage_version=version, max_rows_per_file=1500)
    expected_version = "2.2" if version == "stable" else version
    theirs = pylance.dataset(uri)
    assert theirs.data_storage_version == expected_version
    assert _data_file_versions(uri) == {(2, int(expected_version[-1]))}
    assert _columns_equal(theirs.to_table(), MIXED) == []
    assert theirs.to_table(columns=["struct_list", "dict"]).equals(MIXED.select(["struct_list", "dict"]))


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_pylance_reads_our_small_pages(uri, version, monkeypatch):
    """Many pages and chunks per column (``max_page_bytes`` forced small)."""
    monkeypatch.setitem(LanceFileWriter.__init__.__kwdefaults__, "max_page_bytes", 3000)
    table = MIXED.slice(0, 2500)
    ours.write_dataset(table, uri, data_storage_version=version)
    assert _columns_equal(pylance.dataset(uri).to_table(), table) == []
    assert _columns_equal(ours.dataset(uri).to_table(), table) == []


# ----------------------------------------------------------------------------- appends and compaction


def test_appends_keep_the_dataset_version(uri):
    ours.write_dataset(MIXED.slice(0, 1000), uri, data_storage_version="2.2")
    pylance.write_dataset(_rows(1000, 1000), uri, mode="append")  # pylance keeps 2.2
    ours.write_dataset(MIXED.slice(2000, 1000), uri, mode="append")  # so do we
    assert ours.dataset(uri).data_storage_version == "2.2"
    assert _data_file_versions(uri) == {(2, 2)}
    expected = MIXED.slice(0, 3000)
    assert _columns_equal(pylance.dataset(uri).to_table(), expected) == []
    assert _columns_equal(ours.dataset(uri).to_table(), expected) == []


def test_we_append_to_pylance_datasets_in_their_version(tmp_path):
    for version in ("2.1", "2.2", "2.0"):
        uri = str(tmp_path / version)
        if version == "2.0":
            data = _rows(0, 1000).drop_columns(["struct", "struct_list", "nested_struct"])  # no struct nulls in 2.0
        else:
            data = _rows(0, 1000)
        pylance.write_dataset(data.slice(0, 500), uri, data_storage_version=version)
        ours.write_dataset(data.slice(500, 500), uri, mode="append")
        with pytest.raises(ours.InvalidInputError, match=version):
            ours.write_dataset(data.slice(0, 1), uri, mode="append",
                               data_storage_version="2.1" if version != "2.1" else "2.2")
        assert _data_file_versions(uri) == {(2, int(version[-1]))}
        assert _columns_equal(pylance.dataset(uri).to_table(), data) == []


def test_our_compaction_of_a_pylance_2_2_dataset_keeps_2_2(uri):
    pylance.write_dataset(_rows(0, 3000), uri, max_rows_per_file=500)  # pylance's default: 2.2
    assert pylance.dataset(uri).data_storage_version == "2.2"
    pylance.dataset(uri).delete("sorted_i64 % 3 = 0")
    expected = pylance.dataset(uri).to_table()
    metrics = ours.compact_files(uri)
    assert metrics.fragments_removed == 6
    assert _data_file_versions(uri) == {(2, 2)}
    assert pylance.dataset(uri).data_storage_version == "2.2"
    assert _columns_equal(pylance.dataset(uri).to_table(), expected) == []
    assert _columns_equal(ours.dataset(uri).to_table(), expected) == []


def test_legacy_dataset_rewritten_into_a_current_format(tmp_path):
    legacy, current = str(tmp_path / "legacy"), str(tmp_path / "current")
    pylance.write_dataset(_rows(0, 2000), legacy, data_storage_version="legacy", max_rows_per_group=300)
    read = ours.dataset(legacy).to_table()
    ours.write_dataset(read, current, data_storage_version="2.2")
    assert pylance.dataset(current).to_table().equals(pylance.dataset(legacy).to_table())


# ----------------------------------------------------------------------------- random nesting


def _random_round_trip(tmp_path, seed: int) -> None:
    from random_nested import random_table

    rng = np.random.default_rng(seed + 99)
    version = str(rng.choice(["2.1", "2.2"]))
    page_bytes = int(rng.choice([64, 512, 4096, 1 << 20]))
    chunk = int(rng.choice([1, 7, 50, 1000]))
    table = random_table(seed, int(rng.integers(1, 300)))
    mine, theirs = str(tmp_path / f"ours{seed}"), str(tmp_path / f"pylance{seed}")
    defaults = LanceFileWriter.__init__.__kwdefaults__
    previous = defaults["max_page_bytes"]
    defaults["max_page_bytes"] = page_bytes
    try:
        ours.write_dataset(table.to_batches(max_chunksize=chunk), mine, schema=table.schema,
                           data_storage_version=version)
    except ours.UnsupportedFeatureError:
        return  # e.g. fixed-size lists of structs (pylance refuses them before 2.2 as well)
    finally:
        defaults["max_page_bytes"] = previous
    assert _columns_equal(pylance.dataset(mine).to_table(), table) == [], (seed, version, page_bytes, chunk)
    assert _columns_equal(ours.dataset(mine).to_table(), table) == [], (seed, version, page_bytes, chunk)
    pylance.write_dataset(table.take(pa.array(np.arange(len(table)))), theirs, data_storage_version=version)
    assert _columns_equal(ours.dataset(theirs).to_table(), pylance.dataset(theirs).to_table()) == [], seed


@pytest.mark.parametrize("seed", range(20))
def test_random_nested_columns_both_ways(tmp_path, seed, loops):
    """Random structs/lists/fixed-size lists with nulls and empties, small pages and batches."""
    _random_round_trip(tmp_path, seed)


@pytest.mark.slow
def test_random_nested_columns_both_ways_long(tmp_path):
    for seed in range(20, 600):
        _random_round_trip(tmp_path, seed)


def _realistic_round_trip(tmp_path: pathlib.Path, seed: int) -> None:
    """A random table with value profiles that steer the encoders (long strings to full-zip pages,
    few distinct values to dictionaries, runs, full-range integers, vectors, nulls at every level):
    written by us (sometimes as a slice of a larger table) and read equal by pylance and by us;
    written by pylance and read by us as pylance reads it, whole and by ``take``."""
    from realistic_columns import realistic_table

    rng = np.random.default_rng(seed + 7_000)
    rows = int(rng.choice([1, 100, 3000, 20000], p=[0.1, 0.3, 0.3, 0.3]))
    table = realistic_table(seed, rows)
    if rows > 10 and rng.random() < 0.3:
        start = int(rng.integers(0, rows // 2))
        table = table.slice(start, int(rng.integers(1, rows - start)))
    version = str(rng.choice(["2.0", "2.1", "2.2"]))
    label = (seed, version, len(table), [str(t) for t in table.schema.types])
    mine, theirs = str(tmp_path / f"ours{seed}"), str(tmp_path / f"pylance{seed}")
    try:
        ours.write_dataset(table.to_batches(max_chunksize=int(rng.choice([100, 5000, 1 << 20]))), mine,
                           schema=table.schema, data_storage_version=version)
    except ours.UnsupportedFeatureError:
        assert version == "2.0", label  # struct nulls, which pylance refuses to write in 2.0 as well
    else:
        assert _columns_equal(pylance.dataset(mine).to_table(), table) == [], label
        assert _columns_equal(ours.dataset(mine).to_table(), table) == [], label
    try:
        pylance.write_dataset(table.take(pa.array(np.arange(len(table)))), theirs, data_storage_version=version,
                              max_rows_per_file=int(rng.choice([1000, 1 << 20])))
    except OSError:  # pylance 14 refuses some: struct nulls in 2.0, 'null_bit_buffer size too small' for some structs
        return
    expected = pylance.dataset(theirs).to_table()
    assert _columns_equal(ours.dataset(theirs).to_table(), expected) == [], label
    rows_taken = np.sort(rng.choice(len(table), size=min(len(table), 50), replace=False))
    assert _columns_equal(ours.dataset(theirs).take(rows_taken), expected.take(pa.array(rows_taken))) == [], label


@pytest.mark.parametrize("seed", range(24))
def test_realistic_random_columns_both_ways(tmp_path, seed, loops):
    _realistic_round_trip(tmp_path, seed)


@pytest.mark.slow
def test_realistic_random_columns_both_ways_long(tmp_path):
    for seed in range(24, 3000):
        _realistic_round_trip(tmp_path, seed)


# ----------------------------------------------------------------------------- compressed string chunks


def _string_table(n: int, seed: int = 7) -> pa.Table:
    """Strings worth compressing (nullable, large, nested in lists, in a struct), and random bytes that are not."""
    rng = np.random.default_rng(seed)
    words = np.array(["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", ""])
    picks = words[rng.integers(0, len(words), (n, 5))]
    numbers = rng.integers(0, 10**9, n).astype(str)
    text = np.char.add(np.char.add(picks[:, 0], numbers), np.char.add(picks[:, 1], picks[:, 2])).astype(object)
    text[rng.random(n) < 0.1] = None
    counts = rng.integers(0, 4, n)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    total = int(offsets[-1])
    items = pa.array(np.char.add(words[rng.integers(0, len(words), total)], rng.integers(0, 10**6, total).astype(str))
                     .astype(object) + "-item-text")
    return pa.table({
        "text": pa.array(text, pa.string()),
        "large": pa.array(text, pa.large_string()),
        "list": pa.ListArray.from_arrays(pa.array(offsets), items),
        "struct": pa.StructArray.from_arrays([pa.array(text, pa.binary())], ["b"]),
        "random": pa.array([rng.bytes(40) for _ in range(n)], pa.binary()),
    })


def _mini_block_compressions(uri: str) -> Iterator[tuple[str, Any]]:
    """(field name, value compression) of every mini-block page of the dataset's data files."""
    for path in (pathlib.Path(uri) / "data").glob("*.lance"):
        reader = ours.file.LanceFileReader(pa.OSFile(str(path)), path=str(path))
        names = [f.name for f in reader.schema.fields if not reader.schema.children(f.id)]
        for column, name in enumerate(names):
            for page in reader.column_metadata(column).pages:
                layout = pb.PageLayout.FromString(any_pb2.Any.FromString(page.encoding.direct.encoding).value)
                if layout.WhichOneof("layout") == "mini_block_layout":
                    yield name, layout.mini_block_layout.value_compression


def _general_schemes(uri: str) -> dict[str, set[int]]:
    """Per field name: the general-compression schemes of its pages' values."""
    schemes: dict[str, set[int]] = {}
    for name, compression in _mini_block_compressions(uri):
        if compression.WhichOneof("compression") == "general":
            schemes.setdefault(name, set()).add(compression.general.compression.scheme)
    return schemes


@pytest.mark.parametrize("compression", [None, "lz4", "none"])
def test_compressed_string_chunks_read_by_pylance(tmp_path, compression):
    """2.2 string pages get zstd-compressed chunks (``general`` around ``variable``), or what the
    field's ``lance-encoding:compression`` asks for; incompressible bytes stay as they are; our
    reader and pylance's (dataset and file reader) read them identically."""
    table = _string_table(6000)
    if compression is not None:
        fields = [f.with_metadata({"lance-encoding:compression": compression}) for f in table.schema]
        table = table.cast(pa.schema(fields))
    uri = str(tmp_path / "strings")
    ours.write_dataset(table, uri, data_storage_version="2.2")
    schemes = _general_schemes(uri)
    expected = {None: {pb.COMPRESSION_ALGORITHM_ZSTD}, "lz4": {pb.COMPRESSION_ALGORITHM_LZ4}, "none": None}[compression]
    for name in ("text", "large"):
        assert schemes.get(name) == expected, (name, schemes)
    for name in ("item", "b"):  # the metadata is the top-level field's: its children get the default
        assert schemes.get(name) == {pb.COMPRESSION_ALGORITHM_ZSTD}, (name, schemes)
    assert "random" not in schemes  # the sample does not shrink: stored as it is
    assert ours.dataset(uri).to_table().equals(table)
    assert pylance.dataset(uri).to_table().equals(table)
    assert pylance.dataset(uri).to_table(columns=["large", "list"]).equals(table.select(["large", "list"]))
    for path in (pathlib.Path(uri) / "data").glob("*.lance"):
        assert pylance.file.LanceFileReader(str(path)).read_all().to_table().equals(table.cast(
            pylance.file.LanceFileReader(str(path)).metadata().schema))


def test_compressed_string_chunks_shrink_and_row_reads(tmp_path, monkeypatch):
    """Compression pays on the page level (smaller files), 2.1 files never get it, and row reads
    (takes) of compressed chunks match pylance's."""
    from airflow_lance.core.file.v21 import write as v21_write

    table = _string_table(6000).select(["text", "list"])
    sizes = {}
    for setting in ("zstd", "none"):
        monkeypatch.setattr(v21_write, "STRING_COMPRESSION", setting)
        uri = str(tmp_path / setting)
        ours.write_dataset(table, uri, data_storage_version="2.2")
        sizes[setting] = sum(f.stat().st_size for f in (pathlib.Path(uri) / "data").glob("*.lance"))
    assert sizes["zstd"] < 0.7 * sizes["none"], sizes
    rows = [0, 1, 999, 1000, 4097, 5999]
    assert ours.dataset(str(tmp_path / "zstd")).take(rows).equals(pylance.dataset(str(tmp_path / "zstd")).take(rows))
    monkeypatch.setattr(v21_write, "STRING_COMPRESSION", "zstd")
    uri = str(tmp_path / "v21")
    ours.write_dataset(table, uri, data_storage_version="2.1")
    assert _general_schemes(uri) == {}
    assert pylance.dataset(uri).to_table().equals(table)


def _value_kinds(uri: str) -> dict[str, set[str]]:
    """Per field name: the value compressions of its mini-block pages."""
    kinds: dict[str, set[str]] = {}
    for name, compression in _mini_block_compressions(uri):
        kinds.setdefault(name, set()).add(compression.WhichOneof("compression"))
    return kinds


def test_fsst_string_chunks_read_by_pylance(tmp_path):
    """A field asking for ``lance-encoding:compression: fsst`` gets FSST-compressed string pages in
    2.2 files (our encoder, as pylance writes them); random bytes stay as they are; pylance and
    our reader read them identically (scans, projections, takes), and the file shrinks."""
    table = _string_table(6000)
    fields = [f.with_metadata({"lance-encoding:compression": "fsst"}) for f in table.schema]
    table = table.cast(pa.schema(fields))
    uri = str(tmp_path / "fsst")
    ours.write_dataset(table, uri, data_storage_version="2.2", max_rows_per_file=4000)
    kinds = _value_kinds(uri)
    for name in ("text", "large"):
        assert kinds[name] == {"fsst"}, kinds
    assert kinds["random"] == {"variable"}, kinds
    assert ours.dataset(uri).to_table().equals(table)
    assert pylance.dataset(uri).to_table().equals(table)
    assert pylance.dataset(uri).to_table(columns=["large", "list"]).equals(table.select(["large", "list"]))
    rows = [0, 1, 999, 3999, 4000, 5999]
    assert ours.dataset(uri).take(rows).equals(pylance.dataset(uri).take(rows))
    for path in (pathlib.Path(uri) / "data").glob("*.lance"):
        file = pylance.file.LanceFileReader(str(path))
        mine = ours.file.LanceFileReader(pa.OSFile(str(path)), path=str(path)).read()
        assert file.read_all().to_table().equals(mine.cast(file.metadata().schema))
    plain = table.select(["text"]).cast(pa.schema([pa.field("text", pa.string(), metadata={
        "lance-encoding:compression": "none"})]))
    ours.write_dataset(plain, str(tmp_path / "none"), data_storage_version="2.2")
    ours.write_dataset(table.select(["text"]), str(tmp_path / "text"), data_storage_version="2.2")
    size = {name: sum(f.stat().st_size for f in (tmp_path / name / "data").glob("*.lance")) for name in ("none", "text")}
    assert size["text"] < 0.6 * size["none"], size

"""Our writer -> our reader: every type, nulls, nesting, paging, streaming."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import struct

import numpy as np
import pyarrow as pa
import pytest
from google.protobuf import any_pb2

from airflow_lance.core._proto import encodings_v2_0_pb2, file2_pb2
from airflow_lance.core.errors import InvalidInputError, UnsupportedFeatureError
from airflow_lance.core.file import LanceFileReader, LanceFileWriter
from airflow_lance.core.schema import LanceSchema

D = decimal.Decimal
UTC = dt.UTC
INNER = pa.struct([("a", pa.int32()), ("b", pa.string())])

# name -> array with nulls (and edge values) of that type
ARRAYS: dict[str, pa.Array] = {
    "i8": pa.array([1, None, -128, 127], pa.int8()),
    "i16": pa.array([1, None, -3, 4], pa.int16()),
    "i32": pa.array([1, None, 3, -(2**31)], pa.int32()),
    "i64": pa.array([None, 2**62, 3, 4], pa.int64()),
    "u8": pa.array([255, None, 0, 1], pa.uint8()),
    "u16": pa.array([1, None, 3, 65535], pa.uint16()),
    "u32": pa.array([1, None, 3, 2**32 - 1], pa.uint32()),
    "u64": pa.array([2**64 - 1, None, 3, 4], pa.uint64()),
    "f16": pa.array(np.array([1.5, 0, -2, 65504], np.float16), mask=np.array([0, 1, 0, 0], bool)),
    "f32": pa.array([1.5, None, float("inf"), -0.0], pa.float32()),
    "f64": pa.array([-1e-300, None, 1e300, 2.5], pa.float64()),
    "bool": pa.array([True, None, False, True], pa.bool_()),
    "str": pa.array(["héllo wörld 🌍", None, "", "日本語"], pa.string()),
    "lstr": pa.array(["x", None, "", "yy"], pa.large_string()),
    "bin": pa.array([b"\x00\xff", None, b"", b"abc"], pa.binary()),
    "lbin": pa.array([b"", None, b"\x01", b"zz"], pa.large_binary()),
    "fsb": pa.array([b"abc", None, b"\x00\x00\x00", b"xyz"], pa.binary(3)),
    "d32": pa.array([dt.date(2020, 1, 1), None, dt.date(1970, 1, 1), dt.date(9999, 12, 31)], pa.date32()),
    "d64": pa.array([86400000, None, 0, -86400000], pa.date64()),
    "t32s": pa.array([1, None, 3, 86399], pa.time32("s")),
    "t32ms": pa.array([1, None, 3, 4], pa.time32("ms")),
    "t64us": pa.array([1, None, 3, 4], pa.time64("us")),
    "t64ns": pa.array([1, None, 3, 4], pa.time64("ns")),
    "ts_s": pa.array([1, None, 3, 4], pa.timestamp("s")),
    "ts_ms_tz": pa.array([1, None, 3, 4], pa.timestamp("ms", "America/New_York")),
    "ts_us_utc": pa.array([dt.datetime(2024, 1, 1, tzinfo=UTC), None, None, dt.datetime(1900, 1, 1, tzinfo=UTC)],
                          pa.timestamp("us", "UTC")),
    "ts_ns": pa.array([1, None, 3, 4], pa.timestamp("ns", "+01:00")),
    "dur_s": pa.array([1, None, -3, 4], pa.duration("s")),
    "dur_ns": pa.array([1, None, 3, 4], pa.duration("ns")),
    "dec128": pa.array([D("1.2345"), None, D("-99999.9999"), D("0")], pa.decimal128(9, 4)),
    "dec256": pa.array([D("1" * 40), None, D("-3"), D("0")], pa.decimal256(50, 0)),
    "fsl": pa.array([[1, 2], None, [None, 4], [5, 6]], pa.list_(pa.float32(), 2)),
    "fsl_fsl": pa.array([[[1, 2], [3, 4]], None, [[5, None], None], [[7, 8], [9, 10]]],
                        pa.list_(pa.list_(pa.int8(), 2), 2)),
    "fsl_bool": pa.array([[True, False], None, [None, True], [False, False]], pa.list_(pa.bool_(), 2)),
    "fsl_dec": pa.array([[D("1.5"), None], None, [D("2"), D("3")], [D("4"), D("5")]],
                        pa.list_(pa.decimal128(5, 2), 2)),
    "list": pa.array([[1, 2], [], None, [None, 4]], pa.list_(pa.int32())),
    "llist": pa.array([["a"], None, [], ["", None]], pa.large_list(pa.string())),
    "list_list": pa.array([[[1], [], None], None, [[]], [[2, 3]]], pa.list_(pa.list_(pa.int64()))),
    "list_struct": pa.array([[{"a": 1, "b": "x"}, {"a": None, "b": None}], None, [], [{"a": 3, "b": ""}]],
                            pa.list_(INNER)),
    "list_struct_list": pa.array(
        [[{"x": [1, 2], "y": "s"}], [{"x": None, "y": None}, {"x": [], "y": "t"}], None, []],
        pa.large_list(pa.struct([("x", pa.list_(pa.int16())), ("y", pa.string())]))),
    "struct": pa.array([{"a": 1, "b": "x"}, {"a": None, "b": None}, {"a": 3, "b": ""}, {"a": 4, "b": "z"}], INNER),
    "struct_struct": pa.array(
        [{"s": {"a": 1, "b": "x"}, "l": [1.0]}, {"s": {"a": None, "b": None}, "l": None},
         {"s": {"a": 2, "b": ""}, "l": []}, {"s": {"a": 3, "b": "q"}, "l": [None]}],
        pa.struct([("s", INNER), ("l", pa.list_(pa.float64()))])),
    "empty_struct": pa.Array.from_buffers(pa.struct([]), 4, [None], children=[]),
    "dict": pa.DictionaryArray.from_arrays(pa.array([0, 1, None, 0], pa.int32()), pa.array(["a", "b"])),
    "dict_i8": pa.DictionaryArray.from_arrays(pa.array([1, None, 1, 0], pa.int8()), pa.array(["x", "y"])),
    "dict_int": pa.DictionaryArray.from_arrays(pa.array([0, 0, None, 1], pa.uint16()), pa.array([10, 20], pa.int64())),
    "null": pa.nulls(4),
}


def _table(names=None) -> pa.Table:
    names = names or list(ARRAYS)
    return pa.table({name: ARRAYS[name] for name in names},
                    schema=pa.schema([pa.field(n, ARRAYS[n].type, metadata={"f": n}) for n in names],
                                     metadata={"tbl": "meta"}))


@pytest.mark.parametrize("name", list(ARRAYS))
def test_each_type_round_trips(name, write_file, read_file):
    table = _table([name])
    out = read_file(write_file(table))
    assert out.equals(table), (out.column(0), table.column(0))
    assert out.schema.equals(table.schema, check_metadata=True)


def test_all_types_in_one_file(write_file, read_file):
    table = _table()
    data = write_file(table)
    out = read_file(data)
    assert out.equals(table)
    assert out.schema.metadata == {b"tbl": b"meta"}
    reader = LanceFileReader(pa.BufferReader(data), path="x")
    assert reader.version == (0, 3)
    assert reader.num_rows == 4
    assert reader.num_columns == len(LanceSchema.from_arrow(table.schema).fields)
    assert reader.schema == LanceSchema.from_arrow(table.schema)


def test_all_null_and_all_valid_columns(write_file, read_file):
    names = [n for n in ARRAYS if not n.startswith(("struct", "empty_struct", "list_struct"))]
    nulls = pa.table({n: pa.nulls(5, ARRAYS[n].type) for n in names})
    assert read_file(write_file(nulls)).equals(nulls)
    valid = pa.table({n: ARRAYS[n].take([0, 3]) for n in names if n not in ("null", "ts_us_utc")})
    assert read_file(write_file(valid)).equals(valid)


def test_empty_file(write_file, read_file):
    table = _table()
    schema = LanceSchema.from_arrow(table.schema)
    data = write_file([], schema)
    out = read_file(data)
    assert out.num_rows == 0
    assert out.schema.equals(table.schema, check_metadata=True)
    assert read_file(write_file(table.slice(0, 0))).equals(table.slice(0, 0))


def test_streaming_batches_and_slices(write_file, read_file):
    table = pa.concat_tables([_table()] * 25)
    batches = [b for b in table.to_batches(max_chunksize=7)]
    # odd slices exercise array offsets (bit offsets of validity and bool data)
    sliced = [table.slice(3, 41), table.slice(44, 1), table.slice(45, 55)]
    assert read_file(write_file(batches, table.schema)).equals(table)
    assert read_file(write_file(sliced, table.schema)).equals(table.slice(3))
    # a Table with several chunks per column, one of them empty
    chunked = pa.concat_tables([table.slice(0, 33), table.slice(33, 0), table.slice(33)])
    assert read_file(write_file(chunked)).equals(table)


@pytest.mark.parametrize("max_page_bytes", [1, 64, 1000])
def test_multi_page_columns(max_page_bytes, write_file, read_file):
    table = pa.concat_tables([_table()] * 40)
    data = write_file(table.to_batches(max_chunksize=13), table.schema, max_page_bytes=max_page_bytes)
    assert read_file(data).equals(table)
    reader = LanceFileReader(pa.BufferReader(data), path="x")
    assert max(len(reader.column_metadata(c).pages) for c in range(reader.num_columns)) > 3


def _pages(data: bytes, column: int):
    reader = LanceFileReader(pa.BufferReader(data), path="x")
    out = []
    for page in reader.column_metadata(column).pages:
        packed = any_pb2.Any()
        packed.ParseFromString(page.encoding.direct.encoding)
        encoding = encodings_v2_0_pb2.ArrayEncoding()
        encoding.ParseFromString(packed.value)
        out.append((page, encoding))
    return out


def test_pages_respect_max_page_bytes_and_rows(write_file, read_file):
    n = 10_000
    table = pa.table({
        "i": pa.array(np.arange(n)),
        "s": pa.array([f"value-{i}" for i in range(n)]),
        "l": pa.array([[i] * (i % 4) for i in range(n)], pa.list_(pa.int32())),
    })
    data = write_file(table.to_batches(max_chunksize=777), table.schema, max_page_bytes=4096)
    assert read_file(data).equals(table)
    int_pages = _pages(data, 0)
    assert [p.length for p, _ in int_pages[:-1]] == [512] * (len(int_pages) - 1)
    assert sum(p.length for p, _ in int_pages) == n
    for page, _ in _pages(data, 1):
        assert sum(page.buffer_sizes) <= 4096
    # list offsets and list items page independently; num_items adds up to the item column length
    list_pages = _pages(data, 2)
    item_pages = _pages(data, 3)
    assert sum(e.list.num_items for _, e in list_pages) == sum(p.length for p, _ in item_pages)
    assert len(item_pages) > 1 and len(list_pages) > 1


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_2x_pages_leave_no_rows_behind(version, write_file, read_file):
    """A 2.1+ page is cut where the rows of the next batch fill it, by their average size; rows of
    uneven size (strings of 0-60 bytes, nulls) never leave a few of them behind as a page of
    their own."""
    rng = np.random.default_rng(11)
    n = 40_000
    values = ["x" * int(length) for length in rng.integers(0, 60, n)]
    table = pa.table({"s": pa.array(values, mask=rng.random(n) < 0.1)})
    data = write_file(table.to_batches(max_chunksize=2000), table.schema, max_page_bytes=64_000, version=version)
    assert read_file(data).equals(table)
    lengths = [page.length for page in LanceFileReader(pa.BufferReader(data), path="x").column_metadata(0).pages]
    assert sum(lengths) == n
    assert min(lengths[:-1]) > 1500, lengths  # about 64 kB of rows each (~2000), the last one what is left


def test_one_value_larger_than_a_page(write_file, read_file):
    table = pa.table({"s": pa.array(["x" * 5000, "y", "z" * 7000]), "v": pa.array([[1.0] * 300] * 3,
                                                                                    pa.list_(pa.float64(), 300))})
    data = write_file(table, max_page_bytes=100)
    assert read_file(data).equals(table)
    assert [p.length for p, _ in _pages(data, 0)] == [1, 1, 1]


def test_layout_alignment_padding_and_footer(write_file):
    table = _table()
    data = write_file(table)
    assert data[-4:] == b"LANC"
    cms, cmo, gbo, n_global, n_columns, major, minor = struct.unpack("<QQQIIHH", data[-40:-4])
    assert (major, minor, n_global) == (0, 3, 1)
    assert gbo == cmo + 16 * n_columns and gbo + 16 == len(data) - 40
    (gb_pos, gb_size) = struct.unpack("<QQ", data[gbo:gbo + 16])
    assert gb_pos % 64 == 0 and gb_pos + gb_size == cms
    end = 0
    for column in range(n_columns):
        pos, size = struct.unpack("<QQ", data[cmo + 16 * column: cmo + 16 * column + 16])
        metadata = file2_pb2.ColumnMetadata()
        metadata.ParseFromString(data[pos:pos + size])
        packed = any_pb2.Any()
        packed.ParseFromString(metadata.encoding.direct.encoding)
        assert packed.type_url == "/lance.encodings.ColumnEncoding"
        for page in metadata.pages:
            assert page.priority == 0
            for offset, length in zip(page.buffer_offsets, page.buffer_sizes):
                assert offset % 64 == 0
                assert set(data[end:offset]) <= {0x48}
                end = max(end, offset + length)


def test_encodings_written(write_file):
    table = pa.table({
        "i": pa.array([1, None, 3], pa.int32()),
        "s": pa.array(["a", None, "ccc"]),
        "l": pa.array([[1, 2], None, [3]], pa.list_(pa.int32())),
        "n": pa.nulls(3, pa.int64()),
        "d": pa.array(["a", "b", None]).dictionary_encode(),
    })
    data = write_file(table)
    (page, e), = _pages(data, 0)
    assert e.nullable.some_nulls.validity.flat.bits_per_value == 1
    assert e.nullable.some_nulls.values.flat.bits_per_value == 32
    (page, e), = _pages(data, 1)
    assert e.binary.null_adjustment == 5 and e.binary.indices.nullable.no_nulls.values.flat.bits_per_value == 64
    assert data[page.buffer_offsets[0]:page.buffer_offsets[0] + 24] == struct.pack("<3Q", 1, 6, 4)
    (page, e), = _pages(data, 2)
    assert (e.list.null_offset_adjustment, e.list.num_items) == (4, 3)
    assert data[page.buffer_offsets[0]:page.buffer_offsets[0] + 24] == struct.pack("<3Q", 2, 6, 3)
    (_, e), = _pages(data, 4)
    assert e.nullable.WhichOneof("nullability") == "all_nulls"
    (page, e), = _pages(data, 5)
    assert e.dictionary.num_dictionary_items == 3
    assert data[page.buffer_offsets[0]:page.buffer_offsets[0] + 12] == struct.pack("<3i", 0, 1, 2)


def test_dictionaries_differing_between_batches(write_file, read_file):
    batches = [pa.record_batch({"d": pa.array(["a", "b", None]).dictionary_encode()}),
               pa.record_batch({"d": pa.array(["c", "a"]).dictionary_encode()})]
    out = read_file(write_file(batches, batches[0].schema))
    assert out.column("d").to_pylist() == ["a", "b", None, "c", "a"]


def test_struct_nulls_are_rejected(write_file):
    bad = pa.table({"i": [1, 2], "s": pa.array([{"a": 1, "b": "x"}, None], INNER)})
    with pytest.raises(UnsupportedFeatureError, match="`s`"):
        write_file(bad)
    writer = LanceFileWriter(io.BytesIO(), LanceSchema.from_arrow(bad.schema))
    with pytest.raises(UnsupportedFeatureError):
        writer.write_batch(bad)
    with pytest.raises(InvalidInputError, match="failed"):
        writer.write_batch(bad.slice(0, 1))
    with pytest.raises(InvalidInputError, match="failed"):
        writer.finish()
    nested = pa.table({"l": pa.array([[{"x": {"a": 1, "b": "x"}}, {"x": None}]],
                                     pa.list_(pa.struct([("x", INNER)])))})
    with pytest.raises(UnsupportedFeatureError, match="`l.item.x`"):
        write_file(nested)


def test_unwritable_types(write_file):
    with pytest.raises(UnsupportedFeatureError, match="v"):
        write_file(pa.table({"v": pa.array([["a", "b"]], pa.list_(pa.string(), 2))}))
    with pytest.raises(UnsupportedFeatureError, match="v"):
        write_file(pa.table({"v": pa.array([[{"a": 1}]], pa.list_(pa.struct([("a", pa.int8())]), 1))}))


def test_batches_are_aligned_to_the_schema(write_file, read_file):
    schema = pa.schema([
        pa.field("v", pa.list_(pa.float32(), 2)),
        pa.field("s", pa.struct([("p", pa.int64()), ("q", pa.string())])),
    ])
    batch = pa.record_batch({
        "s": pa.array([{"q": "x", "p": 1}]),
        "v": pa.array([[1.0, 2.0]], pa.list_(pa.field("x", pa.float32(), False), 2)),
    })
    out = read_file(write_file([batch], schema))
    assert out.to_pylist() == [{"v": [1.0, 2.0], "s": {"p": 1, "q": "x"}}]
    assert out.schema == schema


def test_fixed_size_list_item_normalised(write_file, read_file):
    dtype = pa.list_(pa.field("x", pa.float32(), False), 2)
    table = pa.table({"v": pa.array([[1, 2], None], dtype)})
    out = read_file(write_file(table))
    assert out.schema.field("v").type == pa.list_(pa.float32(), 2)
    assert out.column("v").to_pylist() == [[1, 2], None]


def test_projection_with_column_index_and_missing_fields(write_file, read_file):
    table = _table(["i32", "struct", "list", "str"])
    data = write_file(table)
    schema = LanceSchema.from_arrow(table.schema)
    projected = schema.project(["str", "struct"])
    out = read_file(data, projected)
    assert out.equals(table.select(["str", "struct"]))
    mapping = {i: i for i in schema.field_ids() if i != schema.project(["str"]).field_ids()[0]}
    out = read_file(data, projected, column_index=mapping)
    assert out.column("str").null_count == 4
    assert out.column("struct").equals(table.column("struct"))


class _RecordingFile:
    """A file object that records the byte ranges read through it."""

    def __init__(self, data: bytes) -> None:
        self.raw = io.BytesIO(data)
        self.reads: list[tuple[int, int]] = []

    def read(self, n=-1):
        start = self.raw.tell()
        out = self.raw.read(n)
        self.reads.append((start, start + len(out)))
        return out

    def __getattr__(self, name):
        return getattr(self.raw, name)


def test_reads_only_needed_pages(write_file):
    n = 20_000
    table = pa.table({
        "big": pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(n * 64, np.float32)), 64),
        "small": pa.array(np.arange(n, dtype=np.int32)),
    })
    data = write_file(table.to_batches(max_chunksize=5000), table.schema, max_page_bytes=256 * 1024)
    recording = _RecordingFile(data)
    reader = LanceFileReader(pa.PythonFile(recording, mode="r"), path="x")
    recording.reads.clear()
    out = reader.read(reader.schema.project(["small"]))
    assert out.column("small").equals(table.column("small"))
    assert sum(b - a for a, b in recording.reads) < 200_000  # the vector column is 5 MB
    assert len(recording.reads) <= 3


def test_bytes_written_and_finish_rules():
    sink = io.BytesIO()
    table = pa.table({"a": pa.array(np.arange(1000))})
    writer = LanceFileWriter(sink, LanceSchema.from_arrow(table.schema))
    writer.write_batch(table)
    assert writer.num_rows == 1000
    assert writer.bytes_written >= 8000
    assert writer.field_ids == [0] and writer.column_indices == [0]
    size = writer.finish()
    assert size == len(sink.getvalue()) >= writer.bytes_written - 100
    with pytest.raises(InvalidInputError):
        writer.write_batch(table)
    with pytest.raises(InvalidInputError):
        writer.finish()
    with pytest.raises(InvalidInputError):
        LanceFileWriter(io.BytesIO(), LanceSchema.from_arrow(table.schema), max_page_bytes=0)


def test_large_random_table(write_file, read_file):
    rng = np.random.default_rng(7)
    n = 50_000
    mask = rng.random(n) < 0.1
    words = np.array(["", "a", "bb", "ccc", "dddd", "üñí"])
    table = pa.table({
        "f": pa.array(rng.random(n), mask=mask),
        "b": pa.array(rng.random(n) < 0.5, mask=rng.random(n) < 0.2),
        "s": pa.array(words[rng.integers(0, len(words), n)], mask=mask),
        "l": pa.ListArray.from_arrays(
            pa.array(np.concatenate([[0], np.cumsum(rng.integers(0, 4, n))]).astype(np.int32)),
            pa.array(rng.integers(0, 100, 4 * n)),
            mask=pa.array(mask),
        ),
    })
    data = write_file(table.to_batches(max_chunksize=3001), table.schema, max_page_bytes=32 * 1024)
    assert read_file(data).equals(table)

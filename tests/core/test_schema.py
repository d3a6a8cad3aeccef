"""LanceSchema: Arrow <-> Lance field list, checked against what pylance writes."""

from __future__ import annotations

import pathlib
import struct

import pyarrow as pa
import pytest

from airflow_lance.core._proto import file_pb2, table_pb2
from airflow_lance.core.errors import InvalidInputError, SchemaMismatchError, UnsupportedFeatureError
from airflow_lance.core.schema import LanceSchema

lance = pytest.importorskip("lance")

STRUCT = pa.struct([pa.field("a", pa.int32(), False), pa.field("b", pa.string())])

# (name, arrow type, nullable, field metadata)
TYPES: list[tuple[str, pa.DataType, bool, dict | None]] = [
    ("i8", pa.int8(), True, None),
    ("i16", pa.int16(), False, None),
    ("i32", pa.int32(), True, {"k": "v", "unicode": "ü🌍"}),
    ("i64", pa.int64(), True, None),
    ("u8", pa.uint8(), True, None),
    ("u16", pa.uint16(), True, None),
    ("u32", pa.uint32(), True, None),
    ("u64", pa.uint64(), True, None),
    ("f16", pa.float16(), True, None),
    ("f32", pa.float32(), True, None),
    ("f64", pa.float64(), True, None),
    ("b", pa.bool_(), True, None),
    ("s", pa.string(), True, None),
    ("ls", pa.large_string(), True, None),
    ("bin", pa.binary(), True, None),
    ("lbin", pa.large_binary(), True, None),
    ("fsb", pa.binary(7), True, None),
    ("d32", pa.date32(), True, None),
    ("d64", pa.date64(), True, None),
    ("t32s", pa.time32("s"), True, None),
    ("t32ms", pa.time32("ms"), True, None),
    ("t64us", pa.time64("us"), True, None),
    ("t64ns", pa.time64("ns"), True, None),
    ("ts_s", pa.timestamp("s"), True, None),
    ("ts_ms_ny", pa.timestamp("ms", "America/New_York"), True, None),
    ("ts_us_utc", pa.timestamp("us", "UTC"), True, None),
    ("ts_ns_off", pa.timestamp("ns", "+01:00"), True, None),
    ("dur_s", pa.duration("s"), True, None),
    ("dur_ms", pa.duration("ms"), True, None),
    ("dur_us", pa.duration("us"), True, None),
    ("dur_ns", pa.duration("ns"), True, None),
    ("dec128", pa.decimal128(20, 4), True, None),
    ("dec_neg", pa.decimal128(5, -2), True, None),
    ("dec256", pa.decimal256(50, 10), True, None),
    ("fsl", pa.list_(pa.float32(), 4), True, None),
    ("fsl_nn_item", pa.list_(pa.field("item", pa.float32(), False), 2), True, None),
    ("fsl_named", pa.list_(pa.field("x", pa.uint8(), True, metadata={"a": "b"}), 16), False, None),
    ("fsl_fsl", pa.list_(pa.list_(pa.int8(), 2), 3), True, None),
    ("fsl_ts", pa.list_(pa.timestamp("us", "UTC"), 2), True, None),
    ("fsl_dec", pa.list_(pa.decimal128(10, 2), 2), True, None),
    ("fsl_bool", pa.list_(pa.bool_(), 2), True, None),
    ("fsl_struct", pa.list_(STRUCT, 2), True, None),  # the one FSL with a child field
    ("lst", pa.list_(pa.int32()), True, None),
    ("lst_named", pa.list_(pa.field("x", pa.int32(), False, metadata={"m": "1"})), True, None),
    ("llst", pa.large_list(pa.string()), True, None),
    ("lst_struct", pa.list_(STRUCT), True, None),
    ("llst_struct", pa.large_list(STRUCT), True, None),
    ("lst_lst", pa.list_(pa.list_(pa.int8())), True, None),
    ("st", pa.struct([pa.field("inner", STRUCT), pa.field("arr", pa.list_(pa.int8()))]), False, {"s": "t"}),
    ("empty_st", pa.struct([]), True, None),
    ("dict_s", pa.dictionary(pa.int32(), pa.string()), True, None),
    ("dict_i8", pa.dictionary(pa.int8(), pa.string()), True, None),
    ("dict_u16_ls", pa.dictionary(pa.uint16(), pa.large_string()), True, None),
    ("dict_ordered", pa.dictionary(pa.int32(), pa.int64(), ordered=True), True, None),
    ("nul", pa.null(), True, None),
    ("sview", pa.string_view(), True, None),
    ("bview", pa.binary_view(), True, None),
]


def _schema() -> pa.Schema:
    fields = [pa.field(n, t, nullable, metadata=md) for n, t, nullable, md in TYPES]
    return pa.schema(fields, metadata={"schema-key": "value", "raw": b"\x01\x02"})


def test_metadata_must_be_utf8():
    with pytest.raises(InvalidInputError, match="UTF-8"):
        LanceSchema.from_arrow(pa.schema([pa.field("a", pa.int8(), metadata={"k": b"\xff"})]))
    with pytest.raises(InvalidInputError, match="UTF-8"):
        LanceSchema.from_arrow(pa.schema([("a", pa.int8())], metadata={b"\xfe": b"v"}))


def _read_manifest(path: pathlib.Path) -> table_pb2.Manifest:
    (manifest_file,) = sorted((path / "_versions").glob("*.manifest"))
    data = manifest_file.read_bytes()
    (pos,) = struct.unpack("<Q", data[-16:-8])
    (length,) = struct.unpack("<I", data[pos : pos + 4])
    manifest = table_pb2.Manifest()
    manifest.ParseFromString(data[pos + 4 : pos + 4 + length])
    return manifest


@pytest.fixture(scope="module")
def pylance_dataset(tmp_path_factory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("schema") / "ds.lance"
    schema = _schema()
    lance.write_dataset(schema.empty_table(), str(path), data_storage_version="2.0")
    return path


def test_to_arrow_matches_pylance(pylance_dataset):
    ours = LanceSchema.from_arrow(_schema()).to_arrow()
    theirs = lance.dataset(str(pylance_dataset)).schema
    for mine, other in zip(ours, theirs, strict=True):
        assert mine.equals(other, check_metadata=True), (mine, other)
    assert ours.equals(theirs, check_metadata=True)
    assert ours.metadata == theirs.metadata


def test_fields_match_pylance_manifest(pylance_dataset):
    manifest = _read_manifest(pylance_dataset)
    ours = LanceSchema.from_arrow(_schema())
    summary = [(f.name, f.id, f.parent_id, f.logical_type, f.nullable, dict(f.metadata), f.encoding)
               for f in ours.fields]
    expected = [(f.name, f.id, f.parent_id, f.logical_type, f.nullable, dict(f.metadata), f.encoding)
                for f in manifest.fields]
    assert summary == expected
    assert ours.metadata == dict(manifest.schema_metadata)


def test_from_manifest_fields_round_trip(pylance_dataset):
    manifest = _read_manifest(pylance_dataset)
    schema = LanceSchema.from_fields(manifest.fields, manifest.schema_metadata)
    assert schema.to_arrow().equals(lance.dataset(str(pylance_dataset)).schema, check_metadata=True)
    assert schema == LanceSchema.from_arrow(_schema())


def test_ids_and_tree_helpers():
    schema = LanceSchema.from_arrow(pa.schema([
        pa.field("a", pa.int32()),
        pa.field("s", pa.struct([pa.field("x", pa.list_(pa.int8())), pa.field("y", pa.string())])),
        pa.field("v", pa.list_(pa.float32(), 2)),
    ]))
    assert schema.field_ids() == [0, 1, 2, 3, 4, 5]
    assert [(f.name, f.parent_id) for f in schema.fields] == [
        ("a", -1), ("s", -1), ("x", 1), ("item", 2), ("y", 1), ("v", -1)]
    assert schema.max_field_id() == 5
    assert [f.name for f in schema.top_level()] == ["a", "s", "v"]
    assert schema.subtree_ids(1) == [1, 2, 3, 4]
    assert schema.subtree_ids(5) == [5]
    assert LanceSchema.from_arrow(pa.schema([])).max_field_id() == -1


def test_project_keeps_ids_and_order():
    schema = LanceSchema.from_arrow(
        pa.schema([("a", pa.int8()), ("s", pa.struct([("x", pa.int8())])), ("c", pa.utf8())])
    )
    projected = schema.project(["c", "s"])
    assert [(f.name, f.id) for f in projected.fields] == [("c", 3), ("s", 1), ("x", 2)]
    assert projected.to_arrow().names == ["c", "s"]
    with pytest.raises(InvalidInputError, match="nope"):
        schema.project(["a", "nope"])


def test_from_fields_reorders_to_preorder():
    fields = [
        file_pb2.Field(name="a", id=0, parent_id=-1, logical_type="struct"),
        file_pb2.Field(name="b", id=1, parent_id=-1, logical_type="int64"),
        file_pb2.Field(name="x", id=2, parent_id=0, logical_type="int8"),
    ]
    schema = LanceSchema.from_fields(fields, {})
    assert schema.field_ids() == [0, 2, 1]
    assert schema.to_arrow() == pa.schema([
        pa.field("a", pa.struct([pa.field("x", pa.int8(), False)]), False),
        pa.field("b", pa.int64(), False),
    ])


@pytest.mark.parametrize("fields", [
    [file_pb2.Field(name="a", id=0, parent_id=5, logical_type="int8")],
    [file_pb2.Field(name="a", id=0, parent_id=-1, logical_type="int8"),
     file_pb2.Field(name="b", id=0, parent_id=-1, logical_type="int8")],
    [file_pb2.Field(name="a", id=0, parent_id=-1, logical_type="list")],
    [file_pb2.Field(name="a", id=0, parent_id=-1, logical_type="decimal:128:x:2")],
    [file_pb2.Field(name="a", id=0, parent_id=-1, logical_type="int8"),
     file_pb2.Field(name="b", id=1, parent_id=0, logical_type="int8")],
])
def test_from_fields_rejects_inconsistent_lists(fields):
    with pytest.raises(InvalidInputError):
        LanceSchema.from_fields(fields, {})


def test_from_fields_unknown_logical_type():
    with pytest.raises(UnsupportedFeatureError, match="weird"):
        LanceSchema.from_fields([file_pb2.Field(name="weird", id=0, parent_id=-1, logical_type="quantum")], {})


@pytest.mark.parametrize("dtype", [
    pa.map_(pa.string(), pa.int8(), keys_sorted=True),  # unsorted maps are supported (2.2 files)
    pa.dense_union([pa.field("a", pa.int8())]),
    pa.list_view(pa.int32()),
    pa.decimal32(5, 2),
    pa.list_(pa.list_(pa.int8()), 2),
    pa.run_end_encoded(pa.int32(), pa.int8()),
])
def test_unsupported_types_name_the_field(dtype):
    with pytest.raises(UnsupportedFeatureError, match="deep"):
        LanceSchema.from_arrow(pa.schema([("top", pa.struct([("deep", dtype)]))]))


def test_invalid_names():
    with pytest.raises(InvalidInputError, match="cannot contain"):
        LanceSchema.from_arrow(pa.schema([("a.b", pa.int8())]))
    assert LanceSchema.from_arrow(pa.schema([("s", pa.struct([("a.b", pa.int8())]))])).fields[1].name == "a.b"
    with pytest.raises(InvalidInputError, match="duplicate"):
        LanceSchema.from_arrow(pa.schema([("a", pa.int8()), ("a", pa.int16())]))
    with pytest.raises(InvalidInputError, match="duplicate"):
        LanceSchema.from_arrow(pa.schema([("s", pa.struct([("x", pa.int8()), ("x", pa.int8())]))]))


BASE = pa.schema([("a", pa.int32()), ("b", pa.string()), ("s", pa.struct([("p", pa.int64()), ("q", pa.int64())]))])


def test_check_compatible_accepts_reordering_and_nullability():
    schema = LanceSchema.from_arrow(BASE)
    schema.check_compatible(BASE)
    schema.check_compatible(pa.schema([
        pa.field("s", pa.struct([("q", pa.int64()), ("p", pa.int64())])),
        pa.field("a", pa.int32(), False, metadata={"x": "y"}),
        ("b", pa.string()),
    ]))


def test_check_compatible_names_every_problem():
    schema = LanceSchema.from_arrow(BASE)
    other = pa.schema([("a", pa.int64()), ("s", pa.struct([("p", pa.int64()), ("r", pa.int8())])), ("c", pa.int8())])
    with pytest.raises(SchemaMismatchError) as info:
        schema.check_compatible(other)
    message = str(info.value)
    for needle in ("`a` should have type int32 but type was int64", "missing field `b` (string)",
                   "missing field `s.q` (int64)", "unexpected field `s.r` (int8)", "unexpected field `c` (int8)"):
        assert needle in message
    with pytest.raises(SchemaMismatchError, match="map"):
        schema.check_compatible(pa.schema([("a", pa.map_(pa.int8(), pa.int8()))]))


def test_align_reorders_and_casts():
    schema = LanceSchema.from_arrow(pa.schema([
        pa.field("v", pa.list_(pa.float32(), 2), metadata={"k": "v"}),
        pa.field("s", pa.struct([("p", pa.int64()), ("q", pa.string())])),
    ]))
    batch = pa.RecordBatch.from_pydict({
        "s": pa.array([{"q": "x", "p": 1}]),
        "v": pa.array([[1.0, 2.0]], pa.list_(pa.field("x", pa.float32(), False), 2)),
    })
    aligned = schema.align(batch)
    assert aligned.schema.equals(schema.to_arrow(), check_metadata=True)
    assert aligned.column(1).to_pylist() == [{"p": 1, "q": "x"}]
    table = schema.align(pa.Table.from_batches([batch]))
    assert table.schema.equals(schema.to_arrow(), check_metadata=True)
    with pytest.raises(SchemaMismatchError):
        schema.align(pa.RecordBatch.from_pydict({"v": pa.array([1])}))

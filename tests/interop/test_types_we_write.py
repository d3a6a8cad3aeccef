"""Every type our file writers (2.0 and 2.2) produce is read back by pylance unchanged."""

from __future__ import annotations

import datetime as dt
import decimal
import pathlib

import lance as pylance
import numpy as np
import pyarrow as pa
import pytest

import airflow_lance.core as ours
from airflow_lance.core.file import LanceFileReader, LanceFileWriter

D = decimal.Decimal
INNER = pa.struct([("a", pa.int32()), ("b", pa.string())])


def _types_table(repeat: int) -> pa.Table:
    base = {
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
        "bool": pa.array([True, None, False, True]),
        "str": pa.array(["héllo wörld 🌍", None, "", "日本語"]),
        "lstr": pa.array(["x", None, "", "yy"], pa.large_string()),
        "bin": pa.array([b"\x00\xff", None, b"", b"abc"]),
        "lbin": pa.array([b"", None, b"\x01", b"zz"], pa.large_binary()),
        "fsb": pa.array([b"abc", None, b"\x00\x00\x00", b"xyz"], pa.binary(3)),
        "d32": pa.array([dt.date(2020, 1, 1), None, dt.date(1970, 1, 1), dt.date(9999, 12, 31)]),
        "d64": pa.array([86400000, None, 0, -86400000], pa.date64()),
        "t32": pa.array([1, None, 3, 86399], pa.time32("s")),
        "t64": pa.array([1, None, 3, 4], pa.time64("ns")),
        "ts": pa.array([1, None, 3, 4], pa.timestamp("s")),
        "ts_tz": pa.array([1, None, 3, 4], pa.timestamp("ms", "America/New_York")),
        "ts_utc": pa.array([1, None, 3, 4], pa.timestamp("us", "UTC")),
        "ts_ns": pa.array([1, None, 3, 4], pa.timestamp("ns", "+01:00")),
        "dur": pa.array([1, None, -3, 4], pa.duration("us")),
        "dec128": pa.array([D("1.2345"), None, D("-99999.9999"), D("0")], pa.decimal128(9, 4)),
        "dec256": pa.array([D("1" * 40), None, D("-3"), D("0")], pa.decimal256(50, 0)),
        "fsl": pa.array([[1, 2], None, [None, 4], [5, 6]], pa.list_(pa.float32(), 2)),
        "fsl_fsl": pa.array([[[1, 2], [3, 4]], None, [[5, None], None], [[7, 8], [9, 10]]],
                            pa.list_(pa.list_(pa.int8(), 2), 2)),
        "fsl_bool": pa.array([[True, False], None, [None, True], [False, False]], pa.list_(pa.bool_(), 2)),
        "list": pa.array([[1, 2], [], None, [None, 4]], pa.list_(pa.int32())),
        "empty_lists": pa.array([[], None, [], []], pa.list_(pa.string())),
        "llist": pa.array([["a"], None, [], ["", None]], pa.large_list(pa.string())),
        "list_list": pa.array([[[1], [], None], None, [[]], [[2, 3]]], pa.list_(pa.list_(pa.int64()))),
        "list_struct": pa.array([[{"a": 1, "b": "x"}, {"a": None, "b": None}], None, [], [{"a": 3, "b": ""}]],
                                pa.list_(INNER)),
        "list_struct_list": pa.array(
            [[{"x": [1, 2], "y": "s"}], [{"x": None, "y": None}, {"x": [], "y": "t"}], None, []],
            pa.large_list(pa.struct([("x", pa.list_(pa.int16())), ("y", pa.string())]))),
        "struct_struct": pa.array(
            [{"s": {"a": 1, "b": "x"}, "l": [1.0]}, {"s": {"a": None, "b": None}, "l": None},
             {"s": {"a": 2, "b": ""}, "l": []}, {"s": {"a": 3, "b": "q"}, "l": [None]}],
            pa.struct([("s", INNER), ("l", pa.list_(pa.float64()))])),
        "empty_struct": pa.Array.from_buffers(pa.struct([]), 4, [None], children=[]),
        "dict": pa.DictionaryArray.from_arrays(pa.array([0, 1, None, 0], pa.int32()), pa.array(["a", "b"])),
        "dict_int": pa.DictionaryArray.from_arrays(pa.array([0, 0, None, 1], pa.uint16()),
                                                   pa.array([10, 20], pa.int64())),
        "null": pa.nulls(4),
        "all_null_i": pa.nulls(4, pa.int32()),
        "all_null_s": pa.nulls(4, pa.string()),
    }
    schema = pa.schema([pa.field(name, array.type, metadata={"field": name}) for name, array in base.items()],
                       metadata={"table": "meta"})
    return pa.concat_tables([pa.table(base, schema=schema)] * repeat)


def _by_value(table: pa.Table) -> pa.Table:
    """pylance returns dictionary columns with an extra null item: compare dictionaries by value."""
    columns = [c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c for c in table.columns]
    return pa.Table.from_arrays(columns, names=table.column_names)


def _pylance_table(uri: str, version: str, columns: list[str]) -> pa.Table:
    """pylance's reading; in 2.2 it fails on its own files when "dict" and "dict_int" (different
    key widths) are read together ("dictionary indices use 32 bits but the declared UInt16 key
    type"), so there each column is read on its own."""
    if version == "2.0":
        return pylance.dataset(uri).to_table(columns=columns)
    return pa.Table.from_arrays([pylance.dataset(uri).to_table(columns=[c]).column(0) for c in columns],
                                names=columns)


@pytest.mark.parametrize("version", ["2.0", "2.2"])
def test_pylance_reads_every_type(uri, version):
    table = _types_table(3)
    ours.write_dataset(table, uri, data_storage_version=version)
    theirs = pylance.dataset(uri)
    assert theirs.schema.equals(table.schema, check_metadata=True)
    assert _by_value(_pylance_table(uri, version, table.column_names)).equals(_by_value(table.replace_schema_metadata()))
    assert ours.dataset(uri).to_table().equals(table)


@pytest.mark.parametrize("version", ["2.0", "2.2"])
def test_pylance_reads_our_multi_page_files(uri, monkeypatch, version):
    monkeypatch.setitem(LanceFileWriter.__init__.__kwdefaults__, "max_page_bytes", 256)
    table = _types_table(60)
    ours.write_dataset(table.to_batches(max_chunksize=17), uri, schema=table.schema, data_storage_version=version)
    (data_file,) = pathlib.Path(uri, "data").glob("*.lance")
    with pa.memory_map(str(data_file)) as source:
        reader = LanceFileReader(source, path=str(data_file))
        assert len(reader.column_metadata(3).pages) > 3  # i64: 1920 bytes in 256-byte pages
    expected = _by_value(table.replace_schema_metadata())
    assert _by_value(_pylance_table(uri, version, table.column_names)).equals(expected)
    columns = ["list_struct_list", "str", "fsl"]
    assert pylance.dataset(uri).to_table(columns=columns).equals(table.select(columns))


def test_fixed_size_list_item_is_normalised_like_pylance(uri):
    dtype = pa.list_(pa.field("x", pa.float32(), False), 2)
    table = pa.table({"v": pa.array([[1, 2], None], dtype)})
    ours.write_dataset(table, uri)
    oracle_uri = uri + "-oracle"
    pylance.write_dataset(table, oracle_uri, data_storage_version="2.0")
    assert pylance.dataset(uri).schema == pylance.dataset(oracle_uri).schema == ours.dataset(uri).schema
    assert pylance.dataset(uri).to_table().equals(pylance.dataset(oracle_uri).to_table())


def test_struct_nulls_rejected_like_pylance_in_2_0(uri):
    table = pa.table({"s": pa.array([{"a": 1, "b": "x"}, None], INNER)})
    with pytest.raises(ours.UnsupportedFeatureError, match="struct field `s`"):
        ours.write_dataset(table, uri, data_storage_version="2.0")
    with pytest.raises(OSError, match="struct field `s`"):
        pylance.write_dataset(table, uri + "-oracle", data_storage_version="2.0")
    ours.write_dataset(table, uri)  # the default (2.2) stores struct validity
    assert pylance.dataset(uri).to_table().equals(table)

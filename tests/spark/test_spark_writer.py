"""The per-partition writer without Spark: Arrow batches in, fragments out; Spark's Arrow types
converted to a dataset's (Spark's signed integers and decimal(20,0) to its unsigned integers, value
by value), array columns stored as fixed-size lists; the row-count check; the garbage collector kept
out of the write."""

from __future__ import annotations

import json
import pathlib
import re

import lance as pylance
import numpy as np
import pyarrow as pa
import pytest

import airflow_lance.core as lance
from airflow_lance.spark.conform import harmonize, with_casts, with_fixed_size_lists
from airflow_lance.spark.spec import JobSpecError, SourceSpec, WriteJobSpec, check_against_dataset
from airflow_lance.spark.writer import (
    RESULT_SCHEMA,
    RowCountMismatchError,
    check_row_count,
    write_partition,
)


def _limits() -> dict[str, int]:
    return {"max_rows_per_file": 100, "max_bytes_per_file": 1 << 30}


def test_a_partition_becomes_fragments_described_by_one_result_batch(tmp_path: pathlib.Path) -> None:
    uri = str(tmp_path / "ds.lance")
    batches = pa.table({"id": pa.array(range(250), pa.int64())}).to_batches(max_chunksize=60)
    (out,) = list(write_partition(iter(batches), uri=uri, mode="create", storage_options={}, **_limits()))
    assert out.schema == RESULT_SCHEMA and out.num_rows == 3  # 100 + 100 + 50 rows
    fragments = [lance.FragmentMetadata.from_json(json.loads(f)) for f in out.column("fragment").to_pylist()]
    assert [f.physical_rows for f in fragments] == [100, 100, 50]
    assert pa.ipc.read_schema(pa.py_buffer(out.column("schema")[0].as_py())) == batches[0].schema
    with pytest.raises(lance.DatasetNotFoundError):
        lance.dataset(uri)  # nothing was committed


def test_an_empty_partition_writes_nothing(tmp_path: pathlib.Path) -> None:
    written = write_partition(iter([]), uri=str(tmp_path / "x"), mode="create", storage_options={}, **_limits())
    assert list(written) == []
    assert not (tmp_path / "x").exists()


def test_spark_types_are_converted_to_the_datasets_for_an_append(tmp_path: pathlib.Path) -> None:
    uri = str(tmp_path / "ds.lance")
    ours = pa.table({"s": pa.array(["a"]), "ts": pa.array([1], pa.timestamp("us", "UTC")),
                     "v": pa.array([[1.0, 2.0]], pa.list_(pa.float32(), 2))})
    ds = lance.write_dataset(ours, uri)
    spark = pa.RecordBatch.from_pydict(
        {"ts": pa.array([2], pa.timestamp("us", "Etc/UTC")), "s": pa.array(["b"], pa.large_string()),
         "v": pa.array([[3.0, 4.0]], pa.list_(pa.field("element", pa.float32(), nullable=False)))})
    (out,) = list(write_partition(iter([spark]), uri=uri, mode="append", storage_options={},
                                  target_schema=ds.schema, **_limits()))
    fragments = [lance.FragmentMetadata.from_json(f) for f in out.column("fragment").to_pylist()]
    new = lance.LanceDataset.commit(uri, lance.LanceOperation.Append(fragments), 1)
    assert new.to_table().column("v").to_pylist() == [[1.0, 2.0], [3.0, 4.0]]
    assert new.to_table().schema == ds.schema


def test_only_representation_differences_are_converted() -> None:
    target = pa.schema([("n", pa.int32()), ("v", pa.list_(pa.float32(), 2))])
    batch = pa.RecordBatch.from_pydict({"n": pa.array([1], pa.int64()),
                                        "v": pa.array([[1.0, 2.0, 3.0]], pa.list_(pa.float32()))})
    with pytest.raises(lance.SchemaMismatchError, match="column 'v'"):
        harmonize(batch, target)  # a 3-element list cannot be a 2-element vector
    narrow = harmonize(batch.select(["n"]), target)
    assert narrow.schema.field("n").type == pa.int64()  # no silent narrowing: left for the core to refuse


def test_row_count_check() -> None:
    fragment = lance.FragmentMetadata(0, (), 10)
    check_row_count([fragment, fragment], 20, "uri")
    with pytest.raises(RowCountMismatchError, match="hold 20 rows but Spark counted 21"):
        check_row_count([fragment, fragment], 21, "uri")


def _spark_vectors(rows: int, dim: int, large: bool = False) -> pa.Array:
    """Vectors as Spark hands them to Python: a plain list column (child ``element``)."""
    values = pa.array(np.arange(rows * dim, dtype=np.float32))
    offsets = pa.array(np.arange(0, rows * dim + 1, dim), pa.int64() if large else pa.int32())
    array_type = pa.large_list if large else pa.list_
    return (pa.LargeListArray if large else pa.ListArray).from_arrays(
        offsets, values, type=array_type(pa.field("element", pa.float32())))


@pytest.mark.parametrize("large", [False, True])
def test_array_columns_become_fixed_size_lists_without_copying_the_values(large: bool) -> None:
    batch = pa.RecordBatch.from_pydict({"id": pa.array(range(50)), "v": _spark_vectors(50, 4, large)})
    target = with_fixed_size_lists(batch.schema, {"v": 4})
    assert target.field("v").type == pa.list_(pa.field("element", pa.float32()), 4)
    for piece in (batch, batch.slice(7, 20)):  # a slice starts inside the values
        out = harmonize(piece, target)
        assert out.schema == target
        assert out.column("v").to_pylist() == piece.column("v").to_pylist()
        assert out.column("v").values.buffers()[1].address == piece.column("v").values.buffers()[1].address


def test_null_vectors_go_through_arrows_cast_and_wrong_lengths_name_the_column() -> None:
    with_null = pa.RecordBatch.from_pydict({"v": pa.array([[1.0, 2.0], None, [3.0, 4.0]], pa.list_(pa.float32()))})
    out = harmonize(with_null, with_fixed_size_lists(with_null.schema, {"v": 2}))
    assert out.column("v").to_pylist() == [[1.0, 2.0], None, [3.0, 4.0]]
    ragged = pa.RecordBatch.from_pydict({"v": pa.array([[1.0, 2.0], [3.0]], pa.list_(pa.float32()))})
    with pytest.raises(lance.SchemaMismatchError, match="column 'v': a row holds 1 items, not the 2"):
        harmonize(ragged, with_fixed_size_lists(ragged.schema, {"v": 2}))
    with pytest.raises(lance.SchemaMismatchError, match="not an array"):
        with_fixed_size_lists(pa.schema([("n", pa.int64())]), {"n": 2})
    with pytest.raises(lance.SchemaMismatchError, match="not in the data"):
        with_fixed_size_lists(pa.schema([("n", pa.int64())]), {"missing": 2})


@pytest.mark.parametrize("version", ["2.0", "2.2", "legacy"])
def test_a_partition_with_fixed_size_lists_reads_back_as_vectors(tmp_path: pathlib.Path, version: str) -> None:
    uri = str(tmp_path / "ds.lance")
    batches = [pa.RecordBatch.from_pydict({"id": pa.array(range(i * 40, i * 40 + 40)), "v": _spark_vectors(40, 8)})
               for i in range(3)]
    (out,) = list(write_partition(iter(batches), uri=uri, mode="create", storage_options={},
                                  fixed_size_lists={"v": 8}, data_storage_version=version, **_limits()))
    schema = pa.ipc.read_schema(pa.py_buffer(out.column("schema")[0].as_py()))
    fragments = [lance.FragmentMetadata.from_json(f) for f in out.column("fragment").to_pylist()]
    ds = lance.LanceDataset.commit(uri, lance.LanceOperation.Overwrite(schema, fragments), 0)
    table = pylance.dataset(uri).to_table()
    assert table.schema.field("v").type == pa.list_(pa.field("element", pa.float32()), 8)
    assert table.column("v").to_pylist() == pa.Table.from_batches(batches).column("v").to_pylist()
    assert ds.count_rows() == 120


def test_a_partition_appended_to_a_legacy_dataset_is_written_in_legacy_files(tmp_path: pathlib.Path) -> None:
    uri = str(tmp_path / "ds.lance")
    pylance.write_dataset(pa.table({"id": pa.array(range(10)), "s": pa.array([str(i) for i in range(10)])}), uri,
                          data_storage_version="legacy")
    spark = pa.RecordBatch.from_pydict({"id": pa.array(range(10, 260)),
                                        "s": pa.array([str(i) for i in range(10, 260)], pa.large_string())})
    (out,) = list(write_partition(iter([spark]), uri=uri, mode="append", storage_options={},
                                  target_schema=lance.dataset(uri).schema, **_limits()))
    fragments = [lance.FragmentMetadata.from_json(f) for f in out.column("fragment").to_pylist()]
    assert {(f.file_major_version, f.file_minor_version) for fr in fragments for f in fr.files} == {(0, 2)}
    lance.LanceDataset.commit(uri, lance.LanceOperation.Append(fragments), 1)
    assert pylance.dataset(uri).to_table().to_pydict() == {"id": list(range(260)), "s": [str(i) for i in range(260)]}


def test_appends_keep_the_datasets_vector_types() -> None:
    vectors = pa.schema([("v", pa.list_(pa.float32(), 4)), ("w", pa.list_(pa.float32())), ("x", pa.float64())])
    check_against_dataset(vectors, {"v": 4}, {})
    check_against_dataset(vectors, {}, {"v": "fixed_size_list<float32>[4]", "w": "list<float>", "x": "double"})
    with pytest.raises(JobSpecError, match="column 'new' to be cast is not a column of the dataset"):
        check_against_dataset(vectors, {"new": 4}, {})
    with pytest.raises(JobSpecError, match="column 'new' to be cast"):
        check_against_dataset(vectors, {}, {"new": "float32"})
    with pytest.raises(lance.SchemaMismatchError, match="cannot be appended as a 8-item"):
        check_against_dataset(vectors, {"v": 8}, {})
    with pytest.raises(lance.SchemaMismatchError, match="column 'w' is list<item: float>"):
        check_against_dataset(vectors, {"w": 4}, {})
    with pytest.raises(lance.SchemaMismatchError, match="column 'v' is .* cannot be appended cast to "
                                                        r"fixed_size_list<float64>\[4\]"):
        check_against_dataset(vectors, {}, {"v": "fixed_size_list<float64>[4]"})


def _json_doubles(rows: int, dim: int, start: int = 0) -> pa.Array:
    """Vectors as a JSON source hands them to Spark: ``list<double>``."""
    values = np.arange(start * dim, (start + rows) * dim, dtype=np.float64) / 7.0
    return pa.ListArray.from_arrays(pa.array(np.arange(rows + 1, dtype=np.int32) * dim), pa.array(values))


@pytest.mark.parametrize("vector", [(8, "float32"), ["8", "float32"], "fixed_size_list<float32>[8]"])
def test_casts_turn_doubles_into_float32_vectors_pylance_reads(tmp_path: pathlib.Path, vector: object) -> None:
    uri = str(tmp_path / "ds.lance")
    batches = [pa.RecordBatch.from_pydict({"id": pa.array(range(i * 40, i * 40 + 40)), "v": _json_doubles(40, 8, i * 40),
                                           "price": pa.array(np.arange(40, dtype=np.int64) + i)})
               for i in range(3)]
    by_cast = isinstance(vector, str)
    spec = WriteJobSpec(uri=uri, mode="create", source=SourceSpec.from_fields(sql="SELECT 1"), read_version=0,
                        staging_root=uri, staging_name="s.json", fixed_size_lists={} if by_cast else {"v": vector},
                        cast={"price": "float64", **({"v": vector} if by_cast else {})})
    assert spec.cast == {"v": "fixed_size_list<float32>[8]", "price": "float64"}
    (out,) = list(write_partition(iter(batches), uri=uri, mode="create", storage_options={},
                                  fixed_size_lists=spec.fixed_size_lists, cast=spec.cast, **_limits()))
    schema = pa.ipc.read_schema(pa.py_buffer(out.column("schema")[0].as_py()))
    fragments = [lance.FragmentMetadata.from_json(f) for f in out.column("fragment").to_pylist()]
    lance.LanceDataset.commit(uri, lance.LanceOperation.Overwrite(schema, fragments), 0)
    table = pylance.dataset(uri).to_table()
    assert table.schema.field("v").type == pa.list_(pa.field("item", pa.float32()), 8)
    assert table.schema.field("price").type == pa.float64()
    source = pa.Table.from_batches(batches)
    expected = source.column("v").combine_chunks().values.to_numpy().astype(np.float32)
    assert np.array_equal(table.column("v").combine_chunks().values.to_numpy(), expected)
    assert table.column("price").to_pylist() == [float(p) for p in source.column("price").to_pylist()]
    # an append casts the same way, to the dataset's types
    more = pa.RecordBatch.from_pydict({"id": pa.array([500]), "v": _json_doubles(1, 8, 500), "price": pa.array([9])})
    (out,) = list(write_partition(iter([more]), uri=uri, mode="append", storage_options={}, target_schema=schema,
                                  cast=spec.cast, **_limits()))
    fragments = [lance.FragmentMetadata.from_json(f) for f in out.column("fragment").to_pylist()]
    lance.LanceDataset.commit(uri, lance.LanceOperation.Append(fragments), 1)
    assert pylance.dataset(uri).to_table().column("v").to_pylist()[-1] == [float(np.float32(x / 7.0))
                                                                           for x in range(4000, 4008)]


def test_a_value_that_cannot_be_cast_names_its_column() -> None:
    words = pa.RecordBatch.from_pydict({"id": pa.array([1, 2]), "price": pa.array(["1.5", "cheap"])})
    with pytest.raises(lance.SchemaMismatchError, match="column 'price': cannot store string as double"):
        harmonize(words, with_casts(words.schema, {"price": "float64"}), {"price"})
    ragged = pa.RecordBatch.from_pydict({"v": pa.array([[1.0, 2.0], [3.0]], pa.list_(pa.float64()))})
    with pytest.raises(lance.SchemaMismatchError, match="column 'v': a row holds 1 items, not the 2"):
        harmonize(ragged, with_casts(ragged.schema, {"v": "fixed_size_list<float32>[2]"}), {"v"})
    with pytest.raises(lance.SchemaMismatchError, match="cast column 'nope' is not in the data"):
        with_casts(words.schema, {"nope": "float32"})


def test_vector_columns_come_from_spark_metadata_and_the_explicit_sizes() -> None:
    from pyspark.sql.types import ArrayType, FloatType, LongType, StructField, StructType

    from airflow_lance.spark.spec import JobSpecError
    from airflow_lance.spark.writer import FIXED_SIZE_LIST_KEY, fixed_size_lists_of

    schema = StructType([
        StructField("id", LongType()),
        StructField("marked", ArrayType(FloatType()), metadata={FIXED_SIZE_LIST_KEY: 4}),
        StructField("plain", ArrayType(FloatType())),
    ])
    assert fixed_size_lists_of(schema) == {"marked": 4}
    assert fixed_size_lists_of(schema, {"plain": "3", "marked": 8}) == {"marked": 8, "plain": 3}  # explicit wins
    with pytest.raises(lance.SchemaMismatchError, match="'missing' is not a column of the source"):
        fixed_size_lists_of(schema, {"missing": 2})
    with pytest.raises(lance.SchemaMismatchError, match="'id' is bigint, not an array"):
        fixed_size_lists_of(schema, {"id": 2})
    bad = StructType([StructField("v", ArrayType(FloatType()), metadata={FIXED_SIZE_LIST_KEY: "many"})])
    with pytest.raises(JobSpecError, match="positive integer"):
        fixed_size_lists_of(bad)


def _unsigned(uri: str) -> lance.LanceDataset:
    """A dataset with every unsigned integer type, written by pylance."""
    return lance.dataset(pylance.write_dataset(pa.table({
        "u8": pa.array([0], pa.uint8()), "u16": pa.array([0], pa.uint16()), "u32": pa.array([0], pa.uint32()),
        "u64": pa.array([0], pa.uint64())}), uri).uri)


def test_spark_integers_are_stored_in_the_datasets_unsigned_types(tmp_path: pathlib.Path) -> None:
    # Spark reads Parquet's uint8/16/32 as smallint/int/bigint and uint64 as decimal(20,0)
    ds = _unsigned(str(tmp_path / "ds.lance"))
    spark = pa.RecordBatch.from_pydict({
        "u8": pa.array([255, None], pa.int16()), "u16": pa.array([65535, 1], pa.int32()),
        "u32": pa.array([2**32 - 1, 2], pa.int64()), "u64": pa.array([2**64 - 1, None], pa.decimal128(20, 0))})
    (out,) = list(write_partition(iter([spark]), uri=ds.uri, mode="append", storage_options={},
                                  target_schema=ds.schema, **_limits()))
    fragments = [lance.FragmentMetadata.from_json(f) for f in out.column("fragment").to_pylist()]
    lance.LanceDataset.commit(ds.uri, lance.LanceOperation.Append(fragments), 1)
    table = pylance.dataset(ds.uri).to_table()
    assert table.schema == ds.schema
    assert table.to_pylist()[1:] == [{"u8": 255, "u16": 65535, "u32": 2**32 - 1, "u64": 2**64 - 1},
                                     {"u8": None, "u16": 1, "u32": 2, "u64": None}]


@pytest.mark.parametrize(("column", "values", "dtype"), [
    ("u32", [1, 2**32], pa.int64()), ("u32", [-1], pa.int64()), ("u8", [256], pa.int16()),
    ("u64", [2**64], pa.decimal128(20, 0)), ("u64", [-1], pa.decimal128(20, 0))])
def test_a_value_that_does_not_fit_the_unsigned_column_names_it_and_nothing_is_committed(
        tmp_path: pathlib.Path, column: str, values: list[int], dtype: pa.DataType) -> None:
    ds = _unsigned(str(tmp_path / "ds.lance"))
    batch = pa.RecordBatch.from_pydict({column: pa.array(values, dtype)})
    with pytest.raises(lance.SchemaMismatchError, match=re.escape(f"column '{column}': cannot store {dtype} as ")):
        list(write_partition(iter([batch]), uri=ds.uri, mode="append", storage_options={},
                             target_schema=ds.schema, **_limits()))
    assert lance.dataset(ds.uri).version == 1


def test_only_integers_become_unsigned_integers() -> None:
    target = pa.schema([("u", pa.uint32())])
    floats = harmonize(pa.RecordBatch.from_pydict({"u": pa.array([1.0])}), target)
    assert floats.schema.field("u").type == pa.float64()  # left for the core to refuse
    fraction = harmonize(pa.RecordBatch.from_pydict({"u": pa.array([1], pa.decimal128(20, 1))}), target)
    assert fraction.schema.field("u").type == pa.decimal128(20, 1)


def test_json_and_blob_v2_columns_take_sparks_representations(tmp_path: pathlib.Path) -> None:
    """Spark holds JSON as text and a blob v2 column as its struct with decimal(20,0) position and
    size: appended to pylance's dataset as JSONB and blobs that pylance reads; text that is not JSON
    fails the task before anything is committed."""
    uri = str(tmp_path / "ds.lance")
    field = pylance.blob_field("img", inline_size_threshold=64)
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("doc", pa.json_()), field])
    pylance.write_dataset(pa.table({"id": [0], "doc": pa.array(['{"a": 1}'], pa.json_()),
                                    "img": pylance.blob_array([b"x" * 10])}, schema=schema), uri)
    ds = lance.dataset(uri)
    blob = pa.struct([("data", pa.binary()), ("uri", pa.string()), ("position", pa.decimal128(20, 0)),
                      ("size", pa.decimal128(20, 0))])
    spark = pa.RecordBatch.from_pydict({
        "id": pa.array([1, 2], pa.int64()), "doc": pa.array(['{"b": [1, 2]}', None]),
        "img": pa.array([{"data": b"y" * 100, "uri": None, "position": None, "size": None}, None], blob)})
    (out,) = list(write_partition(iter([spark]), uri=uri, mode="append", storage_options={},
                                  target_schema=ds.schema, **_limits()))
    fragments = [lance.FragmentMetadata.from_json(f) for f in out.column("fragment").to_pylist()]
    lance.LanceDataset.commit(uri, lance.LanceOperation.Append(fragments), 1)
    theirs = pylance.dataset(uri)
    assert theirs.to_table(columns=["id", "doc"]).to_pylist() == [
        {"id": 0, "doc": '{"a":1}'}, {"id": 1, "doc": '{"b":[1,2]}'}, {"id": 2, "doc": None}]
    assert [None if b is None else b.read() for b in theirs.take_blobs("img", indices=[0, 1, 2])] == [
        b"x" * 10, b"y" * 100, None]
    bad = pa.RecordBatch.from_pydict({"id": pa.array([3], pa.int64()), "doc": pa.array(["{not json"]),
                                      "img": pa.array([None], blob)})
    with pytest.raises(lance.InvalidInputError, match="not a JSON value"):
        list(write_partition(iter([bad]), uri=uri, mode="append", storage_options={}, target_schema=ds.schema,
                             **_limits()))
    assert pylance.dataset(uri).version == 2

"""The per-partition writer without Spark: Arrow batches in, fragments out; Spark's Arrow types
converted to a dataset's; the row-count check."""

from __future__ import annotations

import json
import pathlib

import pyarrow as pa
import pytest

import airflow_lance.core as lance
from airflow_lance.spark.writer import RESULT_SCHEMA, RowCountMismatchError, check_row_count, harmonize, write_partition


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

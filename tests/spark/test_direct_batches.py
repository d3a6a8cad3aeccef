"""A direct Parquet read hands the writer batches of about ``direct.BATCH_BYTES`` decoded bytes (a
Python worker's peak memory follows the batch size), rows and order unchanged; no Spark needed."""

from __future__ import annotations

import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_lance.spark import direct


@pytest.mark.parametrize("dim", [1, 256, 8192])
def test_parquet_batches_are_sized_in_bytes(tmp_path: pathlib.Path, dim: int) -> None:
    rows = 70_000 if dim < 8192 else 3000
    values = np.arange(rows * dim, dtype=np.float32)
    table = pa.table({"id": pa.array(np.arange(rows)),
                      "embedding": pa.FixedSizeListArray.from_arrays(pa.array(values), dim).cast(
                          pa.list_(pa.float32()))})
    path = tmp_path / "part-0.parquet"
    pq.write_table(table, path, row_group_size=rows, compression="none")
    split = direct.Split(path=str(path), row_groups=(0,))
    plan = direct.DirectPlan(kind="parquet", schema=table.schema, partition_columns=(), splits=(split,), options={},
                             expected_rows=rows)
    counter = [0]
    batches = list(direct.read_group(plan, [split], counter))
    largest = max(batches, key=lambda b: b.num_rows)
    if dim == 1:  # narrow rows: at most 65,536 a batch
        assert largest.num_rows == direct.BATCH_ROWS
    elif dim == 256:  # 1 KiB rows: about BATCH_BYTES (4 MiB) a batch
        assert 0.8 * direct.BATCH_BYTES < largest.nbytes <= 1.05 * direct.BATCH_BYTES
    else:  # 32 KiB rows: at least 1024 a batch
        assert largest.num_rows == 1024
    assert counter == [rows] and pa.Table.from_batches(batches).equals(table)

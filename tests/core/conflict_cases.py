"""Operations planned against one read version, for the conflict-matrix tests.

Dataset shape: version 1 = fragments 0, 1, 2 with ids 0..29 (10 rows each),
version 2 = an append of ids 30..39 (fragment 3). Operations are planned on
version 2.
"""

from __future__ import annotations

import pyarrow as pa

import airflow_lance.core as lance
from airflow_lance.core.delete import plan_delete
from airflow_lance.core.scan import read_fragment
from airflow_lance.core.write import write_data_files

READ_VERSION = 2


def table(start: int, n: int) -> pa.Table:
    ids = pa.array(range(start, start + n), pa.int64())
    return pa.table({"id": ids, "v": pa.array([float(i) for i in range(start, start + n)], pa.float64())})


def make_dataset(uri: str) -> None:
    lance.write_dataset(table(0, 30), uri, max_rows_per_file=10)
    lance.write_dataset(table(30, 10), uri, mode="append")


def _delete(uri: str, predicate: str) -> lance.LanceOperation.Delete:
    ds = lance.dataset(uri, version=READ_VERSION)
    op, _ = plan_delete(ds.store, [f.metadata for f in ds.get_fragments()], ds.lance_schema, predicate, READ_VERSION)
    assert op is not None
    return op


def _rewrite(uri: str, ids: list[int]) -> lance.LanceOperation.Rewrite:
    ds = lance.dataset(uri, version=READ_VERSION)
    old = [f.metadata for f in ds.get_fragments() if f.fragment_id in ids]
    rows = pa.concat_tables([read_fragment(ds.store, f, ds.lance_schema) for f in old])
    new = write_data_files(ds.store, iter(rows.to_batches()), ds.lance_schema)
    return lance.LanceOperation.Rewrite([lance.LanceOperation.RewriteGroup(old, new)])


def plan(kind: str, uri: str) -> lance.LanceOperation.BaseOperation:
    """An operation of ``kind`` planned on READ_VERSION."""
    ds = lance.dataset(uri, version=READ_VERSION)
    if kind == "append":
        return lance.LanceOperation.Append(lance.write_fragments(table(100 + ds.count_rows(), 5), uri))
    if kind == "overwrite":
        return lance.LanceOperation.Overwrite(table(0, 0).schema, lance.write_fragments(table(500, 5), uri, mode="overwrite"))
    if kind == "delete_f0":
        return _delete(uri, "id < 3")
    if kind == "delete_f0_other_rows":
        return _delete(uri, "id >= 5 AND id < 7")
    if kind == "delete_f0_whole":  # every row of fragment 0: the fragment is removed
        return _delete(uri, "id < 10")
    if kind == "delete_f2":
        return _delete(uri, "id = 25")
    if kind == "rewrite_f0_f1":
        return _rewrite(uri, [0, 1])
    if kind == "rewrite_f2_f3":
        return _rewrite(uri, [2, 3])
    if kind == "restore":
        return lance.LanceOperation.Restore(1)
    if kind == "reserve":
        return lance.LanceOperation.ReserveFragments(2)
    if kind == "config_a":
        return lance.LanceOperation.UpdateConfig(config_updates=lance.LanceOperation.UpdateMap({"a": "1"}))
    if kind == "config_b":
        return lance.LanceOperation.UpdateConfig(config_updates=lance.LanceOperation.UpdateMap({"b": "1"}))
    raise ValueError(kind)

"""alter_columns casts of nested leaves ("s.a"), side by side with pylance 14.

pylance gives the leaf a new field id under the same parent and writes, per fragment, a file
holding only that leaf (the struct's validity in its levels); the struct's other children stay
in the old file. We write the same (schema, field ids, data file fields) and read such split
structs, pylance's and ours."""

from __future__ import annotations

import os
import shutil

import lance as pylance
import pyarrow as pa
import pytest

import airflow_lance.core as ours
from airflow_lance.core.errors import SchemaEvolutionError, UnsupportedFeatureError

STRUCT = pa.struct([("a", pa.int32()), ("b", pa.string()), ("c", pa.struct([("d", pa.float32())]))])


def _table(n: int = 30) -> pa.Table:
    rows = [None if i % 7 == 3 else {"a": i, "b": None if i % 5 == 1 else f"b{i}",
                                     "c": None if i % 4 == 2 else {"d": i / 2}} for i in range(n)]
    return pa.table({"id": pa.array(range(n), pa.int64()), "s": pa.array(rows, STRUCT),
                     "l": pa.array([[{"x": i}] for i in range(n)], pa.list_(pa.struct([("x", pa.int32())]))),
                     "z": pa.array([i * 1.5 for i in range(n)], pa.float32())})


@pytest.fixture(params=["2.1", "2.2"])
def copies(request, tmp_path):
    oracle, mine = str(tmp_path / "oracle.lance"), str(tmp_path / "ours.lance")
    pylance.write_dataset(_table(), oracle, max_rows_per_file=10, data_storage_version=request.param,
                          enable_stable_row_ids=request.param == "2.2")
    pylance.dataset(oracle).delete("id % 6 = 1")
    shutil.copytree(oracle, mine)
    return oracle, mine


def _layout(uri: str):
    ds = ours.dataset(uri)
    return ([(f.name, f.id, f.parent_id, f.logical_type, f.nullable) for f in ds.lance_schema.fields],
            [[(list(d.fields), list(d.column_indices)) for d in fragment.files] for fragment in ds._fragments])


def _rows(lib, uri: str):
    return lib.dataset(uri).to_table(with_row_id=True).sort_by("_rowid").to_pylist()


ALTERATIONS = [
    [{"path": "s.a", "data_type": pa.int64()}],
    [{"path": "s.c.d", "data_type": pa.float64()}, {"path": "z", "data_type": pa.float64()}],
    [{"path": "s.a", "data_type": pa.int64(), "name": "a64"}],
]


def test_nested_casts_as_pylance(copies):
    oracle, mine = copies
    for alterations in ALTERATIONS:
        pylance.dataset(oracle).alter_columns(*alterations)
        ours.dataset(mine).alter_columns(*alterations)
        assert _layout(mine) == _layout(oracle)
        assert pylance.dataset(mine).schema == pylance.dataset(oracle).schema
        for reader in (pylance, ours):
            assert _rows(reader, mine) == _rows(pylance, oracle)
        assert _rows(ours, oracle) == _rows(pylance, oracle)  # we read pylance's split structs
    # then both go on: a filter on the cast leaf, an update, a compaction
    assert ours.dataset(mine).to_table(filter="s.a64 > 20", columns=["id"]).equals(
        pylance.dataset(oracle).to_table(filter="s.a64 > 20", columns=["id"]))
    for lib, uri in ((pylance, oracle), (ours, mine)):
        lib.dataset(uri).update({"z": "z + 1"}, where="id < 12")
        lib.dataset(uri).optimize.compact_files(target_rows_per_fragment=100)
    for reader in (pylance, ours):
        assert _rows(reader, mine) == _rows(pylance, oracle)


@pytest.mark.parametrize("alteration,error", [
    ({"path": "l.item.x", "data_type": pa.int64()}, (UnsupportedFeatureError, SchemaEvolutionError)),
    ({"path": "s.c", "data_type": pa.struct([("d", pa.float64())])}, (UnsupportedFeatureError,)),
    ({"path": "s.b", "data_type": pa.int32()}, (SchemaEvolutionError,)),
])
def test_refused_nested_casts_leave_the_dataset_unchanged(copies, alteration, error):
    _, mine = copies
    before = (_layout(mine), sorted(os.listdir(os.path.join(mine, "data"))), ours.dataset(mine).version)
    with pytest.raises(error):
        ours.dataset(mine).alter_columns(alteration)
    assert (_layout(mine), sorted(os.listdir(os.path.join(mine, "data"))), ours.dataset(mine).version) == before


def test_two_nested_casts_in_one_struct_at_once_are_refused(copies):
    _, mine = copies
    with pytest.raises(UnsupportedFeatureError, match="one nested cast per top-level struct"):
        ours.dataset(mine).alter_columns({"path": "s.a", "data_type": pa.int64()},
                                         {"path": "s.c.d", "data_type": pa.float64()})
    ours.dataset(mine).alter_columns({"path": "s.a", "data_type": pa.int64()})  # one after the other works
    ours.dataset(mine).alter_columns({"path": "s.c.d", "data_type": pa.float64()})
    assert pylance.dataset(mine).schema.field("s").type == pa.struct(
        [("a", pa.int64()), ("b", pa.string()), ("c", pa.struct([("d", pa.float64())]))])


def test_nested_cast_of_a_2_0_dataset_is_refused(tmp_path):
    """pylance 14 writes a 2.0 dataset it cannot read back; we refuse before writing."""
    uri = str(tmp_path / "v20.lance")
    table = pa.table({"id": [1, 2], "s": pa.array([{"a": 1}, {"a": 2}], pa.struct([("a", pa.int32())]))})
    pylance.write_dataset(table, uri, data_storage_version="2.0")
    with pytest.raises(UnsupportedFeatureError, match="2.1 or later"):
        ours.dataset(uri).alter_columns({"path": "s.a", "data_type": pa.int64()})
    assert ours.dataset(uri).version == 1 and pylance.dataset(uri).to_table().equals(table)

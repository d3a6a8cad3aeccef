"""AddColumnsPlan: add_columns split into plan / per-fragment write / one commit, checked against
pylance's ``add_columns`` on identical copies (and read back by pylance)."""

from __future__ import annotations

import shutil

import lance as pylance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import airflow_lance.core as lance
from airflow_lance.core import AddColumnsPlan


def _table(start: int, rows: int) -> pa.Table:
    ids = np.arange(start, start + rows)
    return pa.table({"id": pa.array(ids, pa.int64()), "x": pa.array(ids * 0.25), "label": [f"r{i}" for i in ids]})


def double(batch: pa.RecordBatch) -> pa.RecordBatch:
    return pa.record_batch({"y": pc.multiply(batch.column("x"), 2.0)})


def _write_all(uri: str, plan: AddColumnsPlan,
               func=double) -> list[lance.FragmentMetadata]:  # type: ignore[no-untyped-def]
    plan = AddColumnsPlan.from_json(plan.to_json())  # as the executors get it
    at_read = lance.dataset(uri, plan.read_version)
    return [plan.write_fragment(at_read, fragment_id, func) for fragment_id in plan.fragment_ids]


def _commit(uri: str, plan: AddColumnsPlan, written: list[lance.FragmentMetadata]) -> lance.LanceDataset:
    operation, version = plan.operation(lance.dataset(uri), written)
    return lance.LanceDataset.commit(uri, operation, version)


@pytest.mark.parametrize("version", ["2.0", "2.2"])
@pytest.mark.parametrize("stable", [False, True])
def test_fragment_by_fragment_equals_pylance_add_columns(tmp_path, version: str, stable: bool) -> None:
    uri = str(tmp_path / "a.lance")
    pylance.write_dataset(_table(0, 500), uri, max_rows_per_file=120, data_storage_version=version,
                          enable_stable_row_ids=stable)
    pylance.dataset(uri).delete("id % 6 = 2 OR id BETWEEN 130 AND 170")
    shutil.copytree(uri, tmp_path / "oracle.lance")
    ds = lance.dataset(uri)
    plan = AddColumnsPlan.plan(ds, pa.schema([("y", pa.float64())]), ["x"])
    assert plan.fragment_ids == (0, 1, 2, 3, 4) and plan.read_version == ds.version
    _commit(uri, plan, _write_all(uri, plan))
    oracle = pylance.dataset(str(tmp_path / "oracle.lance"))
    oracle.add_columns(double, read_columns=["x"])
    ours = pylance.dataset(uri)
    assert ours.schema == oracle.schema
    assert ours.to_table(with_row_id=True) == oracle.to_table(with_row_id=True)
    assert ours.version == oracle.version


def test_values_computed_elsewhere_are_stored_per_fragment(tmp_path) -> None:
    uri = str(tmp_path / "a.lance")
    lance.write_dataset(_table(0, 300), uri, max_rows_per_file=100)
    lance.dataset(uri).delete("id % 5 = 0")
    ds = lance.dataset(uri)
    plan = AddColumnsPlan.plan(ds, pa.schema([("name", pa.string())]), ["label"])
    written = []
    for fragment in ds.get_fragments():
        live = fragment.to_table(columns=["label"])
        values = pa.table({"name": pc.utf8_upper(live.column("label")).cast(pa.large_string())})
        written.append(plan.write_fragment_values(ds, fragment.fragment_id, values))
    _commit(uri, plan, written)
    table = pylance.dataset(uri).to_table()
    assert table.schema.field("name").type == pa.string()
    assert table["name"] == pc.utf8_upper(table["label"])


def test_a_wrong_number_of_values_is_refused(tmp_path) -> None:
    uri = str(tmp_path / "a.lance")
    ds = lance.write_dataset(_table(0, 10), uri)
    plan = AddColumnsPlan.plan(ds, pa.schema([("y", pa.int64())]), ["id"])
    with pytest.raises(lance.SchemaEvolutionError, match="10 live rows, 9 values"):
        plan.write_fragment_values(ds, 0, pa.table({"y": pa.array(range(9), pa.int64())}))


def test_appends_and_deletes_landing_meanwhile_are_kept(tmp_path) -> None:
    uri = str(tmp_path / "a.lance")
    lance.write_dataset(_table(0, 200), uri, max_rows_per_file=100, enable_stable_row_ids=True)
    plan = AddColumnsPlan.plan(lance.dataset(uri), pa.schema([("y", pa.float64())]), ["x"])
    written = _write_all(uri, plan)
    pylance.write_dataset(_table(1000, 50), uri, mode="append")
    pylance.dataset(uri).delete("id = 7 OR id = 1001")
    after = _commit(uri, plan, written)
    assert after.version == plan.read_version + 3
    table = pylance.dataset(uri).to_table()
    assert table.num_rows == 248 and 7 not in table["id"].to_pylist()
    old = table.filter(pc.field("id") < 1000)
    assert old["y"] == pc.multiply(old["x"], 2.0) and table.filter(pc.field("id") >= 1000)["y"].null_count == 49
    # the appended fragment is filled by a backfill: a DataReplacement of just that fragment
    backfill = AddColumnsPlan.plan(lance.dataset(uri), pa.schema([("y", pa.float64())]), ["x"], only_missing=True)
    assert backfill.fragment_ids == (2,)
    _commit(uri, backfill, _write_all(uri, backfill))
    table = pylance.dataset(uri).to_table()
    assert table["y"].null_count == 0 and table["y"] == pc.multiply(table["x"], 2.0)
    assert pylance.dataset(uri).to_table(with_row_id=True)["_rowid"].to_pylist()[:3] == [0, 1, 2]


def test_a_compaction_landing_meanwhile_is_a_conflict(tmp_path) -> None:
    uri = str(tmp_path / "a.lance")
    lance.write_dataset(_table(0, 200), uri, max_rows_per_file=50)
    plan = AddColumnsPlan.plan(lance.dataset(uri), pa.schema([("y", pa.float64())]), ["x"])
    written = _write_all(uri, plan)
    pylance.dataset(uri).optimize.compact_files(target_rows_per_fragment=1000)
    with pytest.raises(lance.CommitConflictError, match="rewrite"):
        plan.operation(lance.dataset(uri), written)
    plan.discard(lance.dataset(uri), written)
    assert not plan.missing_files(lance.dataset(uri), []) and all(
        plan.missing_files(lance.dataset(uri), written))


def test_bad_plans_are_refused_before_anything_is_written(tmp_path) -> None:
    uri = str(tmp_path / "a.lance")
    ds = lance.write_dataset(_table(0, 10), uri)
    with pytest.raises(lance.SchemaEvolutionError, match="nope"):
        AddColumnsPlan.plan(ds, pa.schema([("y", pa.int64())]), ["nope"])
    with pytest.raises(lance.SchemaEvolutionError, match="already exist"):
        AddColumnsPlan.plan(ds, pa.schema([("label", pa.string())]), ["id"])
    with pytest.raises(lance.SchemaEvolutionError, match="do not exist"):
        AddColumnsPlan.plan(ds, pa.schema([("y", pa.int64())]), ["id"], only_missing=True)
    with pytest.raises(lance.SchemaMismatchError, match="int64"):
        AddColumnsPlan.plan(ds, pa.schema([("x", pa.int64())]), ["id"], only_missing=True)
    with pytest.raises(lance.SchemaEvolutionError, match="not the dataset's"):
        AddColumnsPlan.plan(ds, pa.schema([("y", pa.int64())]), ["id"], fragment_ids=[5])
    assert [p.name for p in (tmp_path / "a.lance" / "data").iterdir()] == [
        f.path for f in ds.get_fragments()[0].data_files()]


def test_an_append_may_leave_out_nullable_columns_as_pylance_allows(tmp_path) -> None:
    schema = pa.schema([pa.field("a", pa.int64()), pa.field("b", pa.float64(), False), pa.field("c", pa.string())])
    base = pa.table({"a": [1, 2], "b": [1.0, 2.0], "c": ["x", "y"]}, schema=schema)
    subset = pa.table({"c": ["z"], "b": [3.0]}, schema=pa.schema([schema.field("c"), schema.field("b")]))
    without_b = pa.table({"a": [4]})
    for name, write in (("ours", lance.write_dataset), ("pylance", pylance.write_dataset)):
        uri = str(tmp_path / f"{name}.lance")
        write(base, uri)
        write(subset, uri, mode="append")
        with pytest.raises((lance.SchemaMismatchError, OSError), match="b"):  # b is not nullable
            write(without_b, uri, mode="append")
    ours, theirs = pylance.dataset(str(tmp_path / "ours.lance")), pylance.dataset(str(tmp_path / "pylance.lance"))
    assert ours.to_table() == theirs.to_table()
    assert [sorted(f.data_files()[0].fields) for f in ours.get_fragments()] == [[0, 1, 2], [1, 2]]
    # the fragment lacking ``a`` is what only_missing fills
    ds = lance.dataset(str(tmp_path / "ours.lance"))
    with pytest.raises(lance.SchemaEvolutionError, match="some of the columns"):
        AddColumnsPlan.missing_fragments(ds, ["a", "c"])
    assert AddColumnsPlan.missing_fragments(ds, ["a"]) == [1]

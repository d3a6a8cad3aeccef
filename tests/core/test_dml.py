"""update, merge_insert, insert and LanceOperation.Update on our own datasets (no pylance).

Expected tables are computed with pyarrow from the data written; concurrent writers are our own
(append, delete, compaction, update) through handles opened before their commits.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import airflow_lance.core as lance
from airflow_lance.core import AmbiguousMergeInsertError
from airflow_lance.core.transaction import Transaction


def _table(n: int, start: int = 0) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({
        "id": ids,
        "x": pa.array(ids * 1.5, mask=ids % 7 == 0),
        "s": pa.array([None if i % 4 == 0 else f"s{i}" for i in ids], pa.string()),
        "v": pa.array([[float(i)] * 2 for i in ids], pa.list_(pa.float32(), 2)),
    })


def _listing(uri: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), uri) for d, _, files in os.walk(uri) for f in files)


def _sorted(ds: lance.LanceDataset) -> pa.Table:
    return ds.to_table().sort_by("id")


@pytest.mark.parametrize("version", ["0.1", "2.0", "2.1", "2.2"])
def test_update_rewrites_matching_rows_from_their_old_values(uri, version):
    data = _table(50)
    lance.write_dataset(data, uri, max_rows_per_file=20, data_storage_version=version)
    ds = lance.dataset(uri)
    ds.delete("id = 3")
    live = ds.to_table()  # legacy files store nulls as zeros: the expectation starts from what is read
    assert live["id"].to_pylist() == [i for i in range(50) if i != 3]
    # every assignment sees the old row (x from the old id)
    result = ds.update({"x": "id * 2", "id": "id + 1000"}, where="s IS NOT NULL AND id < 30")
    hit = pc.and_(pc.is_valid(live["s"]), pc.less(live["id"], 30))
    expected = live.set_column(1, "x", pc.if_else(hit, pc.cast(pc.multiply(live["id"], 2), pa.float64()), live["x"]))
    expected = expected.set_column(0, "id", pc.if_else(hit, pc.add(live["id"], 1000), live["id"]))
    assert result == {"num_rows_updated": pc.sum(hit).as_py()}
    assert ds.version == 3 and ds.data_storage_version == version
    assert _sorted(ds).equals(expected.sort_by("id"))
    txn = ds.read_transaction()
    assert isinstance(txn.operation, lance.LanceOperation.Update)
    assert txn.operation.fields_for_preserving_frag_bitmap == [0, 1]
    assert txn.operation.update_mode == "rewrite_rows"
    # fragment 0 (ids 0..19) keeps its unmatched rows behind a deletion vector; fragment 1 too
    assert [f.fragment_id for f in ds.get_fragments()][:3] == [0, 1, 2]
    assert ds.get_fragment(0).metadata.deletion_file is not None


def test_update_of_every_row_of_a_fragment_removes_it(uri):
    lance.write_dataset(_table(30), uri, max_rows_per_file=10)
    ds = lance.dataset(uri)
    assert ds.update({"s": "'x'"}, "id >= 10 AND id < 20") == {"num_rows_updated": 10}
    assert ds.read_transaction().operation.removed_fragment_ids == [1]
    assert [f.fragment_id for f in ds.get_fragments()] == [0, 2, 3]
    assert ds.count_rows("s = 'x'") == 10


def test_update_matching_nothing_commits_a_version(uri):
    lance.write_dataset(_table(10), uri)
    ds = lance.dataset(uri)
    assert ds.update({"x": "0"}, "id > 100") == {"num_rows_updated": 0}
    assert ds.version == 2 and _sorted(ds).equals(_table(10))


def test_update_where_null_is_false_and_type_is_cast(uri):
    lance.write_dataset(_table(10), uri)
    ds = lance.dataset(uri)
    assert ds.update({"x": "1"}, "s = 's1'") == {"num_rows_updated": 1}  # null s never matches
    assert ds.to_table(filter="id = 1")["x"].to_pylist() == [1.0]  # the integer literal is cast to double


def test_merge_insert_upsert_and_sync(uri):
    lance.write_dataset(_table(20), uri, max_rows_per_file=8)
    ds = lance.dataset(uri)
    source = _table(10, 15).set_column(2, "s", pa.array(["new"] * 10))  # ids 15..24
    result = ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(source)
    assert result == {"num_inserted_rows": 5, "num_updated_rows": 5, "num_deleted_rows": 0}
    expected = pa.concat_tables([_table(15), source]).sort_by("id")
    assert _sorted(ds).equals(expected)
    result = (ds.merge_insert("id").when_matched_update_all().when_not_matched_by_source_delete("id < 5")
              .execute(_table(3, 20)))
    assert result == {"num_inserted_rows": 0, "num_updated_rows": 3, "num_deleted_rows": 5}
    assert _sorted(ds)["id"].to_pylist() == list(range(5, 25))
    assert ds.version == 3


def test_merge_insert_condition_and_partial_columns(uri):
    lance.write_dataset(_table(10), uri)
    ds = lance.dataset(uri)
    source = pa.table({"id": pa.array([1, 2, 50], pa.int64()), "x": [100.0, -100.0, 5.0]})
    result = ds.merge_insert("id").when_matched_update_all("source.x > target.x").when_not_matched_insert_all() \
        .execute(source)
    assert result == {"num_inserted_rows": 1, "num_updated_rows": 1, "num_deleted_rows": 0}
    rows = {r["id"]: r for r in ds.to_table().to_pylist()}
    assert rows[1]["x"] == 100.0 and rows[1]["s"] == "s1"  # updated, other columns kept
    assert rows[2]["x"] == 3.0  # condition false: unchanged
    assert rows[50]["s"] is None and rows[50]["v"] is None  # inserted: missing columns are null


def test_merge_insert_duplicate_keys(uri):
    lance.write_dataset(_table(5), uri)
    ds = lance.dataset(uri)
    before = _listing(uri)
    source = pa.table({"id": pa.array([1, 1], pa.int64()), "x": [1.0, 2.0]})
    with pytest.raises(AmbiguousMergeInsertError) as error:
        ds.merge_insert("id").when_matched_update_all().execute(source)
    assert isinstance(error.value, OSError) and isinstance(error.value, lance.LanceError)
    assert "id" in str(error.value)
    assert _listing(uri) == before and ds.version == 1
    # duplicates that match nothing are inserted when only inserts are asked for, as in pylance
    fresh = pa.table({"id": pa.array([9, 9], pa.int64()), "x": [1.0, 2.0]})
    assert ds.merge_insert("id").when_not_matched_insert_all().execute(fresh)["num_inserted_rows"] == 2


def test_insert_moves_the_handle(uri):
    lance.write_dataset(_table(5), uri)
    ds = lance.dataset(uri)
    assert ds.insert(_table(5, 5)) is None
    assert ds.version == 2 and _sorted(ds).equals(_table(10))
    ds.insert(_table(2, 100), mode="overwrite")
    assert ds.version == 3 and ds.count_rows() == 2


CONCURRENT = {
    "append": lambda ds: ds.insert(_table(5, 100)),
    "delete other rows": lambda ds: ds.delete("id IN (1, 11)"),
    "delete updated rows": lambda ds: ds.delete("id IN (2, 12)"),
    "update same rows": lambda ds: ds.update({"s": "'theirs'"}, "id = 4"),
    "compaction": lambda ds: ds.optimize.compact_files(target_rows_per_fragment=1000),
}
UPDATE = ({"x": "-1", "s": "'ours'"}, "id % 2 = 0 AND id < 50")  # not the appended rows


MINE = {
    "update": lambda ds: ds.update(*UPDATE),
    "merge_insert": lambda ds: ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
    .execute(_table(6, 2).set_column(2, "s", pa.array(["ours"] * 6))),  # ids 2..7: matched, 4 and 2 contested
}


@pytest.mark.parametrize("mine", list(MINE))
@pytest.mark.parametrize("theirs", list(CONCURRENT))
def test_dml_against_our_concurrent_writers(tmp_path, theirs, mine):
    """A stale handle's update/merge_insert is rebased or redone on the latest version: the result
    equals running the concurrent operation first, then ours (nothing lost or resurrected)."""
    serial, concurrent = str(tmp_path / "serial"), str(tmp_path / "concurrent")
    for uri in (serial, concurrent):
        lance.write_dataset(_table(20), uri, max_rows_per_file=10)
    CONCURRENT[theirs](lance.dataset(serial))
    expected = MINE[mine](lance.dataset(serial))
    stale = lance.dataset(concurrent)
    CONCURRENT[theirs](lance.dataset(concurrent))
    assert MINE[mine](stale) == expected
    assert stale.version == lance.dataset(concurrent).version
    assert _sorted(stale).equals(_sorted(lance.dataset(serial)))


def test_committing_an_update_built_by_hand(uri):
    """The distributed form: rows rewritten elsewhere, one LanceOperation.Update committed."""
    lance.write_dataset(_table(20), uri, max_rows_per_file=10)
    ds = lance.dataset(uri)
    replacement = _table(10, 10).set_column(2, "s", pa.array(["moved"] * 10))
    new = lance.write_fragments(replacement, uri)
    operation = lance.LanceOperation.Update(removed_fragment_ids=[1], new_fragments=new, fields_modified=[])
    committed = lance.LanceDataset.commit(uri, operation, read_version=ds.version)
    assert committed.version == 2
    assert _sorted(committed).equals(pa.concat_tables([_table(10), replacement]))
    read = committed.read_transaction()
    assert read.kind == "update" and read.operation.removed_fragment_ids == [1]
    assert Transaction.from_pb(read.to_pb()).operation == read.operation


def test_rebased_update_that_empties_a_fragment_removes_it(uri):
    """A concurrent delete took the other rows of the fragment whose rows we move: after the
    rebase (deletion vectors merged) nothing of it is left, so it is removed, as a Delete's is."""
    from airflow_lance.core.update import plan_update

    lance.write_dataset(_table(20), uri, max_rows_per_file=10)
    ds = lance.dataset(uri)
    operation, count = plan_update(ds.store, ds._fragments, ds.lance_schema, {"s": "'moved'"}, "id < 5",
                                   ds.version, ds.data_storage_version, False)
    assert count == 5
    lance.dataset(uri).delete("id >= 5 AND id < 10")
    committed = lance.LanceDataset.commit(uri, operation, read_version=ds.version)
    assert 0 not in [f.fragment_id for f in committed.get_fragments()]
    assert committed.read_transaction().operation.removed_fragment_ids == [0]
    rows = _sorted(committed)
    assert rows["id"].to_pylist() == list(range(5)) + list(range(10, 20))
    assert rows.filter(pc.equal(rows["s"], "moved"))["id"].to_pylist() == list(range(5))


def test_merge_insert_execute_uncommitted_then_commit(uri):
    lance.write_dataset(_table(10), uri)
    ds = lance.dataset(uri)
    source = pa.table({"id": pa.array([3, 30], pa.int64()), "s": ["three", "thirty"]})
    builder = ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
    transaction, stats = builder.execute_uncommitted(source)
    assert stats == {"num_inserted_rows": 1, "num_updated_rows": 1, "num_deleted_rows": 0}
    assert lance.dataset(uri).version == 1 and ds.version == 1  # nothing committed
    committed = lance.LanceDataset.commit(uri, transaction.operation, read_version=transaction.read_version)
    rows = {r["id"]: r["s"] for r in committed.to_table(columns=["id", "s"]).to_pylist()}
    assert rows[3] == "three" and rows[30] == "thirty" and len(rows) == 11

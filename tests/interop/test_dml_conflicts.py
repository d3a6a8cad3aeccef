"""update / merge_insert against concurrent pylance writers, and pylance against ours.

A handle opened before a concurrent commit plans on its (old) version; the commit then checks
the concurrent transaction as Lance does: an Append is compatible, a Delete of other rows of
the same fragments is rebased (deletion vectors merged), a Delete or Update of the same rows
and a compaction of the same fragments are retryable conflicts, and the operation is redone
on the latest version. The oracle is pylance running the same operations one after the other
on an identical copy: the same rows at the end, nothing lost, nothing resurrected.
"""

from __future__ import annotations

import shutil

import lance as pylance
import numpy as np
import pyarrow as pa
import pytest

import airflow_lance.core as ours
from airflow_lance.core.update import plan_update


def _table(n: int, start: int = 0) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, "x": pa.array(ids * 0.5), "s": pa.array([f"s{i}" for i in ids])})


@pytest.fixture(params=[False, True], ids=["plain", "stable"])
def copies(request, tmp_path):
    """(oracle copy, our copy): 30 rows in fragments of 10 written by pylance, one row deleted."""
    oracle = str(tmp_path / "oracle.lance")
    pylance.write_dataset(_table(30), oracle, max_rows_per_file=10, enable_stable_row_ids=request.param).delete(
        "id = 29")
    mine = str(tmp_path / "ours.lance")
    shutil.copytree(oracle, mine)
    return oracle, mine


def _rows(uri: str) -> pa.Table:
    return pylance.dataset(uri).to_table().sort_by("id")


def _kinds(uri: str) -> list[str]:
    ds = ours.dataset(uri)
    return [ds.read_transaction(v["version"]).kind for v in ds.versions()[1:]]


CONCURRENT = {
    "append": lambda ds: ds.insert(_table(5, 100)),
    "delete other rows": lambda ds: ds.delete("id IN (7, 8, 15)"),
    "delete updated rows": lambda ds: ds.delete("id IN (3, 4, 12)"),
    "update other rows": lambda ds: ds.update({"s": "'theirs'"}, "id IN (6, 16)"),
    "update same rows": lambda ds: ds.update({"s": "'theirs'"}, "id IN (3, 13)"),
    "compaction": lambda ds: ds.optimize.compact_files(target_rows_per_fragment=1000),
}
UPDATE = ({"x": "x + 1000", "s": "'ours'"}, "id < 5 OR (id > 10 AND id < 14)")


@pytest.mark.parametrize("theirs", list(CONCURRENT))
def test_our_update_against_concurrent_pylance(copies, theirs):
    oracle, mine = copies
    CONCURRENT[theirs](pylance.dataset(oracle))
    expected = pylance.dataset(oracle).update(*UPDATE)
    handle = ours.dataset(mine)  # planned on version 2
    CONCURRENT[theirs](pylance.dataset(mine))  # commits version 3
    assert handle.update(*UPDATE) == expected
    assert handle.version == ours.dataset(mine).version == pylance.dataset(oracle).version
    assert _rows(mine).equals(_rows(oracle))
    assert _kinds(mine)[-1] == "update"
    assert ours.dataset(mine).to_table().sort_by("id").equals(_rows(oracle))


UPSERT = _table(6, 10).set_column(2, "s", pa.array(["new"] * 6))  # ids 10..15


def _upsert(ds):
    return ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(UPSERT)


@pytest.mark.parametrize("theirs", ["append", "delete other rows", "delete updated rows", "update same rows",
                                    "compaction"])
def test_our_merge_insert_against_concurrent_pylance(copies, theirs):
    oracle, mine = copies
    concurrent = {**CONCURRENT, "delete updated rows": lambda ds: ds.delete("id IN (11, 14)"),
                  "update same rows": lambda ds: ds.update({"x": "-1"}, "id IN (12, 13)")}[theirs]
    concurrent(pylance.dataset(oracle))
    expected = _upsert(pylance.dataset(oracle))
    handle = ours.dataset(mine)
    concurrent(pylance.dataset(mine))
    assert _upsert(handle) == expected
    assert _rows(mine).equals(_rows(oracle))
    assert ours.dataset(mine).to_table().sort_by("id").equals(_rows(oracle))


@pytest.mark.parametrize("ours_first", ["update", "merge_insert"])
def test_pylance_against_our_concurrent_update(copies, ours_first):
    """pylance plans on the old version, reads our Update transaction and rebases or retries."""
    oracle, mine = copies
    mine_op = (lambda ds: ds.update({"x": "-x"}, "id % 4 = 0")) if ours_first == "update" else _upsert
    mine_op(pylance.dataset(oracle))
    pylance.dataset(oracle).update({"s": "'pylance'"}, "id % 3 = 0")
    stale = pylance.dataset(mine)
    mine_op(ours.dataset(mine))
    stale.update({"s": "'pylance'"}, "id % 3 = 0")
    assert _rows(mine).equals(_rows(oracle))
    assert ours.dataset(mine).to_table().sort_by("id").equals(_rows(oracle))


OUTCOMES = {
    "append": "ok",
    "delete other rows": "rebase",
    "delete updated rows": "retry",
    "update other rows": "rebase",
    "update same rows": "retry",
    "compaction": "retry",
}


@pytest.mark.parametrize("theirs", list(OUTCOMES))
def test_outcome_of_a_planned_update_against_pylance(copies, theirs):
    """The single commit attempt: compatible, rebased, or a retryable conflict (never incompatible)."""
    _oracle, mine = copies
    ds = ours.dataset(mine)
    operation, count = plan_update(ds.store, ds._fragments, ds.lance_schema, UPDATE[0], UPDATE[1], ds.version,
                                   ds.data_storage_version, ds._stable_row_ids)
    assert count == 8
    CONCURRENT[theirs](pylance.dataset(mine))
    after_theirs = _rows(mine)
    if OUTCOMES[theirs] == "retry":
        with pytest.raises(ours.CommitConflictError) as error:
            ours.LanceDataset.commit(mine, operation, ds.version)
        assert not isinstance(error.value, ours.IncompatibleTransactionError)
        assert _rows(mine).equals(after_theirs)
        return
    ours.LanceDataset.commit(mine, operation, ds.version)
    rows = _rows(mine)
    assert rows.num_rows == after_theirs.num_rows
    changed = rows.filter(pa.compute.equal(rows["s"], "ours"))["id"].to_pylist()
    assert sorted(changed) == [0, 1, 2, 3, 4, 11, 12, 13]
    if theirs.startswith("delete"):  # their deletions survive the rebase
        assert not {7, 8, 15} & set(rows["id"].to_pylist())
    if theirs.startswith("update"):
        assert sorted(rows.filter(pa.compute.equal(rows["s"], "theirs"))["id"].to_pylist()) == [6, 16]
